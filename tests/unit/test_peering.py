"""`tritonllm run` without --standalone: its peering object is found, created, or named in one
line with the two ways out (tritonllm.k8s.peering); never a replica that waits in silence."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tritonllm.k8s.client import KubeError
from tritonllm.k8s.peering import PeeringMissing, ensure_peering, leave_peering

NOT_SERVED = "the server could not find the requested resource"


class Stub:
    """The two calls ensure_peering makes, answered from a table."""

    def __init__(self, *, exists: bool = False, get_error: KubeError | None = None,
                 create_error: KubeError | None = None) -> None:
        self.exists, self.get_error, self.create_error = exists, get_error, create_error
        self.created: list[dict[str, Any]] = []
        self.read: list[tuple[str, str | None, str]] = []

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Any:
        self.read.append((kind, namespace, name))
        if self.get_error:
            raise self.get_error
        return {"metadata": {"name": name}} if self.exists else None

    async def create(self, obj: Any) -> bool:
        if self.create_error:
            raise self.create_error
        self.created.append(obj.body)
        return True


def ensure(stub: Stub, namespaces: list[str]) -> list[str]:
    return asyncio.run(ensure_peering(stub, "tritonllm", namespaces))  # type: ignore[arg-type]


def test_an_existing_peering_object_is_left_alone() -> None:
    stub = Stub(exists=True)
    assert ensure(stub, ["team-a", "team-b"]) == []
    assert stub.read == [("KopfPeering", "team-a", "tritonllm"),
                         ("KopfPeering", "team-b", "tritonllm")]
    assert stub.created == []


def test_a_missing_one_is_created_per_watched_namespace_or_cluster_wide() -> None:
    stub = Stub()
    assert ensure(stub, ["team-a"]) == ["KopfPeering 'tritonllm' in namespace team-a"]
    assert stub.created == [{"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
                             "metadata": {"name": "tritonllm", "namespace": "team-a"}}]
    stub = Stub()
    assert ensure(stub, []) == ["ClusterKopfPeering 'tritonllm'"]
    assert stub.created == [{"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
                             "metadata": {"name": "tritonllm"}}]


class Patches:
    """Records leave_peering's merge patches; fails the namespaces named in `failing`."""

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.failing = failing
        self.sent: list[tuple[str, str | None, str, Any]] = []

    async def merge_patch(self, api_version: str, kind: str, namespace: str | None, name: str,
                          body: Any) -> None:
        if namespace in self.failing:
            raise KubeError(503, "Service Unavailable", "")
        self.sent.append((kind, namespace, name, body))


def test_a_stopping_replica_takes_its_record_out_of_each_peering_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A merge patch that nulls the replica's key under status (kopf keeps one record per
    replica there): the paused peers see the change at once. A failure is a warning, and the
    other namespaces are still left."""
    kube = Patches(failing=("team-b",))
    left = asyncio.run(leave_peering(kube, "tritonllm", ["team-a", "team-b", "team-c"],  # type: ignore[arg-type]
                                     "pod-1"))
    assert left == ["KopfPeering 'tritonllm' in namespace team-a",
                    "KopfPeering 'tritonllm' in namespace team-c"]
    assert kube.sent == [("KopfPeering", ns, "tritonllm", {"status": {"pod-1": None}})
                         for ns in ("team-a", "team-c")]
    assert "could not leave KopfPeering 'tritonllm' in namespace team-b" in caplog.text
    kube = Patches()
    assert asyncio.run(leave_peering(kube, "tritonllm", [], "pod-1")) == [  # type: ignore[arg-type]
        "ClusterKopfPeering 'tritonllm'"]
    assert kube.sent == [("ClusterKopfPeering", None, "tritonllm", {"status": {"pod-1": None}})]


def refusal(stub: Stub, namespaces: list[str]) -> str:
    with pytest.raises(PeeringMissing) as info:
        ensure(stub, namespaces)
    line = str(info.value)
    assert "\n" not in line
    return line


def test_no_right_to_create_it_is_one_line_with_the_two_ways_out() -> None:
    forbidden = KubeError(403, "Forbidden", 'kopfpeerings.kopf.dev is forbidden: User '
                          '"system:serviceaccount:team-a:op" cannot create resource')
    line = refusal(Stub(create_error=forbidden), ["team-a"])
    assert line.startswith("KopfPeering 'tritonllm' in namespace team-a does not exist and this "
                           "operator may not create it (403 Forbidden: ")
    assert ("create it (echo '{\"apiVersion\":\"kopf.dev/v1\",\"kind\":\"KopfPeering\","
            "\"metadata\":{\"name\":\"tritonllm\"}}' | kubectl apply -n team-a -f -)") in line
    assert line.endswith("or run with --standalone (one replica, no peering)")


def test_an_uninstalled_peering_crd_names_the_crd_file() -> None:
    line = refusal(Stub(create_error=KubeError(404, "NotFound", NOT_SERVED)), [])
    assert "ClusterKopfPeering 'tritonllm'" in line
    assert "kubectl apply -f crds/kopf.dev_clusterkopfpeerings.yaml" in line
    assert "--standalone" in line


def test_no_right_to_read_it_says_which_rights() -> None:
    line = refusal(Stub(get_error=KubeError(403, "Forbidden", "cannot get")), ["team-a"])
    assert line.startswith("cannot read KopfPeering 'tritonllm' in namespace team-a (403 ")
    assert "grant get, list, watch and patch" in line and "--standalone" in line


def test_the_paused_or_acting_state_follows_the_schedule_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf runs the schedule's daemon only while the replica acts: its life is the state that
    /healthz and tritonllm_operator_acting report."""
    from types import SimpleNamespace

    from tritonllm.handlers import operator
    from tritonllm.handlers.metrics import ACTING
    from tritonllm.handlers.schedule import Schedule

    schedule = Schedule(lambda namespace, name: None)
    monkeypatch.setitem(operator._state, "reconciler", SimpleNamespace(schedule=schedule))

    def gauge() -> float:
        from prometheus_client import REGISTRY

        return float(REGISTRY.get_sample_value("tritonllm_operator_acting") or 0.0)

    assert ACTING is not None
    operator._set_acting(False)
    assert asyncio.run(operator.acting_or_paused()) == "paused" and gauge() == 0

    class Stopped:
        def __init__(self) -> None:
            self.flag = False

        def __bool__(self) -> bool:
            return self.flag

    async def run_daemon() -> tuple[str, float, str, float]:
        stopped = Stopped()
        task = asyncio.create_task(operator.resync(stopped=stopped))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        during = (await operator.acting_or_paused(), gauge())
        stopped.flag = True  # kopf pauses the replica: it stops the daemon
        schedule.stop()
        await asyncio.wait_for(task, timeout=5)
        return (*during, await operator.acting_or_paused(), gauge())

    assert asyncio.run(run_daemon()) == ("acting", 1.0, "paused", 0.0)
