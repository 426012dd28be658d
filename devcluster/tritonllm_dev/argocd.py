"""Argo CD on the local cluster: its controller and repo server run on the host, like the control
plane, against the cluster's admin kubeconfig (no pods, no images).

What runs (one ``argocd`` binary built from the Go module, see :mod:`tritonllm_dev.build`;
the process it becomes is chosen by ``ARGOCD_BINARY_NAME``, as by argv[0] in Argo CD's images):

- ``redis-server`` (Debian's) on 127.0.0.1, no persistence: Argo CD's cache;
- ``argocd-repo-server`` on 127.0.0.1, plaintext gRPC: renders Applications (``helm`` from the
  cache is on its PATH, ``git`` from the host; repositories are ``file://`` URLs);
- ``argocd-application-controller``: compares, syncs, assesses health, writes Application status.

Not run: the API server and UI (``argocd-server``), Dex, notifications, ApplicationSets. Tests read
Applications with kubectl. Settings are Argo CD's own ConfigMaps in the ``argocd`` namespace
(``argocd-cm`` with the TritonLLMDeployment health check, ``argocd-secret``), and the ``default``
AppProject, which Argo CD's API server would otherwise create.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonllm_dev.build import build_component
from tritonllm_dev.local import ClusterError, LocalCluster, _free_port
from tritonllm_dev.tier import HostTier, http_ok
from tritonllm_dev.versions import ARGOCD, ARGOCD_CRD_FILES, HELM

NAMESPACE = "argocd"
#: Seconds between the controller's periodic refreshes (Argo CD's default is 120 s; events on
#: watched resources refresh an Application at once either way).
APP_RESYNC_SECONDS = 20


def argocd_binary() -> Path:
    build_component(ARGOCD)
    return ARGOCD.path("argocd")


def settings_objects(health: dict[str, str], namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """argocd-cm (``health``: extra data keys, e.g. resource customizations), argocd-secret and
    the ``default`` AppProject."""
    labels = {"app.kubernetes.io/part-of": "argocd"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "argocd-cm",
                "namespace": namespace,
                "labels": {**labels, "app.kubernetes.io/name": "argocd-cm"},
            },
            "data": dict(health),
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "argocd-secret",
                "namespace": namespace,
                "labels": {**labels, "app.kubernetes.io/name": "argocd-secret"},
            },
            "stringData": {"server.secretkey": secrets.token_hex(16)},
        },
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": {"name": "default", "namespace": namespace},
            "spec": {
                "sourceRepos": ["*"],
                "destinations": [{"namespace": "*", "server": "*"}],
                "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
            },
        },
    ]


class ArgoCD(HostTier):
    """Argo CD's controller, repo server and Redis for ``cluster``; a context manager."""

    label = "argo cd"

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        *,
        argocd_cm: dict[str, str] | None = None,
        progress: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        super().__init__(workdir)
        self.cluster = cluster
        self.argocd_cm = argocd_cm or {}
        self.progress = progress
        self.redis_port = 0
        self.repo_port = 0
        self.repo_metrics_port = 0
        self.controller_metrics_port = 0

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 120) -> None:
        argocd = argocd_binary()
        build_component(HELM)
        redis = shutil.which("redis-server")
        if not redis:
            raise ClusterError(
                "redis-server is not on PATH (Argo CD's cache): "
                "apt-get install redis-server (the README commands do)"
            )
        if not shutil.which("git"):
            raise ClusterError("git is not on PATH (Argo CD's repo server runs it)")
        self.install()
        self.workdir.mkdir(parents=True, exist_ok=True)
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        self.redis_port, self.repo_port = _free_port(), _free_port()
        self.repo_metrics_port, self.controller_metrics_port = _free_port(), _free_port()
        self.spawn(
            "redis",
            [
                redis,
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            {},
        )
        base_env = {
            "HOME": str(home),
            # helm for charts, git-verify-wrapper.sh (next to argocd) for every revision
            "PATH": os.pathsep.join((str(HELM.bindir), str(ARGOCD.bindir), os.environ["PATH"])),
            "TMPDIR": str(self.workdir),
            "ARGOCD_GPG_ENABLED": "false",
        }
        redis_addr = f"127.0.0.1:{self.redis_port}"
        self.spawn(
            "repo-server",
            [
                str(argocd),
                "--port",
                str(self.repo_port),
                "--address",
                "127.0.0.1",
                "--metrics-address",
                "127.0.0.1",
                "--metrics-port",
                str(self.repo_metrics_port),
                "--redis",
                redis_addr,
                "--disable-tls",
                "--client-ca-path",  # its default (a pod's mounted Secret) conflicts with no TLS
                "",
                "--logformat",
                "text",
            ],
            {**base_env, "ARGOCD_BINARY_NAME": "argocd-repo-server"},
        )
        self.spawn(
            "application-controller",
            [
                str(argocd),
                "--kubeconfig",
                str(self.cluster.kubeconfig),
                "--namespace",
                NAMESPACE,
                "--repo-server",
                f"127.0.0.1:{self.repo_port}",
                "--repo-server-plaintext",
                "--redis",
                redis_addr,
                "--metrics-port",
                str(self.controller_metrics_port),
                "--status-processors",
                "2",
                "--operation-processors",
                "2",
                "--app-resync",
                str(APP_RESYNC_SECONDS),
                # each resource's health message in the Application's status (kubectl shows it)
                "--persist-resource-health",
                "--logformat",
                "text",
            ],
            {
                **base_env,
                "ARGOCD_BINARY_NAME": "argocd-application-controller",
                # the in-cluster destination (https://kubernetes.default.svc) from KUBECONFIG,
                # as Argo CD's own local development runs it, instead of a pod's service account
                "ARGOCD_FAKE_IN_CLUSTER": "true",
                "KUBECONFIG": str(self.cluster.kubeconfig),
            },
        )
        deadline = time.monotonic() + timeout
        for name, port in (
            ("repo-server", self.repo_metrics_port),
            ("application-controller", self.controller_metrics_port),
        ):
            while not http_ok(f"http://127.0.0.1:{port}/metrics"):
                self.check_alive()
                if time.monotonic() > deadline:
                    raise ClusterError(f"argo cd {name} did not answer within {timeout:.0f}s")
                time.sleep(0.5)
        self.progress(f"argo cd {ARGOCD.version} running (logs in {self.workdir})")

    def install(self) -> None:
        """Namespace, Argo CD's CRDs (from its module), its settings and the default project."""
        self.cluster.apply(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
        )
        crds = [str(ARGOCD.path(name)) for name in ARGOCD_CRD_FILES]
        args = ["apply", "--server-side", "--force-conflicts", "--field-manager=tritonllm-cluster"]
        for path in crds:
            args += ["-f", path]
        self.cluster.kubectl(*args)
        self.cluster.wait_established("applications.argoproj.io", "appprojects.argoproj.io")
        self.cluster.apply(settings_objects(self.argocd_cm))

    # ---- Applications ------------------------------------------------------------------------

    def application(self, name: str) -> dict[str, Any]:
        return dict(
            self.cluster.kubectl_json("get", "applications.argoproj.io", name, "-n", NAMESPACE)
        )


def application(
    name: str,
    repo_url: str,
    path: str,
    namespace: str,
    *,
    helm_values: str | None = None,
    automated: bool = True,
) -> dict[str, Any]:
    """An Application of a path in a git repository, synced into ``namespace``."""
    source: dict[str, Any] = {"repoURL": repo_url, "targetRevision": "HEAD", "path": path}
    if helm_values is not None:
        source["helm"] = {"values": helm_values}
    spec: dict[str, Any] = {
        "project": "default",
        "source": source,
        "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
    }
    if automated:
        spec["syncPolicy"] = {"automated": {"prune": True, "selfHeal": True}}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def resource_health(argocd_cm: Path, obj: Path) -> tuple[str, str]:
    """Argo CD's own health assessment of ``obj`` with the customizations in ``argocd_cm``
    (``argocd admin settings resource-overrides health``): (status, message)."""
    proc = subprocess.run(
        [
            str(argocd_binary()),
            "admin",
            "settings",
            "resource-overrides",
            "health",
            str(obj),
            "--argocd-cm-path",
            str(argocd_cm),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ARGOCD_BINARY_NAME": "argocd"},
        timeout=60,
    )
    if proc.returncode != 0 or "STATUS: " not in proc.stdout:
        raise ClusterError(f"argocd health {obj}: {proc.stdout}{proc.stderr}")
    status = message = ""
    for line in proc.stdout.splitlines():
        if line.startswith("STATUS: "):
            status = line.removeprefix("STATUS: ")
        elif line.startswith("MESSAGE: "):
            message = line.removeprefix("MESSAGE: ")
    return status, message
