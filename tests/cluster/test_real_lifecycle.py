"""A deployment's lifecycle on real containers, under a steady client load: an engine change
builds the new engine while the old pod serves and rolls over with zero failed requests;
deleting one of two serving pods loses no request and the pod drains on SIGTERM; deleting the
deployment removes its pods, and with storage.engineRetention Delete its engine record and the
engine's files on the claim.

One deployment goes through every step (each starts from what the previous one left, as a
running service would). It is the CPU stand-in example with tensor parallelism 1, so a pod takes
one of the real node's stand-in GPUs and a rollout's surge pod (or a build beside a serving
pod) fits. The namespace enforces Pod Security `restricted`. The client runs on the host and
reaches the pods through the Service's ClusterIP (kube-proxy); a new connection per request, as
load balancers' clients do. Nothing is simulated but the GPUs.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.operator_harness import Operator, get_cr, jobs, run_operator
from tests.cluster.test_real_flow import (
    EXAMPLE,
    EXPECTED_4,
    PROMPT,
    _diagnose,
    _first_answer,
    _pods,
    _service_ip,
    _volume_dir,
    seeded,
)
from tests.helpers import example_body
from tritonllm.api.constants import LABEL_ENGINE_KEY
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for
from tritonllm_dev.versions import KUBERNETES

pytestmark = pytest.mark.cluster

NAME = "lifecycle"
CLIENTS = 3  # concurrent client threads: at most this many requests are in flight at once


def lifecycle_cr() -> dict[str, Any]:
    obj = example_body(EXAMPLE.stem)
    obj["metadata"] = {"name": NAME}
    spec = obj["spec"]
    spec["engine"]["parallelism"] = {"tensor": 1, "pipeline": 1}
    # Two pods, or one pod and a build (or a surge pod), fit the node's 2 CPUs.
    spec["podTemplate"]["resources"] = {"cpu": "0.9", "memory": "3Gi"}
    spec["storage"]["engineRetention"] = "Delete"
    return obj


@dataclass
class Load:
    """Steady generate requests from CLIENTS threads; every result is kept with its times."""

    url: str
    length_input: str = "max_tokens"  # llmapi: sampling_param_max_tokens
    results: list[tuple[float, float, str | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _client(self) -> None:
        body = json.dumps({"text_input": PROMPT, self.length_input: 4}).encode()
        while not self._stop.is_set():
            start = time.monotonic()
            error: str | None = None
            try:
                req = urllib.request.Request(self.url, body, method="POST",
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as resp:
                    out = json.loads(resp.read())
                if out.get("text_output") != EXPECTED_4:
                    error = f"wrong answer {out}"
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.results.append((start, time.monotonic(), error))
            time.sleep(0.05)

    def __enter__(self) -> Load:
        for _ in range(CLIENTS):
            t = threading.Thread(target=self._client, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=40)

    def between(self, start: float, end: float) -> tuple[int, list[str]]:
        """(answered, failures) of the requests started in [start, end]."""
        window = [r for r in self.results if start <= r[0] <= end]
        return (sum(1 for r in window if r[2] is None), [r[2] for r in window if r[2]])


@dataclass
class Figures:
    rollover_requests: int = 0
    rollover_failed: int = 0
    rollover_seconds: float = 0.0
    delete_requests: int = 0
    delete_failed: int = 0
    drain_seconds: float = 0.0  # pod deletion -> serving container exited
    gone_seconds: float = 0.0  # pod deletion -> pod object gone
    failures: list[str] = field(default_factory=list)


def _serving(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    return [p for p in _pods(cluster, ns, "server") if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    return all(s.get("ready") for s in pod["status"].get("containerStatuses") or [{}])


def rollover(cluster: LocalCluster, ns: str, op: Operator | None, figures: Figures) -> None:
    """An engine change (limits.maxBatchSize) under load: the build Job runs while the old pod
    keeps serving, then the Deployment rolls over (surge one, remove one); zero failures."""
    old_key = get_cr(cluster, ns, NAME)["status"]["engine"]["key"]
    url = f"http://{_service_ip(cluster, ns, NAME)}:8000/v2/models/ensemble/generate"
    with Load(url) as load:
        time.sleep(2)
        start = time.monotonic()
        cluster.kubectl("patch", "tllm", NAME, "-n", ns, "--type=merge", "-p",
                        json.dumps({"spec": {"engine": {"limits": {"maxBatchSize": 2}}}}))
        build_seen: list[float] = []

        def rolled() -> bool:
            if not build_seen and any(j.startswith("tritonllm-build-") and old_key not in j
                                      for j in jobs(cluster, ns, "tritonllm-build-")):
                build_seen.append(time.monotonic())
            cr = get_cr(cluster, ns, NAME)
            key = ((cr.get("status") or {}).get("engine") or {}).get("key")
            pods = _pods(cluster, ns, "server")
            return (key != old_key and len(pods) == 1 and _ready(pods[0])
                    and pods[0]["metadata"]["labels"][LABEL_ENGINE_KEY] == key)

        try:
            wait_for(rolled, timeout=300, interval=0.5, what="rolled over to the new engine")
        except Exception as exc:
            raise AssertionError(f"{exc}\n{_diagnose(cluster, ns, op)}") from exc
        figures.rollover_seconds = time.monotonic() - start
        time.sleep(3)
        end = time.monotonic()
    answered, failures = load.between(start, end)
    figures.rollover_requests, figures.rollover_failed = answered + len(failures), len(failures)
    figures.failures += failures
    assert build_seen, "no build Job for the new engine"
    # The old pod answered while the new engine was being built.
    during_build, _ = load.between(build_seen[0], build_seen[0] + 5)
    assert during_build > 0


def delete_one_pod(cluster: LocalCluster, ns: str, op: Operator | None, figures: Figures) -> None:
    """Two serving pods, one deleted under load: the other takes every request, the deleted one
    serves through its preStop pause, then drains on SIGTERM (tritonserver exits 0)."""
    cluster.kubectl("patch", "tllm", NAME, "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": {"serving": {"replicas": 2}}}))
    try:
        wait_for(lambda: len(pods := _serving(cluster, ns)) == 2 and all(map(_ready, pods)),
                 timeout=240, interval=1, what="two serving pods Ready")
    except Exception as exc:
        raise AssertionError(f"{exc}\n{_diagnose(cluster, ns, op)}") from exc
    victim = _serving(cluster, ns)[0]["metadata"]["name"]
    url = f"http://{_service_ip(cluster, ns, NAME)}:8000/v2/models/ensemble/generate"
    logs = subprocess.Popen(
        [str(KUBERNETES.path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", "logs", "-f",
         victim, "-n", ns, "-c", "triton", "--since=1s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with Load(url) as load:
        time.sleep(3)
        start = time.monotonic()
        cluster.kubectl("delete", "pod", victim, "-n", ns, "--wait=false")
        out, _ = logs.communicate(timeout=120)  # ends when the container has exited
        figures.drain_seconds = time.monotonic() - start
        wait_for(lambda: cluster.kubectl("get", "pod", victim, "-n", ns,
                                         check=False).returncode != 0,
                 timeout=120, interval=0.2, what=f"{victim} gone")
        figures.gone_seconds = time.monotonic() - start
        time.sleep(2)
        end = time.monotonic()
    answered, failures = load.between(start - 1, end)
    figures.delete_requests, figures.delete_failed = answered + len(failures), len(failures)
    figures.failures += failures
    assert "tritonllm launch event=drain" in out, out[-3000:]
    assert "tritonllm launch event=exit code=0" in out, out[-3000:]


def delete_deployment(cluster: LocalCluster, ns: str, op: Operator | None) -> tuple[str, str]:
    """engineRetention Delete: pods and Jobs go with the deployment, the engine record is
    forgotten and a cleanup Job removes the engine's files; returns (key, old key)."""
    cr = get_cr(cluster, ns, NAME)
    key = cr["status"]["engine"]["key"]
    store = _volume_dir(cluster, ns, "tritonllm-cpu-store")
    assert (store / "engines" / key / "artifact.json").is_file()
    cluster.kubectl("delete", "tllm", NAME, "-n", ns, "--timeout=60s")
    try:
        wait_for(lambda: not _pods(cluster, ns, "server")
                 and not (store / "engines" / key).exists(),
                 timeout=180, interval=0.5, what="pods gone and the engine's files removed")
    except Exception as exc:
        raise AssertionError(f"{exc}\n{_diagnose(cluster, ns, op)}") from exc
    assert cluster.kubectl("get", "tllme", key, "-n", ns, check=False).returncode != 0
    # The files are gone once its command ran; the pod reports Succeeded a moment later.
    def cleaned() -> bool:
        (clean,) = _pods(cluster, ns, "engine-cleanup")
        assert clean["status"]["phase"] in ("Running", "Succeeded"), clean["status"]
        return bool(clean["status"]["phase"] == "Succeeded")

    wait_for(cleaned, timeout=30, interval=0.5, what="the engine cleanup pod Succeeded")
    return key, str(store)


def test_lifecycle_on_real_pods_under_load(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    refs = seeded(cluster, ns)
    figures = Figures()
    with run_operator(cluster, ns, tmp_path, tools_image=refs["operator"]) as op:
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(lifecycle_cr()))
        cr, _ = _first_answer(cluster, ns, NAME, op, 420)
        first_key = cr["status"]["engine"]["key"]

        rollover(cluster, ns, op, figures)
        print(f"\n[measure] rollover to a new engine under load: {figures.rollover_requests} "
              f"requests, {figures.rollover_failed} failed, {figures.rollover_seconds:.1f} s "
              "from the spec change to the new pod alone")
        assert figures.rollover_requests > 20 and figures.rollover_failed == 0, figures.failures

        delete_one_pod(cluster, ns, op, figures)
        print(f"[measure] one of two pods deleted under load: {figures.delete_requests} "
              f"requests, {figures.delete_failed} failed; container exited after "
              f"{figures.drain_seconds:.1f} s (5 s preStop + drain), pod gone after "
              f"{figures.gone_seconds:.1f} s")
        # At most the deleted pod's in-flight requests may fail (fewer than CLIENTS); with the
        # preStop pause, none does.
        assert figures.delete_failed == 0, figures.failures
        assert figures.delete_requests > 10

        key, store = delete_deployment(cluster, ns, op)
        assert key != first_key
        # The engine from before the rollover is not this deployment's any more: it stays as
        # cache (its record too).
        assert (Path(store) / "engines" / first_key / "artifact.json").is_file()
        assert cluster.kubectl("get", "tllme", first_key, "-n", ns, check=False).returncode == 0
