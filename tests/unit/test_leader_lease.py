"""tritonllm.k8s.lease against an in-memory FAKE of the API server's Lease semantics (create
refuses a taken name, replace refuses a stale resourceVersion) and a FAKE clock; the real API
server and a SIGKILLed replica are in tests/cluster/test_leader_election.py."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import aiohttp
import pytest

from tritonllm.k8s.client import KubeError
from tritonllm.k8s.lease import LeaderLease, LeaseLost


class FakeLeases:
    """get / create / replace of one namespace's Leases, with resourceVersions."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.fail = False  # every call raises (the API server unreachable)
        self.broken: list[BaseException] = []  # the next calls raise these, in order

    def _check(self) -> None:
        if self.broken:
            raise self.broken.pop(0)
        if self.fail:
            raise KubeError(503, "Service Unavailable", "down")

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        self._check()
        return copy.deepcopy(self.objects.get(name))

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[body["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    async def create(self, obj: Any) -> Any:
        self._check()
        if obj.name in self.objects:
            return None
        return self._store(obj.body)

    async def replace(self, obj: Any) -> Any:
        self._check()
        live = self.objects[obj.name]
        if obj.body["metadata"].get("resourceVersion") != live["metadata"]["resourceVersion"]:
            return None  # 409
        return self._store(obj.body)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def replica(api: FakeLeases, clock: Clock, identity: str) -> LeaderLease:
    return LeaderLease(api, "ops", "tritonllm", identity, duration=6.0,  # type: ignore[arg-type]
                       clock=clock)


def holder(api: FakeLeases) -> str:
    return str(api.objects["tritonllm"]["spec"]["holderIdentity"])


def test_the_first_replica_creates_the_lease_and_a_second_waits_out_its_duration() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, clock, "a"), replica(api, clock, "b")
    assert asyncio.run(a.try_acquire()) and holder(api) == "a"
    spec = api.objects["tritonllm"]["spec"]
    assert spec["leaseDurationSeconds"] == 6 and spec["renewTime"].endswith("Z")
    assert not asyncio.run(b.try_acquire())  # first seen now
    clock.now += 5.9
    assert not asyncio.run(b.try_acquire())  # unchanged, but not for 6 s yet
    clock.now += 0.1
    assert asyncio.run(b.try_acquire()) and holder(api) == "b"
    assert api.objects["tritonllm"]["spec"]["leaseTransitions"] == 1


def test_a_renewed_lease_is_never_taken_whatever_the_clocks_say() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, clock, "a"), replica(api, clock, "b")
    asyncio.run(a.try_acquire())
    for _ in range(10):  # a renews every 2 s: b sees a new record each time
        assert not asyncio.run(b.try_acquire())
        clock.now += 2.0
        assert asyncio.run(a.try_acquire())  # its own: renewed
    assert holder(api) == "a"


def test_two_standbys_racing_for_an_expired_lease_elect_one() -> None:
    api, clock = FakeLeases(), Clock()
    asyncio.run(replica(api, clock, "dead").try_acquire())
    b, c = replica(api, clock, "b"), replica(api, clock, "c")
    assert not asyncio.run(b.try_acquire()) and not asyncio.run(c.try_acquire())
    clock.now += 7

    async def race() -> list[bool]:
        return list(await asyncio.gather(b.try_acquire(), c.try_acquire()))

    assert sorted(asyncio.run(race())) == [False, True]
    assert holder(api) in ("b", "c")


def test_a_leader_whose_lease_was_taken_stops() -> None:
    api, clock = FakeLeases(), Clock()
    a = replica(api, clock, "a")
    a.renew_every = 0.01
    asyncio.run(a.try_acquire())
    api.objects["tritonllm"]["spec"]["holderIdentity"] = "b"  # as after a takeover
    with pytest.raises(LeaseLost, match="held by b"):
        asyncio.run(asyncio.wait_for(a.keep(), timeout=5))


def test_a_leader_that_cannot_renew_stops_before_a_standby_may_take_over() -> None:
    api, clock = FakeLeases(), Clock()
    a = replica(api, clock, "a")
    a.renew_every = 0.01
    asyncio.run(a.try_acquire())
    api.fail = True

    async def keep_while_time_passes() -> None:
        async def tick() -> None:
            while True:
                await asyncio.sleep(0.01)
                clock.now += 0.5
        ticker = asyncio.create_task(tick())
        try:
            await a.keep()
        finally:
            ticker.cancel()

    with pytest.raises(LeaseLost, match=r"not renewed for .* \(deadline 4.0 s\)"):
        asyncio.run(asyncio.wait_for(keep_while_time_passes(), timeout=5))
    assert a.renew_deadline < a.duration  # it stops acting before the Lease can expire


def test_a_standby_waits_through_timeouts_and_refused_connections_then_takes_over() -> None:
    """A request that never reached the API server (a timeout, a reset or refused connection:
    the node busy or restarting) is tried again, like an error answer; it must not end the
    standby, which would then restart into a crash-loop back-off instead of taking over."""
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, clock, "a"), replica(api, clock, "b")
    b.retry_every = 0.01
    asyncio.run(a.try_acquire())
    asyncio.run(a.release())
    api.broken = [TimeoutError(), aiohttp.ServerDisconnectedError(),
                  ConnectionRefusedError(111, "Connection refused"), KubeError(500, "x", "")]
    asyncio.run(asyncio.wait_for(b.acquire(), timeout=5))
    assert holder(api) == "b" and not api.broken


def test_a_leader_renews_through_one_timeout() -> None:
    api, clock = FakeLeases(), Clock()
    a = replica(api, clock, "a")
    a.renew_every = 0.01
    asyncio.run(a.try_acquire())

    async def two_renewals_one_lost() -> None:
        api.broken = [TimeoutError()]
        keep = asyncio.create_task(a.keep())
        while api.broken or api.version < 2:
            await asyncio.sleep(0.01)
        a.released = True
        await asyncio.wait_for(keep, timeout=5)  # no LeaseLost: one timeout is within the deadline

    asyncio.run(two_renewals_one_lost())
    assert holder(api) == "a"


def test_a_released_lease_is_taken_at_the_next_try() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, clock, "a"), replica(api, clock, "b")
    asyncio.run(a.try_acquire())
    assert not asyncio.run(b.try_acquire())
    asyncio.run(a.release())
    assert asyncio.run(b.try_acquire()) and holder(api) == "b"


def test_a_released_lease_ends_the_renewals_quietly() -> None:
    """The standby may take the Lease the moment it is released; the old leader's renew loop,
    still running while kopf closes its watches, must not call that a loss."""
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, clock, "a"), replica(api, clock, "b")
    a.renew_every = 0.01
    asyncio.run(a.try_acquire())

    async def release_then_taken() -> None:
        keep = asyncio.create_task(a.keep())
        await a.release()
        assert await b.try_acquire()
        await asyncio.wait_for(keep, timeout=5)  # returns, no LeaseLost

    asyncio.run(release_then_taken())
    assert holder(api) == "b"


@pytest.mark.parametrize(("argv", "env", "elected"), [
    (["run"], {}, ""),  # kopf peering, as before
    (["run", "--leader-election", "ops"], {}, "ops"),
    (["run"], {"TRITONLLM_LEADER_ELECTION": "chart"}, "chart"),  # what the chart sets
    (["run", "--standalone"], {"TRITONLLM_LEADER_ELECTION": "chart"}, ""),
    (["run", "--standalone", "--leader-election", "ops"], {}, "ops"),
])
def test_which_replicas_elect_by_lease(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str], elected: str
) -> None:
    from tritonllm.cli.main import build_parser
    from tritonllm.cli.run import settings_from

    monkeypatch.delenv("TRITONLLM_LEADER_ELECTION", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert settings_from(build_parser().parse_args(argv)).leader_election == elected
