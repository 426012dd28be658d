"""What the operator keeps does not grow with what others create: an object carrying thousands of
labels or owner references costs the watch caches no more than any other, a list of such objects
is read one object at a time, and every map kept per pod, Job or engine key is emptied when its
key goes (bench/hostile_rss.py measures the process)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers import cache as cache_module
from tritonllm.handlers.cache import BY_NAME, keep_name
from tritonllm.handlers.observe import PodChecks
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.k8s.names import TakenNames
from tritonllm.plan.ownership import conflict_message, is_ours, owner_uids
from tritonllm.render import naming

OWNERS = 5000
LABELS = 3500
DEP_UID = "dep-uid"


def owner_refs(n: int, *, kind: str = c.KIND, controller_at: int | None = None
               ) -> list[dict[str, Any]]:
    refs = [{"apiVersion": c.API_VERSION, "kind": kind, "name": f"o{i}", "uid": f"u{i}"}
            for i in range(n)]
    if controller_at is not None:
        refs[controller_at] = {**refs[controller_at], "uid": DEP_UID, "controller": True}
    return refs


def hostile(name: str, *, managed: bool, owners: int = 0, labels: int = 0,
            controller_at: int | None = None, kind: str = c.KIND) -> dict[str, Any]:
    """A ConfigMap as the metadata-only watch delivers it, planted with many labels or owners."""
    have = {f"team.example/l{i}": "v" for i in range(labels)}
    if managed:
        have[c.LABEL_MANAGED_BY] = c.APP_NAME
        have[c.LABEL_COMPONENT] = c.COMPONENT_REPOSITORY
    meta: dict[str, Any] = {"name": name, "namespace": "team", "uid": f"uid-{name}",
                            "resourceVersion": "5", "labels": have,
                            "annotations": {c.ANNOTATION_SPEC_HASH: "h" * 300_000}}
    if owners:
        meta["ownerReferences"] = owner_refs(owners, kind=kind, controller_at=controller_at)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


class OneList:
    """A metadata source that lists the given objects once, then watches quietly."""

    def __init__(self, items: Sequence[dict[str, Any]]) -> None:
        self.items = items

    async def list_metadata(self, api_version: str, kind: str, namespace: str | None,
                            each: Callable[[Any], Any] = dict) -> tuple[Sequence[Any], str]:
        return [each(item) for item in self.items], "1"

    async def watch_metadata(self, api_version: str, kind: str, namespace: str | None,
                             resource_version: str) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}


def listed(items: Sequence[dict[str, Any]]) -> TakenNames:
    names = TakenNames(OneList(items), ["team"], kinds=[("v1", "ConfigMap")], keep=keep_name)

    async def go() -> None:
        task = asyncio.create_task(names.run())
        assert await names.wait_listed(["ConfigMap"], timeout=2.0) == []
        task.cancel()

    asyncio.run(go())
    return names


def kept(names: TakenNames, name: str) -> dict[str, Any]:
    known, obj = names.lookup("ConfigMap", "team", name)
    assert known and obj is not None
    return obj["metadata"]


def test_the_index_of_names_keeps_one_owner_and_one_label_of_anyones_object() -> None:
    names = listed([
        hostile("owners", managed=False, owners=OWNERS, kind="Lease"),
        hostile("labels", managed=False, labels=LABELS),
        hostile("ours-by-label", managed=True, owners=OWNERS, labels=LABELS, controller_at=4321),
    ])
    owners = kept(names, "owners")
    assert owners["ownerReferences"] == [{"apiVersion": c.API_VERSION, "kind": "Lease",
                                          "name": "o0", "uid": "u0"}]
    assert "labels" not in kept(names, "labels")  # none is the managed-by label
    # labelled as ours: what the planner reads, however many labels and owners it carries
    meta = kept(names, "ours-by-label")
    assert meta["labels"] == {c.LABEL_MANAGED_BY: c.APP_NAME,
                              c.LABEL_COMPONENT: c.COMPONENT_REPOSITORY}
    assert len(meta["ownerReferences"]) == 1 + cache_module.SHARED_OWNERS_KEPT
    assert "annotations" not in meta  # a "spec hash" of 300 kB is none of ours
    # and the ownership check reads the same: the controller found among 5,000 references
    assert is_ours({"metadata": meta}, DEP_UID)
    assert not is_ours({"metadata": meta}, "another-uid")
    assert "(owned by Lease/o0)" in conflict_message("ConfigMap", "owners", {"metadata": owners})


def test_our_kinds_projections_keep_what_the_planner_reads_of_a_planted_object() -> None:
    planted = hostile("p", managed=True, owners=OWNERS, labels=LABELS, controller_at=0)
    planted["metadata"]["labels"][c.LABEL_REPO_KEY] = "k1"
    planted["metadata"]["labels"][c.LABEL_INSTANCE] = "demo"
    for kind in ("ConfigMap", "Job", "Deployment", "Service"):
        (value,) = BY_NAME[kind].keyed({**planted, "kind": kind}).values()
        meta = value["metadata"]
        assert set(meta.get("labels") or {}) <= {c.LABEL_MANAGED_BY, c.LABEL_COMPONENT,
                                                  c.LABEL_REPO_KEY, c.LABEL_INSTANCE}, kind
        assert len(meta["ownerReferences"]) <= 1 + cache_module.SHARED_OWNERS_KEPT, kind
        assert meta["ownerReferences"][0] == {"kind": c.KIND, "name": "o0", "uid": DEP_UID,
                                              "controller": True}
    (cm,) = BY_NAME["ConfigMap"].keyed(planted).values()
    assert cm["metadata"]["labels"] == {c.LABEL_MANAGED_BY: c.APP_NAME,
                                        c.LABEL_COMPONENT: c.COMPONENT_REPOSITORY,
                                        c.LABEL_REPO_KEY: "k1", c.LABEL_INSTANCE: "demo"}
    # the co-owners of a build object the planner checks (each waiting deployment adds itself)
    assert {"u1", "u32"} <= owner_uids(cm) and "u33" not in owner_uids(cm)
    # anyone's claim (the store is the user's): that it exists is all that is read
    (claim,) = BY_NAME["PersistentVolumeClaim"].keyed({**planted, "kind": "PersistentVolumeClaim"
                                                       }).values()
    assert claim == {"metadata": {"name": "p", "namespace": "team", "uid": "uid-p",
                                  "resourceVersion": "5"}}


def serving_pod(i: int, *, unplaced: bool) -> dict[str, Any]:
    """A pod labelled as a serving pod of a deployment that does not exist."""
    status: dict[str, Any] = {"phase": "Pending"}
    if unplaced:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": "0/1 nodes available"}]
    return {"kind": "Pod", "metadata": {
        "name": f"pod-{i}", "namespace": "team", "uid": f"p{i}",
        "creationTimestamp": "2026-11-22T09:00:00Z",
        "labels": {c.LABEL_MANAGED_BY: c.APP_NAME, c.LABEL_COMPONENT: c.COMPONENT_SERVER,
                   c.LABEL_INSTANCE: f"nobody-{i}", c.LABEL_REPO_KEY: f"r{i}"}},
        "status": status}


def per_key_maps(pods: PodChecks) -> dict[str, int]:
    return {k: len(v) for k, v in vars(pods).items() if isinstance(v, dict)}


def test_what_pods_of_no_deployment_leave_goes_with_them() -> None:
    body = cr(metadata={"name": "demo", "namespace": "team", "generation": 1})
    workload = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "demo", "namespace": "team", "labels": {c.LABEL_MANAGED_BY: c.APP_NAME},
        "ownerReferences": [{"apiVersion": c.API_VERSION, "kind": c.KIND, "name": "demo",
                             "uid": "uid-demo", "controller": True}]}, "spec": {}}
    kube = FakeKube([body, workload])
    ours = serving_pod(0, unplaced=False)  # made by the deployment's own workload
    ours["metadata"]["labels"].update({c.LABEL_INSTANCE: "demo", c.LABEL_REPO_KEY: "rk",
                                       "pod-template-hash": "abc"})
    ours["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                            "name": "demo-abc", "uid": "rs", "controller": True}]

    async def main() -> dict[str, int]:
        rec = Reconciler(kube, OperatorSettings(check_gpu_nodes=False), kube.cache())
        foreign = [serving_pod(i, unplaced=i % 2 == 0) for i in range(1, 2001)]
        for pod in [ours, *foreign]:
            rec.pod_changed(pod)
        for pod in [ours, *foreign]:
            rec.pod_gone(pod)
        await rec.wait_idle()
        # the deployment that exists keeps its revision's times past its pod
        assert rec._pods.serving_times(parse_deployment(body), "rk") is not None
        rec._pods.forget("team", "demo")
        return per_key_maps(rec._pods)

    left = asyncio.run(main())
    assert left and not any(left.values()), left


def test_an_engine_lock_is_kept_only_while_a_pass_holds_or_waits_for_it() -> None:
    bodies = [cr(metadata={"name": n, "namespace": "team", "generation": 1}) for n in "ab"]
    key = naming.engine_key(parse_deployment(bodies[0]))
    kube = FakeKube(bodies)

    async def main() -> None:
        rec = Reconciler(kube, OperatorSettings(check_gpu_nodes=False), kube.cache())
        for n in "ab":
            rec.request("team", n)  # a new engine: both plan under its lock, one at a time
        await rec.wait_idle()
        assert rec._engine_locks == {}
        order: list[str] = []

        async def hold(tag: str, until: asyncio.Event) -> None:
            async with rec._engine_lock("team", key):
                order.append(tag)
                await until.wait()

        go = asyncio.Event()
        first = asyncio.create_task(hold("first", go))
        second = asyncio.create_task(hold("second", go))
        cancelled = asyncio.create_task(hold("cancelled", go))
        await asyncio.sleep(0)
        assert order == ["first"] and len(rec._engine_locks) == 1  # the others wait
        cancelled.cancel()
        go.set()
        await asyncio.gather(first, second, cancelled, return_exceptions=True)
        assert order == ["first", "second"]
        assert rec._engine_locks == {}

    asyncio.run(main())


def test_failed_create_answers_of_jobs_gone_unfinished_are_dropped(monkeypatch: Any) -> None:
    from tritonllm.handlers import observe

    now = [0.0]
    monkeypatch.setattr(observe.time, "monotonic", lambda: now[0])
    checks, kube = PodChecks(), FakeKube([])
    later = dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC)

    asked = 4000

    async def main() -> None:
        for i in range(asked):
            job = {"kind": "Job", "metadata": {"name": f"j{i}", "namespace": "team",
                                               "creationTimestamp": "2026-11-22T09:00:00Z"}}
            await checks.job_stall(kube, "team", f"j{i}", job, at=later)
            now[0] += PodChecks.JOB_RECHECK_SECONDS  # each asked once, never again

    asyncio.run(main())
    assert 0 < per_key_maps(checks)["_jobs"] < asked // 2


# --- the list at start (and after a broken watch) is read an object at a time -----------------


def chunks(parts: Sequence[bytes], size: int) -> Callable[[int], Awaitable[bytes]]:
    """An answer's bytes as a stream hands them out: `size` at a time, made only as read."""
    def gen() -> Iterator[bytes]:
        pending = b""
        for part in parts:
            pending += part
            while len(pending) >= size:
                yield pending[:size]
                pending = pending[size:]
        yield pending

    it = gen()

    async def read(n: int) -> bytes:
        return next(it, b"")

    return read


def answer(items: Sequence[dict[str, Any]], rv: str = "77") -> list[bytes]:
    head = json.dumps({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                       "metadata": {"resourceVersion": rv}})[:-1] + ',"items":['
    body = [(("," if i else "") + json.dumps(x)).encode() for i, x in enumerate(items)]
    return [head.encode(), *body, b"]}"]


def test_a_list_answer_is_parsed_an_object_at_a_time() -> None:
    from tritonllm.k8s.jsonlist import list_items

    items = [{"metadata": {"name": f"n{i}", "labels": {"é": "ü" * i}}} for i in range(50)]
    for size in (1, 7, 1 << 16):  # split anywhere, UTF-8 characters too
        got, meta = asyncio.run(list_items(chunks(answer(items), size), dict))
        assert got == items and meta == {"resourceVersion": "77"}
    got, meta = asyncio.run(list_items(chunks(answer([]), 3), dict))
    assert got == [] and meta == {"resourceVersion": "77"}
    # the list's own fields written after its items are read as well
    tail = [b'{"kind":"L","items":[', json.dumps(items[0]).encode(),
            b'],"metadata":{"resourceVersion":"9"}}']
    assert asyncio.run(list_items(chunks(tail, 5), dict)) == ([items[0]], {"resourceVersion": "9"})


def test_listing_planted_objects_never_holds_the_answer_whole() -> None:
    import tracemalloc

    from tritonllm.k8s.jsonlist import list_items

    planted = [hostile(f"p{i}", managed=True, owners=1000) for i in range(12)]
    for obj in planted:
        obj["metadata"]["annotations"] = {}
    parts = answer(planted)
    tracemalloc.start()
    try:
        json.loads(parts[1])  # one of them, parsed
        one = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        kept, _ = asyncio.run(list_items(chunks(parts, 1 << 16), keep_name))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [k["metadata"]["name"] for k in kept] == [f"p{i}" for i in range(12)]
    # about one object parsed at a time, where the whole answer is 12 of them
    assert peak < 3 * one, (peak, one)


def test_the_client_lists_metadata_through_the_stream(tmp_path: Any) -> None:
    from aiohttp import web

    from tests.unit.test_k8s_client import kubeconfig
    from tritonllm.k8s.client import Kube

    items = [{"metadata": {"name": f"c{i}", "namespace": "team", "uid": f"u{i}"}}
             for i in range(3)]

    async def handle(request: web.Request) -> web.StreamResponse:
        assert "PartialObjectMetadataList" in request.headers["Accept"]
        resp = web.StreamResponse()
        await resp.prepare(request)
        for part in answer(items, rv="31"):
            await resp.write(part)
        return resp

    async def main() -> tuple[Sequence[Any], str]:
        app = web.Application()
        app.router.add_get("/api/v1/configmaps", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        kube = Kube.from_kubeconfig(str(kubeconfig(tmp_path, f"http://127.0.0.1:{port}", {})))
        try:
            return await kube.list_metadata("v1", "ConfigMap", None, keep_name)
        finally:
            await kube.close()
            await runner.cleanup()

    kept, rv = asyncio.run(main())
    assert rv == "31" and [k["metadata"]["name"] for k in kept] == ["c0", "c1", "c2"]
    assert [k["metadata"]["uid"] for k in kept] == ["u0", "u1", "u2"]
