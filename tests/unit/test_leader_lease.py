"""tritonllm.k8s.lease against an in-memory FAKE of the API server's Lease semantics (create
refuses a taken name, replace refuses a stale resourceVersion) and a FAKE clock; the real API
server and a SIGKILLed replica are in tests/cluster/test_leader_election.py."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from tests.cases import cr
from tests.fake_kube import FakeKube
from tests.unit.test_k8s_client import serve
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers import operator
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.k8s.client import Kube, KubeError
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


class LeaseServer:
    """One Lease over HTTP, as the API server keeps it (409 on a taken name or a stale
    resourceVersion), that answers every request with 429 Too Many Requests and `Retry-After`
    while `throttle` says how many more to throttle."""

    PATH = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"

    def __init__(self, retry_after: str = "3") -> None:
        self.lease: dict[str, Any] | None = None
        self.throttle = 0
        self.retry_after = retry_after
        self.throttled = 0  # 429s answered
        self.written: list[float] = []  # when each successful write arrived (monotonic)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        if self.throttle > 0:
            self.throttle -= 1
            self.throttled += 1
            return web.json_response({"kind": "Status", "reason": "TooManyRequests"},
                                     status=429, headers={"Retry-After": self.retry_after})
        if request.method == "GET":
            return web.json_response(self.lease or {"kind": "Status", "reason": "NotFound"},
                                     status=200 if self.lease else 404)
        new = json.loads(body)
        old_version = (self.lease or {}).get("metadata", {}).get("resourceVersion")
        if (self.lease is None) != (request.method == "POST") or (
                new["metadata"].get("resourceVersion") != old_version):
            return web.json_response({"kind": "Status", "reason": "Conflict"}, status=409)
        new["metadata"]["resourceVersion"] = str(int(old_version or 0) + 1)
        self.lease = new
        self.written.append(time.monotonic())
        return web.json_response(new)


async def serve_leases(server: LeaseServer, tmp: Path) -> tuple[web.AppRunner, str]:
    """The server on a free port, and a kubeconfig that points at it."""
    runner, url = await serve(server)  # type: ignore[arg-type]  # any object with handle()
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {}}],
    }))
    return runner, str(path)


DURATION = 0.3  # renewals every 0.1 s, the renew deadline 0.2 s: the production ratios, scaled
SLACK = 0.15  # the event loop's own latency on a busy machine (production's margin: 2 s)


def test_a_throttled_renewal_ends_leadership_by_the_renew_deadline(tmp_path: Path) -> None:
    """Retry-After: 3 against a 0.2 s renew deadline, through a client that sends a 429 again
    after its Retry-After (any client, not only the Lease's own): the renewal is cut at the
    deadline, so the replica has stopped acting before a standby may take over."""
    server = LeaseServer(retry_after="3")

    async def main() -> float:
        runner, config = await serve_leases(server, tmp_path)
        kube = Kube.from_kubeconfig(config, concurrency=2, timeout=DURATION / 3)
        lease = LeaderLease(kube, "ops", "tritonllm", "a", duration=DURATION)
        try:
            assert await lease.try_acquire()
            server.throttle = 1000  # every renewal from now on
            with pytest.raises(LeaseLost, match="not renewed"):
                await asyncio.wait_for(lease.keep(), timeout=2)
            return time.monotonic()
        finally:
            await kube.close()
            await runner.cleanup()

    lost_at = asyncio.run(main())
    assert server.throttled >= 1
    assert lost_at - server.written[-1] <= 2 / 3 * DURATION + SLACK


def test_the_lease_client_leaves_a_throttled_renewal_to_the_renew_loop(tmp_path: Path) -> None:
    """The Lease's own client returns a 429 at once; keep() tries again within the deadline
    (after retry_every, not the 3 s of Retry-After), so one throttled answer costs no
    leadership."""
    from tritonllm.k8s.lease import lease_client

    server = LeaseServer(retry_after="3")

    async def main() -> None:
        runner, config = await serve_leases(server, tmp_path)
        kube = lease_client(config, DURATION)
        lease = LeaderLease(kube, "ops", "tritonllm", "a", duration=DURATION)
        try:
            assert await lease.try_acquire()
            server.throttle = 1
            keep = asyncio.create_task(lease.keep())
            while len(server.written) < 2:  # acquired, then renewed past the 429
                if keep.done():
                    keep.result()  # raises what ended the renewals
                await asyncio.sleep(0.01)
            lease.released = True
            await asyncio.wait_for(keep, timeout=1)  # returns: no LeaseLost
        finally:
            await kube.close()
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(main(), timeout=2))
    assert server.throttled == 1 and server.lease is not None
    assert server.lease["spec"]["holderIdentity"] == "a"


def blocking_writes(kube: FakeKube) -> tuple[asyncio.Event, list[str]]:
    """Every write of `kube` waits for the returned gate; what became of each is listed."""
    gate, fate = asyncio.Event(), []
    for verb in ("apply", "create", "apply_status", "delete", "scale", "add_owner"):
        real = getattr(kube, verb)

        async def write(*args: Any, _real: Any = real, _verb: str = verb, **kw: Any) -> Any:
            fate.append(f"{_verb} started")
            try:
                await gate.wait()
            except asyncio.CancelledError:
                fate.append(f"{_verb} cancelled")
                raise
            fate.append(f"{_verb} done")
            return await _real(*args, **kw)

        setattr(kube, verb, write)
    return gate, fate


def test_a_lost_lease_cancels_the_passes_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replica as `tritonllm run --leader-election` wires it: the Lease's client, keep()
    telling the handlers of a loss. Renewals throttled with Retry-After: 3, a pass waiting for
    its write: by the renew deadline the Lease is lost, the pass cancelled, and nothing of it is
    written afterwards, nor any new pass started."""
    from tritonllm.k8s.lease import lease_client

    server = LeaseServer(retry_after="3")
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "tritonllm-model-store", "namespace": "default"}}
    kube = FakeKube([cr(metadata={"generation": 1}), claim])

    async def main() -> tuple[float, list[str]]:
        gate, fate = blocking_writes(kube)
        rec = Reconciler(kube, OperatorSettings(check_gpu_nodes=False),  # type: ignore[arg-type]
                         kube.cache())
        monkeypatch.setitem(operator._state, "reconciler", rec)
        runner, config = await serve_leases(server, tmp_path)
        api = lease_client(config, DURATION)
        lease = LeaderLease(api, "ops", "tritonllm", "a", duration=DURATION)
        try:
            assert await lease.try_acquire()
            rec.request("default", "demo")
            while not fate:  # the pass waits for its first write
                await asyncio.sleep(0.005)
            server.throttle = 1000
            with pytest.raises(LeaseLost):
                await asyncio.wait_for(lease.keep(on_lost=operator.lost), timeout=2)
            lost_at = time.monotonic()
            rec.request("default", "demo")  # a watch event after the loss
            gate.set()
            await asyncio.wait_for(rec.wait_idle(), timeout=1)
            return lost_at, list(fate)
        finally:
            await api.close()
            await runner.cleanup()

    lost_at, fate = asyncio.run(main())
    assert lost_at - server.written[-1] <= 2 / 3 * DURATION + SLACK
    # one write begun and cancelled; none carried out, none begun after the loss
    assert len(fate) == 2 and fate[1] == fate[0].replace("started", "cancelled"), fate
