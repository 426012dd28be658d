"""The status step: the conditions that sum up the other steps, the status object, and the Events.

EngineReady, RepositoryReady and Available come from their steps; Degraded and Progressing are
derived here: a missing prerequisite blocks everything, a failed Job degrades (with the build
retried while attempts remain), and otherwise Progressing names the step under way, until every
replica runs the current engine and settings (Deployed).

The status is built as the TritonLLMDeploymentStatus model and serialised once; it is written only
when it differs from the live one, with one Event per pass for the conditions that flipped
(led by Progressing, which names the step under way).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import TritonLLMDeployment, fit_status
from tritonllm.api.engine import is_engine_key
from tritonllm.api.status import Condition, EngineStatus, TritonLLMDeploymentStatus
from tritonllm.render import Rendered, naming
from tritonllm.render.serving import template_revision

from . import phases
from .conditions import Cond, merge_conditions
from .engine import EngineStep
from .observed import JobObs, Obj, Observed, WorkloadObs
from .repository import RepositoryStep
from .stalls import refusal_reason
from .writes import Decision, EventNote, rfc3339

# While a build or a rollout is under way, look again this often even without a watch event.
PROGRESS_REQUEUE_SECONDS = 30
# While a prerequisite is missing (nothing emits an event when it appears), look again this often.
BLOCKED_REQUEUE_SECONDS = 60
# While a build or repository Job has no running pod, look again this often: pods are not
# watched, so a pod that turns unschedulable or fails to pull announces itself to nobody.
STALL_REQUEUE_SECONDS = 10
# Reasons that need a human while they last (a pod refused by the API server), not only time.
REFUSED: tuple[str, ...] = (r.QUOTA_EXCEEDED, r.LIMIT_RANGE_EXCEEDED, r.ADMISSION_REFUSED)


@dataclasses.dataclass(frozen=True)
class Summary:
    degraded: Cond
    progressing: Cond
    reason: str  # status.reason, the `kubectl get tllm` column


def summarise(
    engine: EngineStep,
    repo: RepositoryStep,
    workload: WorkloadObs,
    obs: Observed,
    *,
    target_repo: str,
) -> Summary:
    """Degraded and Progressing from the engine, repository and serving steps."""
    if engine.failed or repo.failed:
        cond = engine.condition if engine.failed else repo.condition
        degraded = Cond(c.COND_DEGRADED, "True", cond.reason, cond.message)
        if engine.retrying:
            progressing = Cond(c.COND_PROGRESSING, "True", r.RETRYING_BUILD, cond.message)
        else:
            progressing = Cond(c.COND_PROGRESSING, "False", cond.reason, cond.message)
        return Summary(degraded, progressing, cond.reason)
    fine = Cond(c.COND_DEGRADED, "False", r.AS_EXPECTED, "")
    if not engine.ready:
        cond = engine.condition
        progressing = Cond(c.COND_PROGRESSING, "True", cond.reason, cond.message)
        return Summary(_degraded_if_refused(cond, fine), progressing, cond.reason)
    if not repo.ready:
        cond = repo.condition
        if cond.reason in r.POD_STALLS:  # the repository Job's pod does not start: say why
            progressing = Cond(c.COND_PROGRESSING, "True", cond.reason, cond.message)
            return Summary(_degraded_if_refused(cond, fine), progressing, cond.reason)
        message = "writing the model repository"
        progressing = Cond(c.COND_PROGRESSING, "True", r.WRITING_REPOSITORY, message)
        return Summary(fine, progressing, r.WRITING_REPOSITORY)
    if not (workload.repo_key == target_repo and workload.done):
        what = "rolling out" if workload.exists else "starting"
        reason = r.ROLLING_OUT
        message = f"{what}: {workload.updated}/{workload.desired} replicas updated, "
        message += f"{workload.ready} ready"
        if obs.unschedulable:
            reason = r.UNSCHEDULABLE
            message += f"; a serving pod cannot be scheduled: {obs.unschedulable}"
        if obs.pods_refused:
            return pods_refused_summary(obs.pods_refused, message)
        if obs.serving_failure:
            return serving_failure_summary(obs.serving_failure, message)
        return Summary(fine, Cond(c.COND_PROGRESSING, "True", reason, message), reason)
    message = "every replica runs the current engine and settings"
    done = Cond(c.COND_PROGRESSING, "False", r.DEPLOYED, message)
    return Summary(fine, done, r.READY if workload.ready else r.SCALED_TO_ZERO)


def _degraded_if_refused(cond: Cond, fine: Cond) -> Cond:
    """A Job's pod refused by a quota or an admission check needs a human, as a serving pod's
    does (pods_refused_summary); an unschedulable or unpulled one may still resolve itself."""
    if cond.reason in REFUSED:
        return Cond(c.COND_DEGRADED, "True", cond.reason, cond.message)
    return fine


def pods_refused_summary(refused: str, progress: str) -> Summary:
    """The workload's controller cannot create serving pods: a quota, Pod Security or an
    admission webhook refuses them (their own words are quoted)."""
    reason = refusal_reason(refused)
    fix = {
        r.QUOTA_EXCEEDED: "lower podTemplate.resources or serving.replicas, or raise the quota",
        r.LIMIT_RANGE_EXCEEDED: "keep podTemplate.resources within the namespace's LimitRange "
        "(kubectl describe limitrange), or have it changed",
    }.get(reason, "change what the message names, or ask the cluster's administrators")
    message = f"serving pods cannot be created: {refused}; {fix}"
    degraded = Cond(c.COND_DEGRADED, "True", reason, message)
    return Summary(degraded, Cond(c.COND_PROGRESSING, "True", reason, progress), reason)


def serving_failure_summary(failure: str, progress: str) -> Summary:
    """A serving container exited with an error during the rollout: its workload restarts it
    (a group is recreated whole), which may not help; Degraded quotes why it stopped."""
    message = f"a serving container failed: {failure}; it is restarted (a multi-node group is "
    message += "recreated whole); if this repeats, fix what the message names"
    # `tritonllm launch` says this when the store's engine is not the one its build reported
    # (tritonllm.runtime.verified.check_reported): no restart helps.
    reason = r.ENGINE_TAMPERED if "engine digest mismatch" in failure else r.SERVING_POD_FAILED
    degraded = Cond(c.COND_DEGRADED, "True", reason, message)
    progressing = Cond(c.COND_PROGRESSING, "True", reason, progress)
    return Summary(degraded, progressing, reason)


def blocked_summary(blocked: Cond) -> Summary:
    """A missing prerequisite: Degraded says which, nothing progresses."""
    progressing = Cond(c.COND_PROGRESSING, "False", blocked.reason, blocked.message)
    return Summary(blocked, progressing, blocked.reason)


def requeue_for(
    p: Decision, engine: EngineStep, repo: RepositoryStep, workload: WorkloadObs, obs: Observed
) -> None:
    """Safety net while work is under way (the watch events usually come first); sooner while
    a Job's pod has not started (nothing announces why it does not)."""
    if engine.status.state in ("Building", "Pending") or (repo.ready and not workload.done):
        p.requeue(PROGRESS_REQUEUE_SECONDS)
    waiting = engine.status.state == "Building" and _not_started(obs.build_job)
    if waiting or (engine.ready and _not_started(obs.repo_job)):
        p.requeue(STALL_REQUEUE_SECONDS)


def _not_started(job: Obj | None) -> bool:
    obs = JobObs.of(job)
    return obs.phase == "Active" and not obs.running


def asked_auto(body: Obj) -> bool:
    """Whether the object (not the parsed spec, where the planner's choice replaced it) asks for
    engine.parallelism.auto."""
    par = ((body.get("spec") or {}).get("engine") or {}).get("parallelism") or {}
    return bool(par.get("auto")) if isinstance(par, dict) else False


def status_fields(
    body: Obj,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    engine: EngineStep,
    workload: WorkloadObs,
    reason: str,
    obs: Observed,
    rollout: Obj | None,
) -> dict[str, Any]:
    """The status fields a valid deployment's reconcile decides (conditions aside; `rollout`:
    status.rollout as the rollout gate leaves it)."""
    par = dep.spec.topology
    current = EngineStatus(
        key=rendered.engine_key,
        path=rendered.engine_dir,
        trtllmVersion=str(dep.trtllm_version),
        tensorParallel=par.tensor,
        pipelineParallel=par.pipeline,
        cached=engine.cached,
        buildJob=None if engine.ready else engine.status.buildJob,
    )
    fields: dict[str, Any] = {
        "engine": current,
        "replicas": workload.desired,
        "readyReplicas": workload.ready,
        "selector": rendered.selector,
        "endpoint": rendered.endpoint,
        "openai": rendered.openai,
        "ready": f"{workload.ready}/{workload.desired}",
        "reason": reason,
        "parallelism": f"{par.tensor}x{par.pipeline}",
        "runtime": dep.spec.runtime,
        "fit": fit_status(dep.spec, auto=asked_auto(body)),
        **phase_fields(body, rendered, obs, engine_cached=current.cached, rollout=rollout),
    }
    if engine.anchor is not None:
        fields["engineAnchor"] = engine.anchor
    served = workload.engine_key
    # A label that is not an engine key (not written by us) names no engine.
    if served and served != rendered.engine_key and is_engine_key(served):
        fields["previousEngine"] = EngineStatus(key=served, path=naming.engine_dir(served))
    return fields


def phase_fields(
    body: Obj, rendered: Rendered, obs: Observed, *, engine_cached: bool, rollout: Obj | None
) -> dict[str, Any]:
    """status.phases, and the phase under way with its start (tritonllm.plan.phases)."""
    old = body.get("status") or {}
    same = ((old.get("engine") or {}).get("key") == rendered.engine_key
            and (old.get("repository") or {}).get("key") == rendered.repository_key)
    verified = rollout and rollout.get("revision") == template_revision(rendered.workload.body)
    seen = phases.observed_phases(obs.build_job, obs.repo_job, obs.serving_times,
                                  engine_cached=engine_cached,
                                  rollout=rollout if verified else None)
    line = phases.timeline(seen, old.get("phases") or [], same_revision=same)
    now = phases.current(line)
    return {"phases": line or None, "phase": now.name if now else None,
            "phaseStarted": now.start if now else None}


def finish(
    body: Obj,
    p: Decision,
    conds: list[Cond],
    obs: Observed,
    *,
    fields: dict[str, Any],
    keep_others: bool = False,
) -> Decision:
    """Merge conditions, build the status, and keep it only if something changed."""
    old = body.get("status") or {}
    generation = int(body["metadata"].get("generation") or 0)
    old_conds = list(old.get("conditions") or [])
    if keep_others:  # carry the conditions this plan does not decide
        decided = {x.type for x in conds}
        conds = conds + [
            Cond(x["type"], x["status"], x["reason"], x.get("message", ""))
            for x in old_conds
            if x["type"] not in decided
        ]
    conds = [x for x in conds if x.type != c.COND_READY] + [ready_condition(conds)]
    merged, flips = merge_conditions(old_conds, conds, generation=generation, now=rfc3339(obs.now))
    order = {t: i for i, t in enumerate(c.CONDITION_TYPES)}
    merged.sort(key=lambda x: order.get(x["type"], 99))
    status = TritonLLMDeploymentStatus.model_validate(old).model_copy(
        update={
            **fields,
            "conditions": [Condition.model_validate(x) for x in merged],
            "observedGeneration": generation,
        }
    )
    wire = status.to_wire()
    if wire != old:
        p.status = wire
        p.status_progress_only = progress_only(old, wire)
    # Progressing names the step under way: it leads the pass's Event when nothing is wrong
    events = events_for(sorted(flips, key=lambda f: f[0].type != c.COND_PROGRESSING))
    events += [e for e in stall_events(old_conds, conds, flips) if e[1:] not in
               {x[1:] for x in events}]  # Degraded flipping with the same words said it
    p.events = one_per_pass([*p.events, *events])
    return p


# The status fields that report progress (the phase timeline, counts, the conditions' words, the
# record of the written repository, which its Job outlives by a day): a write that changes only
# these, with none of the summary conditions changing its status, can wait a little (the times
# come from the objects themselves, so only when `kubectl get` shows them moves).
PROGRESS_FIELDS = frozenset({"phases", "phase", "phaseStarted", "conditions", "replicas",
                             "readyReplicas", "ready", "reason", "scaling", "repository"})
# What users and tools wait on: a change of their status is never held. (EngineReady and
# RepositoryReady turning True on the way are steps of Progressing, which goes on.)
SUMMARY_CONDITIONS = (c.COND_READY, c.COND_AVAILABLE, c.COND_DEGRADED, c.COND_PROGRESSING)


def progress_only(old: Obj, new: Obj) -> bool:
    """Whether `new` differs from `old` only in how far things got: no summary condition changes
    its status (True/False/Unknown), no condition appears or goes, and no field outside
    PROGRESS_FIELDS changes."""
    changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    if not changed or not changed <= PROGRESS_FIELDS:
        return False

    def statuses(st: Obj) -> dict[str, str]:
        return {x.get("type", ""): x.get("status", "") for x in st.get("conditions") or []}

    before, after = statuses(old), statuses(new)
    return before.keys() == after.keys() and all(
        before[t] == after[t] for t in SUMMARY_CONDITIONS if t in before)


def one_per_pass(events: list[EventNote]) -> list[EventNote]:
    """One Event for what a pass changed, not one per condition flip: a clean rollout flips
    EngineReady, RepositoryReady, Available and Progressing, often two in one pass, and each
    Event is a write the API server serves. The Event takes the reason of the first Warning, else
    of the first one; the others' words follow in its message, each reason once."""
    if len(events) <= 1:
        return list(events)
    warnings = [e for e in events if e.type == "Warning"]
    lead = warnings[0] if warnings else events[0]
    said = {lead.reason}
    parts = [lead.message]
    for e in events:
        if e.reason not in said and e.message not in parts:
            parts.append(f"{e.reason}: {e.message}")
        said.add(e.reason)
    return [EventNote(lead.type, lead.reason, "; ".join(parts))]


def ready_condition(conds: list[Cond]) -> Cond:
    """Ready sums the others up: True once the rollout is done (Progressing False, Deployed) and
    nothing is degraded; otherwise False with the reason and message of what stands in the way
    (Degraded first, then Progressing)."""
    by_type = {x.type: x for x in conds}
    degraded, progressing = by_type.get(c.COND_DEGRADED), by_type.get(c.COND_PROGRESSING)
    if degraded is not None and degraded.status == "True":
        return Cond(c.COND_READY, "False", degraded.reason, degraded.message)
    if progressing is None:
        return Cond(c.COND_READY, "Unknown", r.RECONCILING, "not reconciled yet")
    if progressing.status == "True" or progressing.reason != r.DEPLOYED:
        return Cond(c.COND_READY, "False", progressing.reason, progressing.message)
    return Cond(c.COND_READY, "True", r.DEPLOYED, progressing.message)


def events_for(flips: list[tuple[Cond, str | None]]) -> list[EventNote]:
    """The Event for each flip; the first "not yet" is not news."""
    events: list[EventNote] = []
    for cond, prev in flips:
        if cond.type == c.COND_READY:  # a summary: the condition that flipped with it is the news
            continue
        if prev is None and cond.status != "True":
            continue
        bad = (cond.type == c.COND_DEGRADED and cond.status == "True") or (
            cond.type in (c.COND_AVAILABLE, c.COND_ENGINE_READY, c.COND_REPOSITORY_READY)
            and cond.status == "False"
            and cond.reason != r.WAITING_FOR_ENGINE
        )
        message = cond.message or f"{cond.type} is {cond.status}"
        events.append(EventNote("Warning" if bad else "Normal", cond.reason, message))
    return events


def stall_events(
    old: list[dict[str, Any]], new: list[Cond], flips: list[tuple[Cond, str | None]]
) -> list[EventNote]:
    """A Warning Event when a Job's pod is found stuck (EngineReady or RepositoryReady changes its
    reason to one of r.POD_STALLS): the condition stays False, so no flip would announce it."""
    flipped = {cond.type for cond, _ in flips}
    before = {x["type"]: x.get("reason") for x in old}
    return [
        EventNote("Warning", cond.reason, cond.message)
        for cond in new
        if cond.type in (c.COND_ENGINE_READY, c.COND_REPOSITORY_READY)
        and cond.reason in r.POD_STALLS
        and cond.type not in flipped
        and before.get(cond.type) != cond.reason
    ]
