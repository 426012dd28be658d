"""Run `tritonllm run` against the local cluster for a test, and read what it did.

The operator runs as a real subprocess (its own event loop, kopf registry and metrics), watching
only the test's namespace, with a short resync so level-based behaviour shows within seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers import example_body, free_port
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

TRITONLLM = str(Path(sys.executable).with_name("tritonllm"))
WRITE_VERBS = ("apply", "patch", "create", "delete", "event")


class Operator:
    def __init__(
        self, proc: subprocess.Popen[bytes], metrics_port: int, health_port: int, log: Path
    ) -> None:
        self.proc = proc
        self.metrics_port = metrics_port
        self.health_port = health_port
        self.log = log

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a metric's samples whose labels include `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            sample_labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
            if all(sample_labels.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def writes(self) -> float:
        return sum(self.metric("tritonllm_api_calls_total", verb=v) for v in WRITE_VERBS)

    def healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def health(self) -> dict[str, Any]:
        """/healthz's body: kopf's probes, ours says {"state": "acting" | "paused"} (kopf
        recomputes it at most every 10 s)."""
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as r:
            return dict(json.loads(r.read()))

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def run_operator(
    cluster: LocalCluster,
    namespace: str,
    tmp: Path,
    *,
    peering: str | None = None,
    resync: float = 3.0,
    tag: str = "op",
    kubeconfig: Path | None = None,
    tools_image: str = "registry.invalid/tritonllm:test",
    log_level: str = "INFO",
    env: dict[str, str] | None = None,
    leader_election: str | None = None,
    metrics_port: int | None = None,
) -> Iterator[Operator]:
    """`tritonllm run` on `namespace` (with the cluster's admin kubeconfig unless given); pods
    on kwok nodes never pull `tools_image`, the real node's pull the operator image from the
    local registry. `metrics_port`: a port chosen beforehand (a Prometheus scraping it)."""
    metrics_port, health_port = metrics_port or free_port(), free_port()
    log = tmp / f"{tag}.log"
    args = [
        TRITONLLM,
        "run",
        "--kubeconfig",
        str(kubeconfig or cluster.kubeconfig),
        "-n",
        namespace,
        "--metrics-port",
        str(metrics_port),
        "--health-port",
        str(health_port),
        "--bind-address",
        "127.0.0.1",
        "--log-format",
        "text",
        "--log-level",
        log_level,
        "--resync-seconds",
        str(resync),
        "--tools-image",
        tools_image,
    ]
    env = {**os.environ, **(env or {}), "TRITONLLM_PEERING": peering or ""}
    if leader_election:  # a Lease in the watched namespace elects the acting replica
        args += ["--leader-election", leader_election]
        env.setdefault("TRITONLLM_LEADER_ELECTION_NAMESPACE", namespace)
    elif not peering:
        args.append("--standalone")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    op = Operator(proc, metrics_port, health_port, log)
    try:
        wait_for(op.healthy, timeout=60, what="operator /healthz")
        yield op
    finally:
        if proc.poll() is None:
            stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the operator's process group, SIGKILL if it is not gone in 30 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def load_example(name: str, namespace: str) -> dict[str, Any]:
    """examples/<name>.yaml, in `namespace`."""
    obj = example_body(name)
    obj["metadata"]["namespace"] = namespace
    return obj


def prepare_namespace(
    cluster: LocalCluster, namespace: str, *, store: bool = True, secret: bool = True
) -> None:
    """What a user has before applying a CR: the token Secret and a model-store claim."""
    objs: list[dict[str, Any]] = []
    if secret:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "hf-token", "namespace": namespace},
                "stringData": {"HF_TOKEN": "hf_test_token"},
            }
        )
    if store:
        objs += store_objects(namespace)
    if objs:
        cluster.apply(objs)


def store_objects(namespace: str, claim: str = "tritonllm-model-store") -> list[dict[str, Any]]:
    """A claim and a volume pre-bound to it (the local cluster has no storage provisioner)."""
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": f"{namespace}-store"},
         "spec": {"capacity": {"storage": "2Ti"}, "accessModes": ["ReadWriteMany"],
                  "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                  "hostPath": {"path": f"/tmp/tritonllm-store/{namespace}"},
                  "claimRef": {"namespace": namespace, "name": claim}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": claim, "namespace": namespace},
         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                  "resources": {"requests": {"storage": "100Gi"}}}},
    ]


def get_cr(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "tllm", name, "-n", namespace))


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return {}


def wait_condition(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    type_: str,
    status: str = "True",
    *,
    reason: str | None = None,
    timeout: float = 120,
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = get_cr(cluster, namespace, name)
        cond = condition(obj, type_)
        if cond.get("status") == status and (reason is None or cond.get("reason") == reason):
            return obj
        return None

    return wait_for(
        probe,
        timeout=timeout,
        interval=0.5,
        what=f"{name} {type_}={status}" + (f" ({reason})" if reason else ""),
    )


def wait_ready(
    cluster: LocalCluster, namespace: str, name: str, timeout: float = 180
) -> dict[str, Any]:
    return wait_condition(
        cluster, namespace, name, "Progressing", "False", reason="Deployed", timeout=timeout
    )


def jobs(cluster: LocalCluster, namespace: str, prefix: str = "") -> list[str]:
    items = cluster.kubectl_json("get", "jobs", "-n", namespace)["items"]
    return [j["metadata"]["name"] for j in items if j["metadata"]["name"].startswith(prefix)]


def events(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return list(items)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:4000]


def elapsed(start: float) -> float:
    return round(time.monotonic() - start, 1)
