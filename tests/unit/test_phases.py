"""Lifecycle phases timed from the cluster's records (tritonllm.plan.phases), and their metric and
slow-phase Events (tritonllm.handlers.metrics.PhaseHistory)."""

from __future__ import annotations

from typing import Any

import pytest

from tritonllm.api.status import PhaseTime
from tritonllm.handlers.metrics import PhaseHistory
from tritonllm.plan import phases


def job(start: str, end: str | None = None) -> dict[str, Any]:
    return {"status": {"startTime": start, **({"completionTime": end} if end else {})}}


def pod(ready: bool = True) -> dict[str, Any]:
    conds = [{"type": "PodScheduled", "status": "True",
              "lastTransitionTime": "2026-11-25T10:00:12Z"},
             {"type": "Ready", "status": "True" if ready else "False",
              "lastTransitionTime": "2026-11-25T10:00:31Z"}]
    return {"metadata": {"creationTimestamp": "2026-11-25T10:00:10Z"},
            "status": {"conditions": conds, "containerStatuses": [
                {"name": "tritonllm-tools", "state": {"running": {"startedAt": "x"}}},
                {"name": "triton", "state": {"running": {"startedAt": "2026-11-25T10:00:15Z"}}}]}}


def test_every_phase_is_timed_from_its_objects() -> None:
    times = phases.PodTimes.of(pod())
    seen = phases.observed_phases(job("2026-11-25T09:58:00Z", "2026-11-25T09:59:40Z"),
                                  job("2026-11-25T09:59:41Z", "2026-11-25T09:59:50Z"), times,
                                  engine_cached=False)
    assert [(p.name, p.seconds) for p in seen] == [
        ("EngineBuild", 100.0), ("RepositoryWrite", 9.0), ("WaitingForGpus", 2.0),
        ("PodStart", 3.0), ("ModelLoad", 16.0)]
    assert phases.current(seen) is None
    assert "startedAt" in seen[-1].source


def test_the_phase_under_way_has_no_end_and_a_cached_engine_no_build() -> None:
    seen = phases.observed_phases(job("2026-11-25T09:58:00Z", "2026-11-25T09:59:40Z"),
                                  job("2026-11-25T09:59:41Z"), None, engine_cached=True)
    assert [p.name for p in seen] == ["RepositoryWrite"]
    now = phases.current(seen)
    assert now is not None and now.name == "RepositoryWrite" and now.end is None
    loading = phases.observed_phases(None, None, phases.PodTimes.of(pod(ready=False)),
                                     engine_cached=True)
    assert phases.current(loading) is not None
    assert phases.current(loading).name == "ModelLoad"  # type: ignore[union-attr]


def test_ended_phases_outlive_their_jobs_within_a_revision_only() -> None:
    old = [{"name": "EngineBuild", "start": "2026-11-25T09:58:00Z", "end": "2026-11-25T09:59:40Z",
            "seconds": 100.0, "source": "the build Job's startTime and completionTime"}]
    kept = phases.timeline([], old, same_revision=True)
    assert [p.name for p in kept] == ["EngineBuild"]
    assert phases.timeline([], old, same_revision=False) == []


def test_a_phase_far_slower_than_its_history_is_announced_once() -> None:
    history = PhaseHistory()
    for i in range(5):
        line = [{"name": "EngineBuild", "start": f"2026-11-25T0{i}:00:00Z",
                 "end": f"2026-11-25T0{i}:01:00Z", "seconds": 60.0, "source": "Job"}]
        assert history.ended([], line) == []
    slow = [{"name": "EngineBuild", "start": "2026-11-25T08:00:00Z",
             "end": "2026-11-25T08:10:00Z", "seconds": 600.0, "source": "Job"}]
    events = history.ended([], slow)
    assert len(events) == 1 and events[0][:2] == ("Warning", "PhaseSlow")
    assert "EngineBuild took 600 s, 10.0x the median of the last 5 (60 s)" in events[0][2]
    assert history.ended(slow, slow) == []  # already counted
    assert phases.slow(PhaseTime(name="X", start="a", end="b", seconds=20.0, source="s"),
                       [1.0] * 9) is None  # under the floor


# --- a change of the timeline alone is held back briefly, not written on every boundary ---


def test_progress_only_is_a_change_of_no_condition_status_and_no_record() -> None:
    from tritonllm.plan.status import progress_only

    def cond(status: str, reason: str) -> dict[str, str]:
        return {"type": "Available", "status": status, "reason": reason}

    old = {"phase": "RepositoryWrite", "phases": [{"name": "RepositoryWrite"}], "ready": "0/1",
           "conditions": [cond("False", "NotDeployed")]}
    assert progress_only(old, {**old, "phase": "WaitingForGpus", "phaseStarted": "t"})
    # a condition's reason and words, the counts: progress
    assert progress_only(old, {**old, "ready": "0/2",
                               "conditions": [cond("False", "NoReadyReplicas")]})
    # a condition flips: not held
    assert not progress_only(old, {**old, "ready": "1/1",
                                   "conditions": [cond("True", "Serving")]})
    # a step of Progressing on the way (the repository written, its record kept): held
    repo = {"type": "RepositoryReady", "status": "False", "reason": "Writing"}
    before = {**old, "conditions": [cond("False", "NotDeployed"), repo]}
    written = {**repo, "status": "True", "reason": "RepositoryWritten"}
    assert progress_only(before, {**before, "repository": {"key": "k"},
                                  "conditions": [cond("False", "NotDeployed"), written]})
    # a record that must not wait (a verified revision, a uid): not held
    assert not progress_only(old, {**old, "rollout": {"state": "Verified"}})
    assert not progress_only(old, {**old, "mpiSecretUid": "u"})
    assert not progress_only(old, old)  # no change at all


def test_a_progress_only_status_waits_for_the_hold_or_for_a_change_that_matters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.fake_kube import FakeKube
    from tritonllm.api.settings import OperatorSettings
    from tritonllm.handlers import reconciler as rec
    from tritonllm.handlers.cache import Cache
    from tritonllm.plan import Decision, EventNote

    clock = [100.0]
    monkeypatch.setattr(rec.time, "monotonic", lambda: clock[0])
    r = rec.Reconciler(FakeKube([]), OperatorSettings(), Cache({}))
    key = ("ns", "demo")

    def timeline() -> Decision:
        return Decision(status={"phase": "PodStart"}, status_progress_only=True,
                        events=[EventNote("Normal", "RollingOut", "1/2 updated")])

    held = timeline()
    r._hold_progress(key, held)
    assert held.status is None and held.requeue_after == rec.PROGRESS_HOLD_SECONDS
    assert held.events == []  # posted by the pass that writes the status
    clock[0] += 2
    again = timeline()
    r._hold_progress(key, again)  # still within the hold: the requeue is what is left of it
    assert again.status is None and again.requeue_after == rec.PROGRESS_HOLD_SECONDS - 2
    clock[0] += rec.PROGRESS_HOLD_SECONDS
    due = timeline()
    r._hold_progress(key, due)
    assert due.status == {"phase": "PodStart"} and due.events  # the hold is over: written
    # A condition's change goes at once, and takes the held timeline with it.
    r._hold_progress(key, timeline())
    matters = Decision(status={"phase": "ModelLoad", "ready": "1/1"})
    r._hold_progress(key, matters)
    assert matters.status is not None and key not in r._held
    # Progress that says something is wrong (a Job's pod cannot be scheduled) is not held.
    stuck = Decision(status={"phase": "RepositoryWrite"}, status_progress_only=True,
                     events=[EventNote("Warning", "Unschedulable", "pod p: 0/3 nodes")])
    r._hold_progress(key, stuck)
    assert stuck.status is not None and stuck.events
