"""Where the time goes: the current revision's lifecycle phases, timed from the cluster's records.

Every time comes from an object's own status, never from the operator's clock: the build and
repository Jobs' `startTime`/`completionTime`, a verified rollout's start and verdict (the
operator's own act: status.rollout), and for the first serving pod of the revision its
`creationTimestamp`, its PodScheduled and Ready conditions and its serving container's
`startedAt` (tritonllm.handlers.observe keeps those few timestamps from the watch of serving
pods). Phases that ended are kept in the status once their sources are gone (a Job's one-day
TTL), as long as the revision is the same; a new revision starts a new timeline.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from tritonllm.api.status import PhaseTime

Obj = dict[str, Any]

ENGINE_BUILD = "EngineBuild"
REPOSITORY_WRITE = "RepositoryWrite"
VERIFICATION = "Verification"
WAITING_FOR_GPUS = "WaitingForGpus"
POD_START = "PodStart"
MODEL_LOAD = "ModelLoad"
PHASES = (ENGINE_BUILD, REPOSITORY_WRITE, VERIFICATION, WAITING_FOR_GPUS, POD_START, MODEL_LOAD)
SERVING_CONTAINER = "triton"


@dataclasses.dataclass(frozen=True)
class PodTimes:
    """The timestamps of one serving pod that time its phases (RFC 3339 strings)."""

    created: str
    scheduled: str | None = None
    started: str | None = None
    ready: str | None = None

    @staticmethod
    def of(pod: Obj) -> PodTimes | None:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        created = meta.get("creationTimestamp")
        if not created:
            return None
        conds = {x.get("type"): x for x in status.get("conditions") or []
                 if x.get("status") == "True"}
        started = None
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == SERVING_CONTAINER:
                started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        return PodTimes(
            created=str(created),
            scheduled=(conds.get("PodScheduled") or {}).get("lastTransitionTime"),
            started=started,
            ready=(conds.get("Ready") or {}).get("lastTransitionTime"),
        )


def _seconds(start: str, end: str) -> float:
    return round((dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start))
                 .total_seconds(), 1)


def _phase(name: str, start: str | None, end: str | None, source: str) -> PhaseTime | None:
    if not start:
        return None
    if end:
        return PhaseTime(name=name, start=start, end=end, seconds=_seconds(start, end),
                         source=source)
    return PhaseTime(name=name, start=start, source=source)


def _job_phase(name: str, job: Mapping[str, Any] | None, what: str) -> PhaseTime | None:
    st = (job or {}).get("status") or {}
    return _phase(name, st.get("startTime"), st.get("completionTime"),
                  f"the {what} Job's startTime and completionTime")


def observed_phases(
    build_job: Mapping[str, Any] | None,
    repo_job: Mapping[str, Any] | None,
    pod: PodTimes | None,
    *,
    engine_cached: bool,
    rollout: Mapping[str, Any] | None = None,
) -> list[PhaseTime]:
    """The phases the objects at hand time (a cached engine was not built for this revision;
    `rollout`: status.rollout of this revision, when it was verified)."""
    found = [
        None if engine_cached else _job_phase(ENGINE_BUILD, build_job, "build"),
        _job_phase(REPOSITORY_WRITE, repo_job, "repository"),
    ]
    if rollout:
        found.append(_phase(VERIFICATION, rollout.get("started"), rollout.get("finished"),
                            "status.rollout: the verification's start and the smoke set's "
                            "verdict (the operator sends it)"))
    if pod is not None:
        found += [
            _phase(WAITING_FOR_GPUS, pod.created, pod.scheduled,
                   "the pod's creationTimestamp and PodScheduled condition"),
            _phase(POD_START, pod.scheduled, pod.started,
                   "PodScheduled and the serving container's startedAt"),
            _phase(MODEL_LOAD, pod.started, pod.ready,
                   "the serving container's startedAt and the pod's Ready condition"),
        ]
    return [p for p in found if p is not None]


def timeline(
    observed: Sequence[PhaseTime], previous: Sequence[Mapping[str, Any]], *, same_revision: bool
) -> list[PhaseTime]:
    """The observed phases, plus the ended ones the status holds for this revision whose sources
    are gone; in lifecycle order."""
    by_name = {p.name: p for p in observed}
    if same_revision:
        for old in previous:
            if old.get("end") and old.get("name") in PHASES and old["name"] not in by_name:
                by_name[old["name"]] = PhaseTime.model_validate(old)
    return [by_name[n] for n in PHASES if n in by_name]


def current(phases: Sequence[PhaseTime]) -> PhaseTime | None:
    """The phase under way: the last one without an end."""
    running = [p for p in phases if p.end is None]
    return running[-1] if running else None


def newly_ended(
    phases: Sequence[PhaseTime], previous: Sequence[Mapping[str, Any]]
) -> list[PhaseTime]:
    """Phases that ended since the status was last written (each is counted once)."""
    before = {(p.get("name"), p.get("start")) for p in previous if p.get("end")}
    return [p for p in phases if p.end and (p.name, p.start) not in before]


def slow(
    phase: PhaseTime, history: Sequence[float], *, factor: float = 3.0, minimum: int = 5,
    floor: float = 30.0
) -> str | None:
    """The Event message when a phase took far longer than its history (at least `minimum`
    earlier ones): over `factor` times their median and over `floor` seconds."""
    if phase.seconds is None or len(history) < minimum:
        return None
    ordered = sorted(history)
    median = ordered[len(ordered) // 2]
    if phase.seconds <= max(factor * median, floor):
        return None
    return (f"{phase.name} took {phase.seconds:.0f} s, {phase.seconds / max(median, 0.1):.1f}x "
            f"the median of the last {len(history)} ({median:.0f} s); timed from {phase.source}")
