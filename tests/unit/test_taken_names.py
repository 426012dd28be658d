"""The index of taken names (tritonllm.k8s.names): one metadata-only list and watch per kind
instead of a GET per child before it is created; and the executor's use of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from tritonllm.api import constants as c
from tritonllm.k8s import names as names_module
from tritonllm.k8s.client import KubeError
from tritonllm.k8s.names import TakenNames, slim


def meta(name: str, ns: str = "team", rv: str = "1", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}",
                         "resourceVersion": rv, **extra}}


class Source:
    """Lists and watch streams scripted per kind; what was asked is kept."""

    def __init__(self, lists: dict[str, list[Any]], watches: dict[str, list[list[Any]]]) -> None:
        self.lists, self.watches = lists, watches
        self.asked: list[tuple[str, str, str | None, str]] = []

    async def list_metadata(
        self, api_version: str, kind: str, namespace: str | None, each: Callable[[Any], Any]
    ) -> tuple[Sequence[Any], str]:
        self.asked.append(("list", kind, namespace, ""))
        answer = self.lists[kind].pop(0)
        if isinstance(answer, Exception):
            raise answer
        items, rv = answer
        return [each(item) for item in items], rv

    async def watch_metadata(
        self, api_version: str, kind: str, namespace: str | None, resource_version: str
    ) -> AsyncIterator[dict[str, Any]]:
        self.asked.append(("watch", kind, namespace, resource_version))
        streams = self.watches[kind]
        if not streams:
            await asyncio.Event().wait()  # an idle stream: nothing more happens
        for event in streams.pop(0):
            yield event


def run_until(index: TakenNames, done: Any, limit: float = 2.0) -> None:
    async def go() -> None:
        task = asyncio.create_task(index.run())
        waited = 0.0
        while not done() and waited < limit:
            await asyncio.sleep(0.01)
            waited += 0.01
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_a_name_is_unknown_until_listed_then_free_or_taken() -> None:
    theirs = meta("alpha", labels={"app": "theirs", c.LABEL_MANAGED_BY: "helm"},
                  annotations={"big": "x" * 1000})
    source = Source({"Service": [([theirs], "10")]}, {"Service": []})
    index = TakenNames(source, kinds=[("v1", "Service")])
    assert index.lookup("Service", "team", "alpha") == (False, None)  # not listed yet: ask
    run_until(index, lambda: index.lookup("Service", "team", "alpha")[0])
    known, found = index.lookup("Service", "team", "alpha")
    assert known and found is not None
    # only what the ownership check reads is kept
    assert found["metadata"] == {"name": "alpha", "namespace": "team", "uid": "u-alpha",
                                 "labels": {c.LABEL_MANAGED_BY: "helm"}}
    assert index.lookup("Service", "team", "beta") == (True, None)  # free
    assert index.lookup("Service", "other", "alpha") == (True, None)  # all namespaces listed
    assert ("watch", "Service", None, "10") in source.asked


def test_the_watch_adds_and_removes_names_and_lists_again_after_410_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(names_module, "SHORTEST_WATCH_SECONDS", 0.0)
    created = {"type": "ADDED", "object": meta("new", rv="11")}
    deleted = {"type": "DELETED", "object": meta("old", rv="12")}
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}}
    gone = {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}
    source = Source(
        {"ConfigMap": [([meta("old")], "10"), ([meta("new"), meta("third")], "20")]},
        {"ConfigMap": [[created, deleted, bookmark], [gone]]},
    )
    index = TakenNames(source, ["team"], kinds=[("v1", "ConfigMap")])
    run_until(index, lambda: index.lookup("ConfigMap", "team", "third")[1] is not None)
    assert index.lookup("ConfigMap", "team", "old") == (True, None)
    assert index.lookup("ConfigMap", "team", "new")[1] is not None
    # the second stream resumed where the first ended (the bookmark's version), then relisted
    watches = [x for x in source.asked if x[0] == "watch"]
    assert [w[3] for w in watches][:2] == ["10", "13"]
    assert [x[0] for x in source.asked].count("list") == 2
    assert len(index) == 2


def test_a_kind_the_cluster_does_not_serve_stays_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(names_module, "ABSENT_RETRY_SECONDS", 0.01)
    missing = KubeError(404, "Not Found", "the server could not find the requested resource")
    source = Source({"LeaderWorkerSet": [missing, missing, missing]}, {"LeaderWorkerSet": []})
    index = TakenNames(source, kinds=[("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")])
    run_until(index, lambda: len(source.asked) >= 2)
    assert index.lookup("LeaderWorkerSet", "team", "x") == (False, None)  # the executor asks


def test_slim_keeps_owner_references_for_the_conflict_message() -> None:
    obj = meta("gamma", labels={c.LABEL_MANAGED_BY: c.APP_NAME, "x": "y"}, ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r1",
         "controller": True, "blockOwnerDeletion": True}])
    kept = slim({**obj, "kind": "Deployment"})
    assert kept["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r1",
         "controller": True}]


def test_the_executor_asks_no_get_for_a_name_the_index_knows() -> None:
    from tests.fake_kube import FakeKube
    from tritonllm.handlers.cache import Cache
    from tritonllm.handlers.execute import NameConflict, _name_is_free
    from tritonllm.render.manifest import Manifest

    theirs = meta("alpha", labels={c.LABEL_MANAGED_BY: "helm"})
    source = Source({"Service": [([theirs], "10")]}, {"Service": []})
    index = TakenNames(source, kinds=[("v1", "Service")])
    run_until(index, lambda: index.lookup("Service", "team", "alpha")[0])
    kube = FakeKube([])
    cache = Cache({}, index)

    def service(name: str) -> Manifest:
        return Manifest.of({"apiVersion": "v1", "kind": "Service",
                            "metadata": {"name": name, "namespace": "team"}, "spec": {}})

    asyncio.run(_name_is_free(kube, cache, service("beta"), "dep-uid", frozenset()))
    with pytest.raises(NameConflict, match="Service/alpha already exists"):
        asyncio.run(_name_is_free(kube, cache, service("alpha"), "dep-uid", frozenset()))
    assert kube.calls == []  # both answered by the index
    # a kind the index does not follow is read as before
    job = Manifest.of({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": "j", "namespace": "team"}, "spec": {}})
    asyncio.run(_name_is_free(kube, Cache({}, index), job, "dep-uid", frozenset()))
    assert [x.verb for x in kube.calls] == ["get"]


# --- the same watches as the cache of the children whose metadata is all the planner reads ----


def ours(name: str, rv: str = "1", **labels: str) -> dict[str, Any]:
    return meta(name, rv=rv, labels={c.LABEL_MANAGED_BY: c.APP_NAME, **labels},
                annotations={c.ANNOTATION_SPEC_HASH: f"h-{name}", "other": "x" * 100},
                ownerReferences=[{"apiVersion": c.API_VERSION, "kind": c.KIND, "name": "dep",
                                  "uid": "dep-uid", "controller": True}])


def plan(name: str, instance: str, key: str, rv: str = "1") -> dict[str, Any]:
    return ours(name, rv, **{c.LABEL_COMPONENT: c.COMPONENT_REPOSITORY,
                             c.LABEL_INSTANCE: instance, c.LABEL_REPO_KEY: key})


def test_the_index_of_names_serves_our_children_in_the_shape_of_kopfs_indexes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tritonllm.handlers.cache import (
        BY_NAME,
        REPOSITORY_USERS,
        REVISIONS,
        Cache,
        index_specs,
        keep_name,
        metadata_indices,
    )

    monkeypatch.setattr(names_module, "SHORTEST_WATCH_SECONDS", 0.0)
    theirs = meta("web", labels={"app": "theirs"})
    first = [plan("p1", "a", "k1"), plan("p2", "b", "k1"), ours("svc-only"), theirs]
    events = [{"type": "ADDED", "object": plan("p3", "c", "k2", rv="11")},
              {"type": "DELETED", "object": plan("p2", "b", "k1", rv="12")},
              {"type": "MODIFIED", "object": plan("p1", "a", "k2", rv="13")}]
    # a list again (as after 410 Gone) that misses p3 (deleted meanwhile): it leaves every index
    relisted = [plan("p1", "a", "k2", rv="20"), ours("svc-only"), theirs]
    source = Source({"ConfigMap": [(first, "10"), (relisted, "20")]},
                    {"ConfigMap": [events]})
    names = TakenNames(source, ["team"], kinds=[("v1", "ConfigMap")], keep=keep_name)
    cache = Cache(metadata_indices(index_specs(gpu_nodes=False), names), names)
    assert not metadata_indices([BY_NAME["Job"]], names)  # kopf keeps the kinds it watches

    async def go(done: Any) -> None:
        task = asyncio.create_task(names.run())
        assert await names.wait_listed(["ConfigMap"], timeout=2.0) == []
        for _ in range(200):
            if done():
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(go(lambda: cache.repository_users("team", "k2") == ["a", "c"]))
    assert cache.repository_users("team", "k1") == []  # p2 deleted, p1 moved to k2
    assert cache.repository_revisions("team", "a") == ["k2"]
    live = cache.get("ConfigMap", "team", "p1")
    assert live is not None and live["metadata"]["resourceVersion"] == "13"
    # what the planner reads, nothing more
    assert live["metadata"]["annotations"] == {c.ANNOTATION_SPEC_HASH: "h-p1"}
    assert live["metadata"]["ownerReferences"][0]["uid"] == "dep-uid"
    assert cache.get("ConfigMap", "team", "web") is None  # not ours: not a child
    assert names.lookup("ConfigMap", "team", "web")[1] is not None  # but its name is taken

    asyncio.run(go(lambda: cache.get("ConfigMap", "team", "p3") is None))  # listed again
    assert cache.repository_users("team", "k2") == ["a"]
    assert REVISIONS.id in metadata_indices([REVISIONS, REPOSITORY_USERS], names)


def test_a_pass_waits_for_the_first_lists_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from tritonllm.handlers import cache as cache_module
    from tritonllm.handlers.cache import METADATA_KINDS, Cache, keep_name

    monkeypatch.setattr(names_module, "RETRY_SECONDS", 0.01)
    down = KubeError(503, "Service Unavailable", "etcd is not ready")
    lists: dict[str, list[Any]] = {kind: [([], "1")] for kind in METADATA_KINDS}
    lists["Service"] = [down] * 1000
    source = Source(lists, {kind: [] for kind in METADATA_KINDS})
    kinds = [(v, k) for v, k in names_module.INDEXED if k in METADATA_KINDS]
    names = TakenNames(source, ["team"], kinds=kinds, keep=keep_name)
    cache = Cache({}, names)

    async def go() -> float:
        task = asyncio.create_task(names.run())
        loop = asyncio.get_running_loop()
        started = loop.time()
        await cache.listed(timeout=0.3)
        waited = loop.time() - started
        await cache.listed(timeout=0.3)  # once only
        task.cancel()
        return waited

    with caplog.at_level("WARNING", logger=cache_module.__name__):
        waited = asyncio.run(go())
    assert 0.3 <= waited < 0.3 + 0.2
    assert "not listed after 0 s: Service" in caplog.text
