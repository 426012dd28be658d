"""The engine digest stays anchored when its TritonLLMEngine goes: the deployment's status keeps
the digests the build first reported (status.engineAnchor), so a record deleted and recreated by a
build that re-read a rewritten store does not move the serving pods to what is on the store now.

The planner runs on World (tests/unit/test_plan.py); each pass renders with the options the
reconciler's own read phase (tritonllm.handlers.observe.read_before_render) computes from the
deployment and its engine record, held by the in-memory API server (tests/fake_kube.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.fake_kube import FakeKube
from tests.unit.test_engine_digest import build_pod
from tests.unit.test_plan import World
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.observe import read_before_render
from tritonllm.render import RenderOptions, naming

BUILT = "sha256:" + "a" * 64
BUILT_PRINTS = "sha256:" + "b" * 64
REWRITTEN = "sha256:" + "e" * 64  # artifact.json as rewritten on the store
ANNOTATION = "tritonllm.io/accept-engine-digest"


def report(digest: str, prints: str | None = None) -> str:
    return json.dumps({"engineDigest": digest, **({"fingerprintDigest": prints} if prints
                                                   else {})})


def opts(w: World) -> RenderOptions:
    """The render options of a reconcile pass over this world's deployment and record."""
    dep = w.dep()
    key = naming.engine_key(dep)
    record = copy.deepcopy(w.objects.get((c.ENGINE_KIND, key)))
    objects = [] if record is None else [{**record, "status": w.engine_status or {}}]
    kube = FakeKube([*objects, w.body])
    return read_before_render(kube.cache(), OperatorSettings(), dep, key).opts


def serving(w: World) -> dict[str, Any]:
    return copy.deepcopy(w.objects[("Deployment", w.body["metadata"]["name"])])


def served_world() -> World:
    """Built (the build reported BUILT), repository written, serving pods applied."""
    w = World(build_pods=[build_pod(report(BUILT, BUILT_PRINTS))])
    w.step(opts(w))
    w.finish_job(w.render.build_job.name)
    w.step(opts(w))  # records the report
    w.step(opts(w))  # renders it: the repository Job
    w.finish_job(w.render.repository_job.name, uid="repo")
    w.step(opts(w))
    w.step(opts(w))
    assert ("Deployment", w.body["metadata"]["name"]) in w.objects
    return w


def recreate_record(w: World, rerun_reports: str) -> None:
    """The TritonLLMEngine and its finished build Job are deleted; the next pass recreates the
    record and a build Job, which runs over the complete engine on the store and reports what
    it finds there."""
    key = w.render.engine_key
    w.objects.pop((c.ENGINE_KIND, key))
    w.objects.pop(("Job", w.render.build_job.name))
    w.engine_status = None
    w.step(opts(w))
    assert w.engine_status is not None and w.engine_status["state"] == "Building"
    w.obs["build_pods"] = [build_pod(rerun_reports)]
    w.finish_job(w.render.build_job.name)
    w.step(opts(w))  # the recreated record is Ready with the rerun's report
    w.step(opts(w))


def test_the_first_recorded_digest_is_anchored_in_the_deployment_status() -> None:
    w = served_world()
    assert w.body["status"]["engineAnchor"] == {
        "key": w.render.engine_key, "digest": BUILT, "fingerprintDigest": BUILT_PRINTS}
    assert w.render.launch_plan["engineDigest"] == {"engine": BUILT, "fingerprints": BUILT_PRINTS}


def test_a_record_recreated_with_another_digest_is_degraded_and_not_served() -> None:
    w = served_world()
    repo_key, workload = w.render.repository_key, serving(w)
    recreate_record(w, report(REWRITTEN))
    assert w.engine_status["digest"] == REWRITTEN  # what the rerun read from the store
    # the serving pods keep the anchored digest: same plan, same revision, untouched workload
    assert w.render.launch_plan["engineDigest"]["engine"] == BUILT
    assert w.render.repository_key == repo_key
    assert serving(w) == workload
    assert w.body["status"]["engineAnchor"]["digest"] == BUILT
    degraded = w.cond(c.COND_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "EngineDigestChanged")
    assert REWRITTEN in degraded["message"] and BUILT in degraded["message"]
    assert f"{ANNOTATION}={REWRITTEN}" in degraded["message"]  # the fix, by name


def test_a_record_recreated_with_the_same_digest_changes_nothing() -> None:
    w = served_world()
    repo_key, workload = w.render.repository_key, serving(w)
    recreate_record(w, report(BUILT, BUILT_PRINTS))
    assert w.cond(c.COND_DEGRADED)["status"] == "False"
    assert w.render.repository_key == repo_key and serving(w) == workload


def test_the_owner_accepts_the_new_digest_by_name() -> None:
    w = served_world()
    repo_key = w.render.repository_key
    recreate_record(w, report(REWRITTEN))
    w.body["metadata"]["annotations"] = {ANNOTATION: "sha256:" + "f" * 64}  # another digest
    w.step(opts(w))
    assert w.cond(c.COND_DEGRADED)["reason"] == r.ENGINE_DIGEST_CHANGED
    w.body["metadata"]["annotations"] = {ANNOTATION: REWRITTEN}
    w.step(opts(w))
    assert w.body["status"]["engineAnchor"]["digest"] == REWRITTEN
    w.step(opts(w))
    assert w.cond(c.COND_DEGRADED)["status"] == "False"
    assert w.render.launch_plan["engineDigest"]["engine"] == REWRITTEN
    assert w.render.repository_key != repo_key  # a new revision, rolled out as any other
    assert ("Job", w.render.repository_job.name) in w.objects


def test_an_anchor_of_another_engine_key_is_not_used() -> None:
    """A spec change is a new engine key: its own first digest is anchored."""
    w = served_world()
    w.body["status"]["engineAnchor"]["key"] = "another-key"
    assert opts(w).engine_digest == BUILT  # the record's, as before any anchor
    w.step(opts(w))
    assert w.body["status"]["engineAnchor"]["key"] == w.render.engine_key


def test_the_reconciler_keeps_the_anchor_when_the_record_changes() -> None:
    """The operator's own pass (the in-memory API server): a deployment that anchored BUILT, and
    a record that now says REWRITTEN, is Degraded, and nothing is rolled out."""
    import asyncio

    from tests.cases import cr
    from tritonllm.api.deployment import parse_deployment
    from tritonllm.handlers.reconciler import Reconciler

    body = cr(None, metadata={"name": "demo", "namespace": "default", "uid": "uid-demo",
                              "generation": 1})
    key = naming.engine_key(parse_deployment(body))
    body["status"] = {"engineAnchor": {"key": key, "digest": BUILT,
                                       "fingerprintDigest": BUILT_PRINTS}}
    record = {"apiVersion": c.API_VERSION, "kind": c.ENGINE_KIND,
              "metadata": {"name": key, "namespace": "default"},
              "status": {"state": "Ready", "digest": REWRITTEN, "builtFor": "uid-demo"}}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "tritonllm-model-store", "namespace": "default"}}
    kube = FakeKube([claim, record, body])

    async def once() -> None:
        rec = Reconciler(kube, OperatorSettings(check_gpu_nodes=False), kube.cache())
        await rec.reconcile("default", "demo")

    asyncio.run(once())
    status = kube.objects[(c.KIND, "default", "demo")]["status"]
    degraded = next(x for x in status["conditions"] if x["type"] == c.COND_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "EngineDigestChanged")
    assert status["engineAnchor"]["digest"] == BUILT
    assert {w.kind for w in kube.writes()} == {f"{c.KIND}/status", "Event"}, kube.writes()
