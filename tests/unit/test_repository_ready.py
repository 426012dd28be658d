"""A Ready model does not need its finished repository Job: the Job's one-day TTL removes it, and
the deployment stays Ready, with no new Job, until a spec change renders another revision."""

from __future__ import annotations

from tests.unit.test_plan import World, kinds
from tritonllm.api import constants as c


def ready_world() -> World:
    w = World()
    w.bring_up()
    assert w.cond(c.COND_READY)["status"] == "True"
    return w


def test_the_written_revision_is_recorded_once_its_job_completes() -> None:
    w = World()
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    w.step()
    assert "repository" not in w.body["status"]  # the Job runs: nothing written yet
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo")
    w.step()
    assert w.body["status"]["repository"] == {
        "key": w.render.repository_key,
        "path": w.render.repository_dir,
        "claimName": "tritonllm-model-store",
    }


def test_ready_stays_ready_when_the_finished_repository_job_is_collected() -> None:
    w = ready_world()
    job = w.render.repository_job["metadata"]["name"]
    before = {x["type"]: (x["status"], x["reason"]) for x in w.body["status"]["conditions"]}
    del w.objects[("Job", job)]  # the TTL controller removes it a day after it finished
    for _ in range(3):
        p = w.step()
        assert "Job" not in kinds(p)  # no new repository Job
        assert p.status is None  # nothing flips: the status is not even rewritten
        assert not p.events
    after = {x["type"]: (x["status"], x["reason"]) for x in w.body["status"]["conditions"]}
    assert after == before
    assert w.cond(c.COND_READY)["status"] == "True"
    assert w.cond(c.COND_REPOSITORY_READY)["status"] == "True"


def test_a_spec_change_still_writes_a_new_revision() -> None:
    w = ready_world()
    del w.objects[("Job", w.render.repository_job["metadata"]["name"])]
    old_key = w.render.repository_key
    w.body["spec"]["serving"] = {"maxQueueDelayMicroseconds": 100}
    w.body["metadata"]["generation"] = 2
    p = w.step()
    assert w.render.repository_key != old_key
    new_job = w.render.repository_job["metadata"]["name"]
    assert ("Job", new_job) in [(o["kind"], o["metadata"]["name"]) for o in p.create_shared]
    assert w.cond(c.COND_REPOSITORY_READY)["status"] == "False"
    assert w.body["status"]["repository"]["key"] == old_key  # the last one written
    w.finish_job(new_job, uid="repo-2")
    w.step()
    assert w.body["status"]["repository"]["key"] == w.render.repository_key


def test_a_record_of_another_revision_or_claim_is_not_trusted() -> None:
    w = ready_world()
    del w.objects[("Job", w.render.repository_job["metadata"]["name"])]
    w.body["status"]["repository"]["claimName"] = "another-store"
    p = w.step()
    assert "Job" in kinds(p)  # written again, on the claim it is served from
    assert w.cond(c.COND_REPOSITORY_READY)["status"] == "False"
