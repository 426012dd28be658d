"""The watch of serving pods reads only pods that a workload of ours made, and redacts a pod's
termination message once per run that ended, not on every event of the pod: a pod's events
run on the event loop that also renews the operator's Lease."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

import tritonllm.plan.observed as observed
from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.observe import PodChecks, made_by_ours
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.plan import pod_workloads
from tritonllm.render import render_all

NS = "default"
MULTI_NODE = {"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}


def deployment(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return cr(spec, metadata={"name": "demo", "namespace": NS, "uid": "uid-demo",
                              "generation": 1, "resourceVersion": "1"})


def world(spec: dict[str, Any] | None = None) -> FakeKube:
    """The deployment and the serving workload the operator rendered for it."""
    body = deployment(spec)
    workload = copy.deepcopy(render_all(parse_deployment(body)).workload.body)
    return FakeKube([body, workload])


def pod(owner: tuple[str, str] | None = ("ReplicaSet", "demo-5d4f8"), *, restarts: int = 1,
        ready: bool = False, message: str = "-a" * 2048, uid: str = "p1") -> dict[str, Any]:
    """A serving pod whose container's last run ended with an error (a 4 KiB message of the
    kind that made redaction slow)."""
    refs = [] if owner is None else [{"apiVersion": "apps/v1", "kind": owner[0],
                                      "name": owner[1], "uid": "rs", "controller": True}]
    term = {"exitCode": 1, "reason": "Error", "message": message,
            "finishedAt": f"2026-11-27T10:00:0{restarts}Z"}
    return {
        "metadata": {"name": f"demo-{uid}", "namespace": NS, "uid": uid, "ownerReferences": refs,
                     "labels": {c.LABEL_MANAGED_BY: c.APP_NAME, c.LABEL_INSTANCE: "demo",
                                c.LABEL_COMPONENT: c.COMPONENT_SERVER,
                                "pod-template-hash": "5d4f8"}},
        "status": {"conditions": [{"type": "Ready", "status": str(ready)}],
                   "containerStatuses": [{"name": "triton", "restartCount": restarts,
                                          "state": {"running": {}},
                                          "lastState": {"terminated": term}}]},
    }


@pytest.fixture
def tails(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every termination message redacted (the real log_tail, counted)."""
    seen: list[str] = []
    real = observed.log_tail

    def counted(text: str, *args: Any, **kwargs: Any) -> str:
        seen.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(observed, "log_tail", counted)
    return seen


def test_a_pods_message_is_redacted_once_per_run_that_ended(tails: list[str]) -> None:
    checks = PodChecks()
    assert checks.pod_changed(pod()) == "demo"  # a new failure: reconcile
    for ready in (True, False, True, False):  # a flapping pod: the same ended run
        assert checks.pod_changed(pod(ready=ready)) is None
    assert len(tails) == 1
    assert checks.pod_changed(pod(restarts=2)) == "demo"  # it ended again
    assert checks.pod_changed(pod(restarts=2, ready=True)) is None
    assert len(tails) == 2
    assert checks.pod_changed(pod(uid="p2")) == "demo"  # another pod: its own message
    assert len(tails) == 3
    # deleted: what it said is read once more (its deletion may change it), then forgotten
    gone = pod(restarts=2)
    gone["metadata"]["deletionTimestamp"] = "2026-11-27T10:05:00Z"
    checks.pod_gone(gone)
    assert len(tails) == 4
    assert checks.pod_changed(pod(restarts=2)) is None  # reported already
    assert len(tails) == 5  # computed again: nothing was kept of the deleted pod


def test_the_workload_a_pod_names_is_read_from_its_controllers_name() -> None:
    assert pod_workloads(pod()) == [("Deployment", "demo")]
    lws = pod(("StatefulSet", "demo"))
    assert pod_workloads(lws) == [("LeaderWorkerSet", "demo")]  # a leader
    worker = pod(("StatefulSet", "demo-3"))  # a group's workers
    assert pod_workloads(worker) == [("LeaderWorkerSet", "demo-3"), ("LeaderWorkerSet", "demo")]
    assert pod_workloads(pod(("ReplicaSet", "demo-other"))) == []  # not its template hash
    assert pod_workloads(pod(("Job", "demo-5d4f8"))) == []
    assert pod_workloads(pod(None)) == []


def test_only_pods_made_by_a_workload_of_ours_are_read(tails: list[str]) -> None:
    kube = world()
    cache = kube.cache()
    assert made_by_ours(cache, pod())
    # labelled as ours, but no controller; a ReplicaSet of another Deployment; a StatefulSet
    assert not made_by_ours(cache, pod(None))
    assert not made_by_ours(cache, pod(("ReplicaSet", "other-5d4f8")))
    assert not made_by_ours(cache, pod(("StatefulSet", "demo")))
    # a Deployment of the same name that is not the deployment's (no controller reference)
    kube.objects[("Deployment", NS, "demo")]["metadata"]["ownerReferences"] = []
    assert not made_by_ours(cache, pod())
    # the pod names another deployment than the one whose workload made it
    renamed = pod()
    renamed["metadata"]["labels"][c.LABEL_INSTANCE] = "other"
    assert not made_by_ours(world().cache(), renamed)
    assert tails == []


def test_a_group_pod_of_our_leaderworkerset_is_read() -> None:
    cache = world(MULTI_NODE).cache()
    assert made_by_ours(cache, pod(("StatefulSet", "demo")))  # the leader
    assert made_by_ours(cache, pod(("StatefulSet", "demo-0")))  # a group's worker
    assert not made_by_ours(cache, pod(("ReplicaSet", "demo-5d4f8")))


def test_a_pod_only_labelled_as_ours_costs_nothing_and_reports_nothing(tails: list[str]) -> None:
    async def main() -> None:
        kube = world()
        rec = Reconciler(kube, OperatorSettings(check_gpu_nodes=False),  # type: ignore[arg-type]
                         kube.cache())
        rec.stop()  # requests are dropped: only what the handler keeps is looked at
        dep = parse_deployment(deployment())
        for i in range(5):
            rec.pod_changed(pod(None, ready=bool(i % 2)))
        rec.pod_gone(pod(None))
        assert tails == []
        assert rec._pods.serving_failure(dep, None) is None
        rec.pod_changed(pod())  # the same failure from a pod of our workload
        assert len(tails) == 1
        assert (rec._pods.serving_failure(dep, None) or "").startswith("pod demo-p1: container")

    asyncio.run(main())
