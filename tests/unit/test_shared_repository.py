"""One repository Job per content key and namespace: the deployments of a namespace that render
the same model repository share its Job and directory (the first to need it creates it, the
others wait for it), without trusting a Job someone else planted under that name. The planner on
its pure World, the executor on the in-memory API server (FAKE); the operator on the local
control plane with many identical deployments: tests/cluster/test_operator.py."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest

from tests.cases import cr
from tests.fake_kube import FakeKube
from tests.unit.test_plan import World
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.handlers.execute import NameConflict, execute
from tritonllm.plan.writes import Decision
from tritonllm.render import ObjectRef, render_all

LOG = logging.LoggerAdapter(logging.getLogger("test"), {})


def deployment(name: str, uid: str) -> tuple[dict[str, Any], Any]:
    body = cr(metadata={"name": name, "namespace": "default", "uid": uid, "generation": 1})
    return body, parse_deployment(body)


def test_identical_deployments_render_one_job_and_one_directory() -> None:
    a, b = (render_all(deployment(n, f"uid-{n}")[1]) for n in ("a", "b"))
    assert a.repository_job.name == b.repository_job.name == f"tritonllm-repo-{a.repository_key}"
    assert a.repository_dir == b.repository_dir
    assert a.launch_plan["modelRepository"] == b.launch_plan["modelRepository"]
    # each keeps its own plan ConfigMap (its serving pods mount its launch plan)
    assert a.repository_configmap.name != b.repository_configmap.name


def test_the_job_another_deployment_created_is_waited_for_not_created_again() -> None:
    w = World()
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    sibling = render_all(parse_deployment(cr(metadata={"name": "sibling", "uid": "uid-sib"})))
    job = copy.deepcopy(sibling.repository_job.body)
    job["metadata"]["uid"] = "uid-shared-job"
    w.objects[("Job", job["metadata"]["name"])] = job
    # the watch shows the sibling deployment: observe vouches for its Job
    w.obs["repo_job_shared_uid"] = "uid-shared-job"
    p = w.step()
    assert p.create_shared == [] and "NameConflict" not in str(w.body["status"])
    assert w.cond(c.COND_REPOSITORY_READY)["reason"] == "Writing"
    assert sibling.repository_job.name in w.cond(c.COND_REPOSITORY_READY)["message"]
    w.finish_job(job["metadata"]["name"], uid="uid-shared-job")
    w.step()
    assert w.cond(c.COND_REPOSITORY_READY)["status"] == "True"
    assert w.body["status"]["repository"]["key"] == w.render.repository_key


def test_a_job_under_the_name_that_no_deployment_of_the_namespace_created_is_a_conflict() -> None:
    """Our label, but no controller reference to a deployment (observe marks a Job whose
    controller is a deployment that is gone as orphaned: see below)."""
    w = World()
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    planted = render_all(parse_deployment(cr(metadata={"name": "gone", "uid": "uid-gone"})))
    job = copy.deepcopy(planted.repository_job.body)
    job["metadata"]["ownerReferences"] = []
    w.objects[("Job", planted.repository_job.name)] = job
    w.step()
    degraded = w.cond(c.COND_DEGRADED)
    assert degraded["reason"] == "NameConflict"
    assert f"Job/{planted.repository_job.name}" in degraded["message"]


@pytest.mark.parametrize("sibling_known", [True, False])
def test_a_job_created_meanwhile_is_used_if_a_sibling_created_it(sibling_known: bool) -> None:
    """The pass planned before the Job existed; by the time it writes, the watch shows it."""
    body, dep = deployment("demo", "uid-demo")
    other_body, other = deployment("other", "uid-other")
    theirs = render_all(other).repository_job.body
    objects = [body, theirs] + ([other_body] if sibling_known else [])
    kube = FakeKube(objects)
    ours = render_all(dep).repository_job.stamped()
    decision = Decision(create_shared=[ours])
    if sibling_known:
        asyncio.run(execute(kube, kube.cache(), body, dep, decision, LOG))
    else:  # its controller is no deployment of the namespace: someone planted it
        with pytest.raises(NameConflict, match=f"Job/{ours.name}"):
            asyncio.run(execute(kube, kube.cache(), body, dep, decision, LOG))
    assert kube.writes() == []  # the watch shows it: no POST
    job = kube.objects[("Job", "default", ours.name)]
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-other"


def test_only_the_deployment_that_created_a_shared_job_deletes_it() -> None:
    body, dep = deployment("demo", "uid-demo")
    other_body, other = deployment("other", "uid-other")
    theirs = render_all(other).repository_job.body
    kube = FakeKube([body, other_body, theirs])
    ref = ObjectRef("batch/v1", "Job", "default", theirs["metadata"]["name"])
    asyncio.run(execute(kube, kube.cache(), body, dep, Decision(delete_own=[ref]), LOG))
    assert kube.writes() == [] and ("Job", "default", ref.name) in kube.objects
    asyncio.run(execute(kube, kube.cache(), other_body, other, Decision(delete_own=[ref]), LOG))
    assert [w.verb for w in kube.writes()] == ["delete"]
    assert ("Job", "default", ref.name) not in kube.objects


def test_passes_needing_the_same_job_at_once_send_one_request() -> None:
    """N identical deployments applied at once: their first passes all find the Job missing;
    one POSTs it, the others wait for that request and send none."""
    bodies = [deployment(f"d{i}", f"uid-d{i}") for i in range(5)]
    kube = FakeKube([b for b, _ in bodies])
    cache = kube.cache()
    create = kube.create

    async def over_the_network(obj: Any) -> Any:
        await asyncio.sleep(0.01)  # the API server's answer takes a while
        return await create(obj)

    kube.create = over_the_network  # type: ignore[method-assign]

    async def all_at_once() -> None:
        await asyncio.gather(*(
            execute(kube, cache, body, dep,
                    Decision(create_shared=[render_all(dep).repository_job.stamped()]), LOG)
            for body, dep in bodies))

    asyncio.run(all_at_once())
    assert [(w.verb, w.kind) for w in kube.writes()] == [("create", "Job")]
    assert not cache.creating


def test_a_new_layout_of_the_store_is_a_new_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan ConfigMap of a key is immutable and names the directory: moving the directory
    must change the key (an upgrade rolls to a new revision instead of a refused apply)."""
    from tritonllm.render import naming

    dep = deployment("demo", "uid-demo")[1]
    now = render_all(dep)
    monkeypatch.setattr(naming, "REPOSITORY_LAYOUT", "1")
    before = render_all(dep)
    assert before.repository_key != now.repository_key
    assert before.repository_configmap.name != now.repository_configmap.name


def test_a_job_the_watch_does_not_show_is_found_by_the_refused_post() -> None:
    """Another replica (or a user) created it after this one's watch last showed the name:
    the POST is refused, and the object is then looked up and judged."""
    body, dep = deployment("demo", "uid-demo")
    other_body, other = deployment("other", "uid-other")
    theirs = render_all(other).repository_job.body
    kube = FakeKube([body, other_body])
    cache = kube.cache()
    get = cache.get

    def unseen(kind: str, namespace: str | None, name: str) -> Any:
        return None if kind == "Job" else get(kind, namespace, name)

    cache.get = unseen  # type: ignore[method-assign]
    kube.put(theirs)
    ours = render_all(dep).repository_job.stamped()
    asyncio.run(execute(kube, cache, body, dep, Decision(create_shared=[ours]), LOG))
    assert [w.verb for w in kube.writes()] == ["create"]  # refused (409), then looked up
    planted = {**theirs, "metadata": {**theirs["metadata"], "ownerReferences": [
        {**theirs["metadata"]["ownerReferences"][0], "uid": "uid-nobody"}]}}
    kube.put(planted)
    with pytest.raises(NameConflict, match=f"Job/{ours.name}"):
        asyncio.run(execute(kube, cache, body, dep, Decision(create_shared=[ours]), LOG))


def test_the_job_of_a_deleted_deployment_is_waited_out_then_created_again() -> None:
    """Deployment A deleted, B (same repository) applied at once: A's Job is still there until
    the garbage collector removes it (it removes any Job whose controller uid does not exist,
    so a forged one goes too). B neither uses it nor calls it a conflict, and creates its own
    once it is gone."""
    w = World(repo_job_orphaned=True)
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    gone = render_all(parse_deployment(cr(metadata={"name": "gone", "uid": "uid-gone"})))
    w.objects[("Job", gone.repository_job.name)] = copy.deepcopy(gone.repository_job.body)
    p = w.step()
    assert p.create_shared == [] and w.cond(c.COND_DEGRADED)["status"] == "False"
    repository = w.cond(c.COND_REPOSITORY_READY)
    assert repository["status"] == "False" and "garbage-collected" in repository["message"]
    del w.objects[("Job", gone.repository_job.name)]  # collected
    w.obs["repo_job_orphaned"] = False
    p = w.step()
    assert [o.name for o in p.create_shared] == [w.render.repository_job.name]


def test_observe_tells_a_siblings_job_from_an_orphaned_one() -> None:
    from tritonllm.handlers.observe import _repository_job_owner

    def _shared_by_sibling(cache: Any, dep: Any, job: Any) -> Any:
        return _repository_job_owner(cache, dep, job)["repo_job_shared_uid"]

    def _orphaned(cache: Any, dep: Any, job: Any) -> bool:
        return bool(_repository_job_owner(cache, dep, job)["repo_job_orphaned"])

    body, dep = deployment("demo", "uid-demo")
    sibling_body, sibling = deployment("sibling", "uid-sibling")
    theirs = render_all(sibling).repository_job.body
    theirs["metadata"]["uid"] = "uid-job"
    cache = FakeKube([body, sibling_body]).cache()
    assert _shared_by_sibling(cache, dep, theirs) == "uid-job" and not _orphaned(cache, dep, theirs)
    cache = FakeKube([body]).cache()  # the sibling is gone
    assert _shared_by_sibling(cache, dep, theirs) is None and _orphaned(cache, dep, theirs)
    ours = render_all(dep).repository_job.body
    assert _shared_by_sibling(cache, dep, ours) is None and not _orphaned(cache, dep, ours)


def test_the_shared_job_is_created_right_after_the_configmaps() -> None:
    """The first workloads of every deployment of the content wait for the Job's pod: it is
    created before the pass's other applies, and after the plan ConfigMap its pod mounts."""
    body, dep = deployment("demo", "uid-demo")
    kube = FakeKube([body])
    r = render_all(dep)
    decision = Decision(apply=[r.service.stamped(), r.repository_configmap.stamped()],
                        create_shared=[r.repository_job.stamped()])
    asyncio.run(execute(kube, kube.cache(), body, dep, decision, LOG))
    assert [(w.verb, w.kind) for w in kube.writes()] == [
        ("apply", "ConfigMap"), ("create", "Job"), ("apply", "Service")]
