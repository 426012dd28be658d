"""The peer beside tritonllm in bench/scale_bench.py: NVIDIA's NIM operator (k8s-nim-operator).

Its manager binary is built outside CI by bench/build_nim_operator.sh from a snapshot of the
public repository (the Go module proxy refuses the module) and cached under
``~/.cache/tritonllm/bin/nim-operator-<commit>/`` with its CRDs and templates. The bench runs it
on the host against the bench's cluster, as `tritonllm run` is run: the admin kubeconfig, its
metrics and health endpoints on free 127.0.0.1 ports, leader election and webhooks off (its
defaults), watching every namespace (it has no namespace flag).

One NIMService here is the equivalent of the bench's small TritonLLMDeployment: one replica, one
H100 (resource, node selector and the GPU taint's toleration), a ClusterIP Service on port 8000,
model storage in an emptyDir (no NIMCache, no PVC). Its children: ServiceAccount, Role,
RoleBinding, Service, Deployment (standalone platform, in that order, in one reconcile).

Its `Ready` condition comes after its Deployment is available *and* an HTTP GET of the model list
on the Service's cluster IP (`/v1/models`, then `/v1/metadata`) answered: a 404 on both counts as
"no model name", anything else is retried every 5 s. On kwok no pod answers; on this machine the
sandbox's network answers any address with a 404, so the condition comes within milliseconds of
the Deployment's readiness. Elsewhere (no route to 10.96.0.0/16) it may never come; the bench
records the Deployment's readiness separately for that reason.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.cluster.operator_harness import Operator, stop
from tests.helpers import free_port

from tritonllm.k8s.client import RESOURCES, Resource
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.manifests import GPU_PRODUCT_LABEL, GPU_RESOURCE, GPU_TAINT, H100
from tritonllm_dev.testing import wait_for

GROUP, VERSION, PLURAL, KIND = "apps.nvidia.com", "v1alpha1", "nimservices", "NIMService"
API_VERSION = f"{GROUP}/{VERSION}"
CHILDREN = ("ServiceAccount", "Role", "RoleBinding", "Service", "Deployment")
CONTROLLER = "nimservice"  # controller-runtime's name for its NIMService controller
METRICS_READER = "nim-bench-metrics"

# the bench applies NIMServices through the operator's own client (same path, same concurrency)
RESOURCES.setdefault((API_VERSION, KIND), Resource(PLURAL))

BUILD_HINT = """\
the NIM operator's manager binary was not found ({where}). Build it once, outside CI:
  1. take a snapshot of github.com/NVIDIA/k8s-nim-operator (the Go module proxy refuses the
     module): a clone, or the session tool `fetch github:NVIDIA/k8s-nim-operator`
  2. bench/build_nim_operator.sh SNAPSHOT   (bare git dir or source tree; vendored, no network)
then pass --nim-binary ~/.cache/tritonllm/bin/nim-operator-<commit>/manager (found by default).
The bench goes on without the peer."""


def find_binary(given: str | None) -> Path | None:
    """The manager to run: `given`, else the newest cached build; None when there is none."""
    if given:
        path = Path(given).expanduser()
        return path if path.is_file() and os.access(path, os.X_OK) else None
    cache = Path(os.environ.get("TRITONLLM_CACHE", Path.home() / ".cache" / "tritonllm"))
    builds = sorted((cache / "bin").glob("nim-operator-*/manager"),
                    key=lambda p: p.stat().st_mtime)
    return builds[-1] if builds else None


def nimservice(name: str, namespace: str) -> dict[str, Any]:
    """A NIMService equivalent to the bench's small TritonLLMDeployment (the image is never
    pulled: kwok runs no containers)."""
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "1.8.4",
                      "pullPolicy": "IfNotPresent"},
            "storage": {"emptyDir": {}},
            "replicas": 1,
            "resources": {"limits": {GPU_RESOURCE: 1}, "requests": {GPU_RESOURCE: 1}},
            "nodeSelector": {GPU_PRODUCT_LABEL: H100},
            "tolerations": [{"key": GPU_TAINT["key"], "operator": "Exists",
                             "effect": GPU_TAINT["effect"]}],
            "expose": {"service": {"type": "ClusterIP", "port": 8000}},
        },
    }


def children_of(name: str) -> list[tuple[str, str]]:
    """(kind, name) of what the NIM operator creates for one such NIMService, in its order."""
    return [(kind, name) for kind in CHILDREN]


def is_ready(obj: dict[str, Any]) -> bool:
    return any(cond.get("type") == "Ready" and cond.get("status") == "True"
               for cond in (obj.get("status") or {}).get("conditions") or [])


def install_crds(cluster: LocalCluster, binary: Path) -> None:
    """Its CRDs (all nine: the manager starts a controller per kind and fails without them)."""
    crds = binary.parent / "crds"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))


def metrics_token(cluster: LocalCluster, namespace: str) -> str:
    """A bearer token its metrics endpoint accepts: the endpoint authenticates (TokenReview) and
    authorizes (SubjectAccessReview of GET /metrics) every scrape."""
    cluster.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": METRICS_READER, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": METRICS_READER},
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{METRICS_READER}-{namespace}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": METRICS_READER},
         "subjects": [{"kind": "ServiceAccount", "name": METRICS_READER,
                       "namespace": namespace}]},
    ])
    return cluster.kubectl("create", "token", METRICS_READER, "-n", namespace,
                           "--duration=2h").stdout.strip()


class Manager(Operator):
    """The running manager: tritonllm's harness view of an operator process (its /healthz, its
    log), with the bearer token its metrics endpoint asks for."""

    def __init__(self, proc: subprocess.Popen[bytes], metrics_port: int, health_port: int,
                 log: Path, token: str) -> None:
        super().__init__(proc, metrics_port, health_port, log)
        self.token = token

    def metrics(self) -> str:
        req = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return str(r.read().decode())


def release(cluster: LocalCluster, namespace: str) -> None:
    """Drop the NIM operator's finalizer from the NIMServices left in `namespace` (it is
    stopped after its phase): without it their namespace would stay Terminating, and its
    Deployments and pods would weigh on the next runs on this cluster."""
    from kubernetes import client as k8s

    api = k8s.CustomObjectsApi(cluster.api_client())
    items = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    for item in items:
        if item["metadata"].get("finalizers"):
            api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                               item["metadata"]["name"],
                                               {"metadata": {"finalizers": None}})


@contextlib.contextmanager
def run_manager(cluster: LocalCluster, binary: Path, token: str, tmp: Path) -> Iterator[Manager]:
    metrics_port, health_port = free_port(), free_port()
    log = tmp / "nim-operator.log"
    args = [str(binary), f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}", "--leader-elect=false"]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ENABLE_WEBHOOKS": "false"}
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    manager = Manager(proc, metrics_port, health_port, log, token)
    try:
        wait_for(lambda: manager.healthy() or proc.poll() is not None, timeout=120,
                 what="NIM operator /healthz")
        if proc.poll() is not None:
            raise RuntimeError(f"the NIM operator exited ({proc.returncode}):\n"
                               + log.read_text(errors="replace")[-3000:])
        yield manager
    finally:
        if proc.poll() is None:
            stop(proc)
