"""Reads come from the watch caches: a steady-state reconcile sends no request at all, looks
objects up by key (never scans an index), and sees its own writes before their watch events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.cases import cr
from tests.fake_kube import FakeKube, LiveIndices
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers import cache as cache_module
from tritonllm.handlers.cache import Cache, index_specs
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.render import naming, render_all


class KeyedOnly(Mapping[Any, Any]):
    """An index that may be looked up by key but never iterated: a scan would be O(N)."""

    def __init__(self, data: Mapping[Any, Any]) -> None:
        self.data = data

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]

    def __contains__(self, key: object) -> bool:
        return key in self.data

    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("a reconcile scanned a whole index")

    def __len__(self) -> int:
        raise AssertionError("a reconcile scanned a whole index")


class KeyedIndices(LiveIndices):
    def __getitem__(self, id: str) -> Mapping[Any, list[Any]]:
        return KeyedOnly(super().__getitem__(id))


def cached_engine_world(others: int = 0) -> FakeKube:
    """A small deployment whose engine another deployment already built (a cache hit), and
    `others` more deployments with their engine records in the same namespace."""
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "tritonllm-model-store", "namespace": "default"}},
    ]
    for i in range(others + 1):
        body = cr(metadata={"name": f"d{i}", "namespace": "default", "generation": 1})
        key = naming.engine_key(parse_deployment(body))
        objs.append(body)
        objs.append({"apiVersion": c.API_VERSION, "kind": c.ENGINE_KIND,
                     "metadata": {"name": key, "namespace": "default"},
                     "status": {"state": "Ready", "attempts": 0, "builtFor": "someone-else"}})
    return FakeKube(objs)


def finish(kube: FakeKube, kind: str, name: str, status: dict[str, Any]) -> None:
    obj = kube.objects[(kind, "default", name)]
    kube.put({**obj, "metadata": {**obj["metadata"], "generation": 1}, "status": status})


def test_a_steady_state_reconcile_sends_no_request_and_scans_no_index() -> None:
    kube = cached_engine_world(others=50)
    dep = parse_deployment(kube.objects[(c.KIND, "default", "d0")])
    r = render_all(dep)

    async def main() -> None:
        settings = OperatorSettings(check_gpu_nodes=True)
        cache = Cache(KeyedIndices(kube, index_specs(gpu_nodes=True)))
        rec = Reconciler(kube, settings, cache)
        await rec.reconcile("default", "d0")  # repository ConfigMap and Job, Service
        finish(kube, "Job", r.repository_job.name,
               {"conditions": [{"type": "Complete", "status": "True"}]})
        await rec.reconcile("default", "d0")  # the Deployment
        finish(kube, "Deployment", "d0", {"observedGeneration": 1, "readyReplicas": 1,
                                          "updatedReplicas": 1, "replicas": 1})
        await rec.reconcile("default", "d0")  # Ready
        kube.calls.clear()
        for _ in range(3):
            await rec.reconcile("default", "d0")

    asyncio.run(main())
    status = kube.objects[(c.KIND, "default", "d0")]["status"]
    assert status["reason"] == "Ready" and status["engine"]["cached"] is True
    assert kube.calls == []  # neither reads nor writes


def test_the_users_of_an_engine_are_one_lookup() -> None:
    kube = FakeKube()
    for name, key in (("a", "k1"), ("b", "k1"), ("c", "k2")):
        kube.put({"apiVersion": c.API_VERSION, "kind": c.KIND,
                  "metadata": {"name": name, "namespace": "ns"},
                  "status": {"engine": {"key": key, "path": f"/store/engines/{key}"}}})
    cache = Cache(KeyedIndices(kube, index_specs(gpu_nodes=False)))
    assert cache.deployments_using("ns", "k1") == ["a", "b"]
    assert cache.deployments_using("ns", "k3") == []


def test_our_writes_are_seen_before_their_watch_events(monkeypatch: pytest.MonkeyPatch) -> None:
    stale = {"apiVersion": c.API_VERSION, "kind": c.KIND,
             "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "10"},
             "status": {"reason": "RollingOut"}}
    index: dict[Any, list[Any]] = {("ns", "a"): [cache_module.project_deployment(stale)]}
    cache = Cache({cache_module.BY_NAME[c.KIND].id: index})
    written = {**stale, "metadata": {**stale["metadata"], "resourceVersion": "11",
                                     "managedFields": [{"manager": "tritonllm"}]},
               "status": {"reason": "Ready"}}
    cache.remember(written)
    seen = cache.get(c.KIND, "ns", "a")
    assert seen is not None and seen["status"]["reason"] == "Ready"
    # Its watch event brings nothing new: no reconcile for it; anything newer is news.
    assert cache.echoes(written) and not cache.echoes(stale)
    assert not cache.echoes({**written, "metadata": {**written["metadata"],
                                                      "resourceVersion": "12"}})
    assert "managedFields" not in seen["metadata"]  # kept as slim as the index
    # The watch catches up: the index wins again (and the overlay is dropped).
    index[("ns", "a")] = [cache_module.project_deployment({**written, "status": {"reason": "X"}})]
    assert cache.get(c.KIND, "ns", "a")["status"]["reason"] == "X"  # type: ignore[index]
    # An overlay never outlives a lost watch event by more than a few seconds.
    cache.remember({**written, "metadata": {**written["metadata"], "resourceVersion": "99"}})
    later = time.monotonic() + cache_module.OVERLAY_SECONDS + 1
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: later)
    assert cache.get(c.KIND, "ns", "a")["status"]["reason"] == "X"  # type: ignore[index]


def test_projections_keep_what_the_planner_reads_and_drop_the_rest() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "hf", "namespace": "ns"},
              "data": {"HF_TOKEN": "c2VjcmV0"}}
    assert cache_module.project_secret(secret)["keys"] == ["HF_TOKEN"]
    assert "c2VjcmV0" not in repr(cache_module.project_secret(secret))  # never the values
    body = cr(metadata={"name": "a", "annotations": {
        cache_module.LAST_APPLIED: "{...}", "team": "x"}})
    slim = cache_module.inflate_deployment(cache_module.project_deployment(body))
    assert slim["metadata"]["annotations"] == {"team": "x"}
    assert parse_deployment(slim) == parse_deployment(body).model_copy(
        update={"metadata": parse_deployment(body).metadata.model_copy(
            update={"annotations": {"team": "x"}})})


def test_projections_keep_one_copy_of_the_strings_many_objects_repeat() -> None:
    """Each watch event parses its own strings: the projections of N children keep one copy of
    the namespace, label keys and values and the owner's kind and name, not N."""
    import json

    def child(name: str) -> dict[str, Any]:  # as a watch event parses it: its own strings
        return dict(json.loads(json.dumps({"kind": "Service", "metadata": {
            "name": name, "namespace": "team-a", "uid": f"u-{name}",
            "labels": {c.LABEL_MANAGED_BY: c.FIELD_MANAGER, c.LABEL_INSTANCE: "demo"},
            "ownerReferences": [{"kind": c.KIND, "name": "demo", "uid": "d1",
                                 "controller": True}]}})))

    a, b = (cache_module.project_child(child(n))["metadata"] for n in ("s1", "s2"))
    assert a["namespace"] is b["namespace"]
    for (ka, va), (kb, vb) in zip(a["labels"].items(), b["labels"].items(), strict=True):
        assert ka is kb and va is vb
    (oa,), (ob,) = a["ownerReferences"], b["ownerReferences"]
    assert oa["kind"] is ob["kind"] and oa["name"] is ob["name"]
    assert oa == {"kind": c.KIND, "name": "demo", "uid": "d1", "controller": True}
    assert a["labels"] == {c.LABEL_MANAGED_BY: c.FIELD_MANAGER, c.LABEL_INSTANCE: "demo"}


def test_child_events_that_change_nothing_the_planner_reads_need_no_reconcile() -> None:
    cache = Cache({})
    job = {"kind": "Job", "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "1",
                                       "labels": {"a": "b"}},
           "status": {"active": 1}}
    assert cache.changed("Job", job)  # first sight
    busier = {**job, "metadata": {**job["metadata"], "resourceVersion": "2"},
              "status": {"active": 1, "ready": 0, "startTime": "2026-11-22T09:00:00Z"}}
    assert not cache.changed("Job", busier)  # still pending: the planner sees no difference
    # Its pod runs: the planner stops asking why it does not start (tritonllm.plan.stalls).
    running = {**busier, "status": {**busier["status"], "ready": 1}}
    assert cache.changed("Job", running)
    assert not cache.changed("Job", {**running, "status": {**running["status"], "active": 1}})
    done = {**running, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert cache.changed("Job", done)
    assert cache.changed("Job", done, deleted=True)


def test_equal_specs_share_one_rendered_repository() -> None:
    from tritonllm.render import repository_files
    from tritonllm.triton.repository import render_repository

    a = parse_deployment(cr(metadata={"name": "a"}))
    b = parse_deployment(cr(metadata={"name": "b", "namespace": "other"}))
    files = repository_files(a, "/store/engines/k", "/store/models/x")
    files["tensorrt_llm/config.pbtxt"] = "changed by the caller"
    again = repository_files(b, "/store/engines/k", "/store/models/x")
    assert again["tensorrt_llm/config.pbtxt"] != "changed by the caller"
    assert again == render_repository(a, engine_dir="/store/engines/k",
                                      tokenizer_dir="/store/models/x")
    other = repository_files(parse_deployment(cr({"serving": {"maxQueueDelayMicroseconds": 7}})),
                             "/store/engines/k", "/store/models/x")
    assert other != again
