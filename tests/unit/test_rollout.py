"""Verified rollouts (tritonllm.plan.rollout): the gate between a new revision and the serving
workload, planned against the pure World of test_plan, and the judge of smoke answers."""

from __future__ import annotations

import datetime as dt

from tests.unit.test_plan import World
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.spec import SmokeRequest
from tritonllm.plan import SmokeAnswer, SmokeRun
from tritonllm.plan.rollout import judge
from tritonllm.render.serving import template_revision

NAME = "demo"


def _live(w: World, suffix: str = "") -> dict | None:
    return w.objects.get(("Deployment", f"{w.body['metadata']['name']}{suffix}"))


def _serving_revision(w: World) -> str | None:
    return template_revision(_live(w))


def _change(w: World) -> str:
    """A change of what the serving pods run (a new engine): returns the old revision after
    its build and repository Jobs are done (the gate is then consulted)."""
    old = _serving_revision(w)
    w.body["spec"]["engine"] = {"limits": {"maxBatchSize": 2}}
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"], uid="build-2")
    w.step()
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo-2")
    assert old is not None
    return old


def _verify_ready(w: World) -> None:
    verify = _live(w, "-verify")
    assert verify is not None
    verify["metadata"]["generation"] = 1
    verify["status"] = {"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1}


def _events(p) -> list[str]:
    return [e.reason for e in p.events]


def test_a_change_starts_a_verification_workload_and_leaves_the_serving_one() -> None:
    w = World()
    w.bring_up()
    old = _change(w)
    p = w.step()
    target = template_revision(w.render.workload.body)
    assert target != old
    verify = _live(w, "-verify")
    assert verify is not None and template_revision(verify) == target
    # one replica, a selector and pods of its own: the Service (component server) skips it
    assert verify["spec"]["replicas"] == 1
    assert verify["spec"]["selector"]["matchLabels"][c.LABEL_COMPONENT] == c.COMPONENT_VERIFY
    assert verify["spec"]["template"]["metadata"]["labels"][c.LABEL_COMPONENT] == "verify"
    assert w.render.service["spec"]["selector"][c.LABEL_COMPONENT] == c.COMPONENT_SERVER
    # no preStop pause: it is no endpoint, and its GPUs go to the surge pod once verified
    assert all("lifecycle" not in x for x in verify["spec"]["template"]["spec"]["containers"])
    assert all("lifecycle" in x for x in _live(w)["spec"]["template"]["spec"]["containers"])
    assert _serving_revision(w) == old  # the serving workload is untouched
    assert w.body["status"]["rollout"]["state"] == "Verifying"
    assert w.cond(c.COND_PROGRESSING)["reason"] == r.VERIFYING
    assert w.cond(c.COND_AVAILABLE)["status"] == "True"
    assert r.VERIFYING in _events(p)
    # the next pass sees it created (the message says it waits for its pod), then the passes
    # that still wait say nothing new and write nothing
    p = w.step()
    assert "waiting for its pod to be Ready" in w.cond(c.COND_PROGRESSING)["message"]
    p = w.step()
    assert not p.apply and not p.events and p.status is None


def test_a_passed_smoke_set_rolls_the_serving_workload_and_removes_the_verification() -> None:
    w = World()
    w.bring_up()
    _change(w)
    w.step()
    _verify_ready(w)
    target = template_revision(w.render.workload.body)
    verifying = [x for x in w.body["status"]["phases"] if x["name"] == "Verification"]
    assert verifying and "end" not in verifying[0] and w.body["status"]["phase"] == "Verification"
    w.now += dt.timedelta(seconds=42)
    w.obs["smoke"] = SmokeRun(target, "demo-verify-abc", (SmokeAnswer(200, "hi", 0.4),))
    p = w.step()
    (verified,) = [x for x in w.body["status"]["phases"] if x["name"] == "Verification"]
    assert verified["seconds"] == 42.0 and "status.rollout" in verified["source"]
    assert _serving_revision(w) == target
    assert _live(w, "-verify") is None
    assert ("apps/v1", "Deployment", f"{NAME}-verify") in [
        (x.api_version, x.kind, x.name) for x in p.delete]
    rollout = w.body["status"]["rollout"]
    assert rollout["state"] == "Verified" and "answered all 1 smoke requests" in rollout["message"]
    assert r.VERIFIED in _events(p)
    # the gate stays open for that revision: the rollout goes on as before
    w.obs["smoke"] = None
    w.make_ready()
    w.step()
    assert w.cond(c.COND_READY)["status"] == "True"


def test_a_wrong_answer_keeps_the_old_revision_and_is_not_retried() -> None:
    w = World({"storage": {"create": {"size": "10Gi"}},
               "rollout": {"smoke": [{"prompt": "hello world", "expectExact": "hello world"}]}})
    w.bring_up()
    old = _change(w)
    w.step()
    _verify_ready(w)
    target = template_revision(w.render.workload.body)
    w.obs["smoke"] = SmokeRun(target, "demo-verify-abc", (SmokeAnswer(200, "world hello", 0.2),))
    p = w.step()
    assert _serving_revision(w) == old
    assert _live(w, "-verify") is None  # its GPUs are freed
    degraded = w.cond(c.COND_DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == r.VERIFICATION_FAILED
    assert "'world hello'" in degraded["message"] and "expected exactly 'hello world'" in \
        degraded["message"]
    assert w.cond(c.COND_PROGRESSING)["status"] == "False"
    assert w.cond(c.COND_AVAILABLE)["status"] == "True"  # the old pods still serve
    # one Event says it (Degraded and Progressing flip together for one cause), a Warning
    (failed,) = [e for e in p.events if e.reason == r.VERIFICATION_FAILED]
    assert failed.type == "Warning" and "expected exactly" in failed.message
    # not tried again: no verification workload, no apply, no new Event
    w.obs["smoke"] = None
    p = w.step()
    assert not p.apply and not p.events and _live(w, "-verify") is None
    # nor when the serving pods stop being ready: a revision known to be bad is not rolled
    w.make_ready(replicas=0)
    p = w.step()
    assert _serving_revision(w) == old and not p.apply
    assert w.cond(c.COND_DEGRADED)["reason"] == r.VERIFICATION_FAILED
    w.make_ready()
    # a new spec (another revision) is verified again
    w.body["spec"]["engine"] = {"limits": {"maxBatchSize": 3}}
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"], uid="build-3")
    w.step()
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo-3")
    w.step()
    assert w.body["status"]["rollout"]["state"] == "Verifying"
    assert _live(w, "-verify") is not None


def test_a_new_engine_is_announced_once() -> None:
    """EngineReady (a Warning: the engine is not ready) and Progressing flip together when a
    change needs a new build: one Building Event, the Warning."""
    w = World()
    w.bring_up()
    w.body["spec"]["engine"] = {"limits": {"maxBatchSize": 2}}
    p = w.step()
    (building,) = [e for e in p.events if e.reason == "Building"]
    assert building.type == "Warning"


def test_a_crashed_verification_pod_fails_the_revision() -> None:
    w = World()
    w.bring_up()
    old = _change(w)
    w.step()
    w.obs["verify_failure"] = "pod demo-verify-x: container triton exited with code 1: boom"
    w.step()
    assert _serving_revision(w) == old
    assert w.body["status"]["rollout"]["state"] == "Failed"
    assert "exited with code 1: boom" in w.cond(c.COND_DEGRADED)["message"]


def test_no_ready_pod_in_time_fails_the_revision_with_the_schedulers_word() -> None:
    w = World({"storage": {"create": {"size": "10Gi"}}, "rollout": {"verifyTimeoutSeconds": 60}})
    w.bring_up()
    _change(w)
    p = w.step()
    assert p.requeue_after is not None and p.requeue_after <= 61
    w.now += dt.timedelta(seconds=61)
    w.obs["unschedulable"] = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu"
    w.step()
    message = w.cond(c.COND_DEGRADED)["message"]
    assert "within rollout.verifyTimeoutSeconds (60 s)" in message
    assert "Insufficient nvidia.com/gpu" in message


def test_immediate_and_unguarded_changes_roll_at_once() -> None:
    w = World({"storage": {"create": {"size": "10Gi"}}, "rollout": {"strategy": "Immediate"}})
    w.bring_up()
    old = _change(w)
    w.step()
    assert _serving_revision(w) != old and _live(w, "-verify") is None
    assert w.render.verify_workload is None
    # no ready replica: nothing to protect, the change rolls at once
    w = World()
    w.through_jobs()  # the workload exists, no replica is ready
    old = _serving_revision(w)
    _change(w)
    w.step()
    assert _serving_revision(w) != old and _live(w, "-verify") is None


def test_a_replicas_change_is_not_a_revision() -> None:
    w = World()
    w.bring_up()
    w.body["spec"]["serving"] = {"replicas": 3}
    w.step()
    assert _live(w)["spec"]["replicas"] == 3 and _live(w, "-verify") is None


def test_judge_names_what_is_wrong() -> None:
    plain = SmokeRequest(prompt="hi")
    assert judge(plain, SmokeAnswer(200, "anything", 0.1)) is None
    # no expectation: any answer, an empty one too (a model may end at once)
    assert judge(plain, SmokeAnswer(200, "", 0.1)) is None
    assert judge(plain, SmokeAnswer(200, None, 0.1)) == "the answer has no text_output"
    assert "no answer after 3.0 s: ConnectionRefused" in judge(
        plain, SmokeAnswer(None, None, 3.0, "ConnectionRefused"))
    assert judge(plain, SmokeAnswer(500, None, 0.1, "model not ready")) == \
        "HTTP 500: model not ready"
    slow = SmokeRequest(prompt="hi", maxLatencySeconds=1)
    assert "above maxLatencySeconds 1" in judge(slow, SmokeAnswer(200, "ok", 1.5))
    prefix = SmokeRequest(prompt="hi", expectPrefix="Hel")
    assert judge(prefix, SmokeAnswer(200, "Hello", 0.1)) is None
    assert "expected it to start with 'Hel'" in judge(prefix, SmokeAnswer(200, "Bye", 0.1))
    exact = SmokeRequest(prompt="hi", expectExact="")
    assert judge(exact, SmokeAnswer(200, "", 0.1)) is None
