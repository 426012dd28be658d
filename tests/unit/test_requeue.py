"""Decision.requeue_after is honoured: a waiting step is retried at its stated delay, not at resync.

The reconciler runs for real (render, plan, execute) against an in-memory API server, on an event
loop with a virtual clock that jumps to the next timer whenever nothing else is ready, so a 20 s
backoff takes no real time and the times below are exact.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.reconciler import (
    ERROR_REQUEUE_SECONDS,
    MAX_ERROR_REQUEUE_SECONDS,
    Reconciler,
    error_backoff_seconds,
)
from tritonllm.handlers.schedule import Schedule
from tritonllm.k8s.client import KubeError
from tritonllm.plan.deletion import FINALIZER
from tritonllm.plan.engine import MIN_REQUEUE_SECONDS, backoff_seconds
from tritonllm.plan.status import PROGRESS_REQUEUE_SECONDS
from tritonllm.render import naming, render_all

T0 = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)
RESYNC = 3600.0
FAILED_AGO = 10.0  # the build failed this long before the test starts


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """asyncio with a virtual clock: when nothing is ready, time jumps to the next timer."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual = 0.0

    def time(self) -> float:
        return self._virtual

    def _run_once(self) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        if not self._ready and scheduled:  # type: ignore[attr-defined]
            self._virtual = max(self._virtual, scheduled[0]._when)
        super()._run_once()  # type: ignore[misc]


def run_virtual(main: Callable[[], Awaitable[None]]) -> None:
    loop = VirtualClockLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


class Never:
    """A daemon stopper that is never set (the replica keeps acting for the object)."""

    def __init__(self) -> None:
        self.stopped = False

    def __bool__(self) -> bool:
        return self.stopped


def failed_build_world() -> tuple[FakeKube, str]:
    """A deployment whose build Job failed FAILED_AGO seconds before the test's time 0."""
    body = cr(metadata={"name": "demo", "namespace": "default", "generation": 1})
    dep = parse_deployment(body)
    r = render_all(dep)
    job = r.build_job.name
    kube = FakeKube(
        [
            body,
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": dep.spec.storage.claimName, "namespace": "default"}},
            {**r.build_job.body, "status": {"conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}},
        ]
    )
    kube.objects[("Job", "default", job)]["metadata"]["uid"] = "j1"
    failed_at = (T0 - dt.timedelta(seconds=FAILED_AGO)).strftime("%Y-%m-%dT%H:%M:%SZ")
    engine = {
        "apiVersion": c.API_VERSION, "kind": c.ENGINE_KIND,
        "metadata": {"name": naming.engine_key(dep), "namespace": "default"},
        "status": {"state": "Failed", "attempts": 1, "buildJobUid": "j1", "lastFailure": {
            "reason": "BackoffLimitExceeded", "time": failed_at, "job": "j1"}},
    }
    kube.put(engine)
    return kube, job


def reconciler(kube: FakeKube) -> Reconciler:
    settings = OperatorSettings(resync_seconds=RESYNC, check_gpu_nodes=False)
    loop_time = lambda: asyncio.get_running_loop().time()  # noqa: E731
    clock = lambda: T0 + dt.timedelta(seconds=loop_time())  # noqa: E731
    return Reconciler(kube, settings, kube.cache(), clock=clock)


def test_a_build_backoff_is_retried_when_it_runs_out_not_at_resync() -> None:
    kube, job = failed_build_world()
    wait = backoff_seconds(1) - FAILED_AGO  # 20 s: what the planner states
    recreate = wait + MIN_REQUEUE_SECONDS  # the pass after the deletion creates a fresh Job
    seen: dict[str, Any] = {}

    async def main() -> None:
        r = reconciler(kube)
        stopped = Never()
        daemon = asyncio.create_task(r.schedule.run(stopped))
        r.request("default", "demo")  # the watch event of the object
        await r.wait_idle()
        seen["first_due"] = r.next_reconcile_in("default", "demo")
        assert kube.writes("delete") == []  # still backing off: the failed Job is kept
        await asyncio.sleep(recreate + 1)
        await r.wait_idle()
        seen["next_due"] = r.next_reconcile_in("default", "demo")
        stopped.stopped = True
        r.schedule.stop()
        await daemon

    run_virtual(main)
    assert seen["first_due"] == pytest.approx(wait)
    (deleted,) = kube.writes("delete", "Job")
    assert deleted.name == job and deleted.time == pytest.approx(wait)  # at the stated delay
    (created,) = kube.writes("create", "Job")
    assert created.name == job and created.time == pytest.approx(recreate)
    # While the new build runs, the plan asks to look again every PROGRESS_REQUEUE_SECONDS.
    assert seen["next_due"] == pytest.approx(PROGRESS_REQUEUE_SECONDS - 1)
    assert len(kube.writes("apply", c.KIND + "/status")) >= 2


def test_without_a_requeue_the_next_pass_is_one_resync_later() -> None:
    body = cr({"engine": {"parallelism": {"tensor": 0}}}, metadata={"name": "bad", "generation": 1})
    kube = FakeKube([body])  # invalid: Degraded, nothing to wait for

    async def main() -> None:
        r = reconciler(kube)
        r.request("default", "bad")
        await r.wait_idle()
        assert r.next_reconcile_in("default", "bad") == pytest.approx(RESYNC)

    run_virtual(main)
    status = kube.objects[(c.KIND, "default", "bad")]["status"]
    assert status["reason"] == "InvalidSpec"


def test_a_paused_replica_schedules_nothing() -> None:
    """kopf stops the schedule's daemon while peering pauses this replica: no requeue fires."""
    kube, _ = failed_build_world()

    async def main() -> None:
        r = reconciler(kube)
        r.request("default", "demo")
        await r.wait_idle()  # asks to be requeued in 20 s, but no daemon keeps the schedule
        await asyncio.sleep(RESYNC * 2)

    run_virtual(main)
    assert kube.writes() and all(call.time == 0 for call in kube.calls)  # the first pass only
    assert kube.writes("delete") == []  # the retry never ran


def test_a_failed_pass_is_retried_with_a_growing_delay() -> None:
    kube, _ = failed_build_world()

    async def fail(*_: Any, **__: Any) -> None:
        from tritonllm.k8s.client import KubeError

        raise KubeError(500, "InternalError", "etcd is sad")

    kube.apply_status = fail  # type: ignore[method-assign]

    async def main() -> None:
        r = reconciler(kube)
        delays = []
        for _ in range(3):
            r.request("default", "demo")
            await r.wait_idle()
            delays.append(r.next_reconcile_in("default", "demo"))
        assert delays == [ERROR_REQUEUE_SECONDS, 2 * ERROR_REQUEUE_SECONDS,
                          4 * ERROR_REQUEUE_SECONDS]

    run_virtual(main)


def test_what_came_due_while_paused_fires_when_the_replica_resumes() -> None:
    fired: list[tuple[float, str]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        schedule = Schedule(lambda ns, name: fired.append((loop.time(), name)))
        schedule.at(("ns", "early"), 5)
        schedule.at(("ns", "late"), 50)
        stopped = Never()
        daemon = asyncio.create_task(schedule.run(stopped))
        await asyncio.sleep(10)
        stopped.stopped = True  # peering pauses the replica at t=10
        schedule.stop()
        await daemon
        await asyncio.sleep(90)  # "late" comes due at t=50, while paused
        stopped.stopped = False  # resumed at t=100
        daemon = asyncio.create_task(schedule.run(stopped))
        await asyncio.sleep(1)
        stopped.stopped = True
        schedule.stop()
        await daemon

    run_virtual(main)
    assert fired == [(5.0, "early"), (100.0, "late")]


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(1, ERROR_REQUEUE_SECONDS), (2, 2 * ERROR_REQUEUE_SECONDS), (6, 160.0),
     (10, MAX_ERROR_REQUEUE_SECONDS), (2000, MAX_ERROR_REQUEUE_SECONDS),
     (10**6, MAX_ERROR_REQUEUE_SECONDS)],
)
def test_the_error_backoff_is_capped_for_any_count_of_failures(
    failures: int, delay: float
) -> None:
    """2 ** (failures - 1) as a float overflows after ~1,025 failures (OverflowError ended the
    object's reconciles for good): the delay is capped at 5 minutes whatever the count."""
    assert error_backoff_seconds(failures) == delay
    assert MAX_ERROR_REQUEUE_SECONDS == 300.0


def test_a_pass_failing_for_the_2000th_time_still_schedules_the_next() -> None:
    kube, _ = failed_build_world()

    async def fail(*_: Any, **__: Any) -> None:
        raise KubeError(500, "InternalError", "etcd is sad")

    kube.apply_status = fail  # type: ignore[method-assign]
    settings = OperatorSettings(resync_seconds=RESYNC * 10, check_gpu_nodes=False)

    async def main() -> None:
        r = Reconciler(kube, settings, kube.cache(), clock=lambda: T0)
        r._failures[("default", "demo")] = 1999  # a long outage already
        r.request("default", "demo")
        await r.wait_idle()
        assert r.next_reconcile_in("default", "demo") == pytest.approx(MAX_ERROR_REQUEUE_SECONDS)

    run_virtual(main)


class FailingFinalizerPatches(FakeKube):
    """The API server refuses the first `failures` finalizer patches (e.g. 409 after a concurrent
    update, or unavailable)."""

    def __init__(self, objects: list[dict[str, Any]], failures: int) -> None:
        super().__init__(objects)
        self.failures = failures
        self.attempts: list[float] = []

    async def set_finalizers(self, obj: Any, finalizers: Any) -> None:
        self.attempts.append(asyncio.get_running_loop().time())
        if len(self.attempts) <= self.failures:
            self._record("patch", obj["kind"], obj["metadata"]["name"])
            raise KubeError(503, "ServiceUnavailable", "the server is currently unable")
        await super().set_finalizers(obj, finalizers)


def terminating_deployment() -> dict[str, Any]:
    return cr(
        {"storage": {"engineRetention": "Delete"}},
        metadata={"name": "gone", "namespace": "default", "generation": 1,
                  "finalizers": ["other/keep", FINALIZER],
                  "deletionTimestamp": "2026-11-22T09:00:00Z"},
        status={"engine": {"key": "0123456789abcdef"}},
    )


def test_a_failed_finalizer_removal_is_retried_with_the_capped_backoff() -> None:
    """Before, the pass that saw the deletion forgot the object first, so a failed patch was
    never retried (Terminating until some unrelated event)."""
    failures = 3
    kube = FailingFinalizerPatches([terminating_deployment()], failures)
    seen: dict[str, Any] = {}

    async def main() -> None:
        r = reconciler(kube)
        stopped = Never()
        daemon = asyncio.create_task(r.schedule.run(stopped))
        r.request("default", "gone")  # the watch event of the deletion
        await asyncio.sleep(200)
        await r.wait_idle()
        seen["due"] = r.next_reconcile_in("default", "gone")
        stopped.stopped = True
        r.schedule.stop()
        await daemon

    run_virtual(main)
    # Retried after 5, 10 and 20 s (the error backoff), released on the fourth try.
    assert kube.attempts == pytest.approx([0.0, 5.0, 15.0, 35.0])
    live = kube.objects[(c.KIND, "default", "gone")]
    assert live["metadata"]["finalizers"] == ["other/keep"]  # only ours was removed
    assert seen["due"] is None  # released: nothing more is scheduled for it


def test_finalizer_retries_never_wait_longer_than_the_cap() -> None:
    failures = 12  # 5 s * 2**11 uncapped: almost three hours before the last try
    kube = FailingFinalizerPatches([terminating_deployment()], failures)

    async def main() -> None:
        r = reconciler(kube)
        stopped = Never()
        daemon = asyncio.create_task(r.schedule.run(stopped))
        r.request("default", "gone")
        await asyncio.sleep(3600)
        await r.wait_idle()
        stopped.stopped = True
        r.schedule.stop()
        await daemon

    run_virtual(main)
    gaps = [b - a for a, b in zip(kube.attempts, kube.attempts[1:], strict=False)]
    assert len(kube.attempts) == failures + 1
    assert gaps == pytest.approx([error_backoff_seconds(n) for n in range(1, failures + 1)])
    assert max(gaps) == MAX_ERROR_REQUEUE_SECONDS
    assert kube.objects[(c.KIND, "default", "gone")]["metadata"]["finalizers"] == ["other/keep"]
