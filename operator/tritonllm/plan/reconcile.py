"""The planner: observed state in, the next writes and the new status out. Pure.

The operator is level-based and stateless: every reconcile reads the world, and this module
decides, in order,

0. multi node: the MPI key Secret (created on the first pass, so that its name is never free
   for someone else to take while the deployment waits for its engine),
1. the model store (create the claim if asked; otherwise wait for it),
2. prerequisites the schema cannot see (the token Secret, nodes with the GPU product),
3. the engine: reuse a Ready TritonLLMEngine (cache hit) or run its build Job, retrying a failed
   build with exponential backoff up to a limit,
4. the model repository Job for the target engine and serving settings,
5. the serving workload: switched to the new repository only once it is ready (the first one is
   created once the repository Job's pod exists: its pods wait for the repository), so the old
   engine keeps serving during a rebuild (rolling update with maxUnavailable 0), and with a verified
   rollout only once the new revision answered the smoke set on a pod of its own (rollout); a
   replicas-only change scales what is running; children that no longer belong are removed,
6. the status (conditions with transitions, replicas, endpoint) and the Events for each flip.

Each step is a module of this package (prerequisites, engine, repository, serving and gc,
status); `plan` below reads like this list. Writes are filtered there: an object whose rendered
hash equals the hash annotation on the live object is not applied again, and an unchanged status
is not patched, so a reconcile of an unchanged object writes nothing. A step that waits for
something no watch event announces (a backoff, a missing prerequisite) sets `requeue_after`.
"""

from __future__ import annotations

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import InvalidDeployment, TritonLLMDeployment
from tritonllm.render import Rendered

from .conditions import Cond
from .deletion import FINALIZER, finalizers_for, plan_deletion
from .engine import MAX_BUILD_ATTEMPTS, backoff_seconds, engine_step
from .gc import collect_garbage
from .observed import Obj, Observed, unschedulable_message
from .ownership import (
    conflict_message,
    conflicts,
    is_ours,
    mpi_secret_check,
    recorded_uid_fields,
    trusted_build_uids,
)
from .prerequisites import prerequisites_step
from .repository import recorded, repository_step, written
from .scaling import scaling_status
from .serving import available, serving_step
from .status import (
    BLOCKED_REQUEUE_SECONDS,
    blocked_summary,
    finish,
    requeue_for,
    status_fields,
    summarise,
)
from .writes import Decision

__all__ = [
    "FINALIZER",
    "MAX_BUILD_ATTEMPTS",
    "Decision",
    "Observed",
    "backoff_seconds",
    "conflict_message",
    "is_ours",
    "plan",
    "plan_deletion",
    "plan_failed",
    "plan_invalid",
    "unschedulable_message",
]


def plan(body: Obj, dep: TritonLLMDeployment, rendered: Rendered, obs: Observed) -> Decision:
    """The next step for a valid deployment."""
    p = Decision()
    uid = body["metadata"].get("uid", "")
    p.recorded, copy_uids = trusted_build_uids(body, obs)
    if obs.repo_job_shared_uid:  # the content key's repository Job, another deployment's
        p.recorded |= {obs.repo_job_shared_uid}
    # 0. multi node: the MPI key Secret, on the first pass (its name is computable: taken later
    # by someone else, it would be refused, but the deployment could not start)
    p.create_mpi_secret = obs.mpi_secret_present is False
    mpi_conflict, mpi_adopted = mpi_secret_check(body, obs, uid)
    # 1-2. the store and the prerequisites
    blocked = prerequisites_step(p, dep, rendered, obs)
    # 3. the engine
    engine = engine_step(p, dep, rendered, obs, uid=uid, blocked=blocked is not None, body=body)
    blocked = blocked or engine.digest_changed  # the record's digest is not the anchored one
    # 4. the repository
    repo = repository_step(
        p, dep, rendered, obs, engine_ready=engine.usable, blocked=blocked is not None,
        was_written=recorded(body, dep, rendered),
    )
    # 5. serving, and what no longer belongs
    workload, gate = serving_step(
        p, dep, rendered, obs, repository_ready=repo.ready, blocked=blocked is not None,
        rollout=(body.get("status") or {}).get("rollout"),
        repository_writing=engine.usable and obs.repo_pod_exists,
    )
    collect_garbage(p, dep, rendered, obs, served_repo=workload.repo_key)
    build = (rendered.build_job.ref, rendered.build_configmap.ref)
    clash = conflicts(p, obs, uid, build_objects=build) + ([mpi_conflict] if mpi_conflict else [])
    if clash:  # touch nothing that is not ours; say what is in the way
        return plan_failed(body, r.NAME_CONFLICT, "; ".join(clash), obs)
    # 6. the status, the Events of its flips, and when to look again
    if blocked is not None:
        summary = blocked_summary(blocked)
        p.requeue(BLOCKED_REQUEUE_SECONDS)
    else:
        summary = gate.amend(
            summarise(engine, repo, workload, obs, target_repo=rendered.repository_key))
        requeue_for(p, engine, repo, workload, obs)
    conds = [engine.condition, repo.condition, available(workload, rendered.endpoint),
             summary.degraded, summary.progressing]
    p.finalizers = finalizers_for(body, dep.spec.storage.engineRetention == "Delete")
    rollout = gate.status or (body.get("status") or {}).get("rollout")
    fields = status_fields(body, dep, rendered, engine, workload, summary.reason, obs, rollout)
    fields.update(recorded_uid_fields(mpi_adopted, copy_uids), **gate.fields())
    fields["scaling"] = scaling_status(dep, workload, obs)
    if repo.ready:  # outlives the repository Job, which is collected a day after it finishes
        fields["repository"] = written(dep, rendered)
    return finish(body, p, conds, obs, fields=fields)


def plan_invalid(body: Obj, error: InvalidDeployment, obs: Observed) -> Decision:
    """An object that slipped past the schema: say which field, touch nothing else."""
    message = "; ".join(str(e) for e in error.errors)
    fit_only = all(e.reason == r.DOES_NOT_FIT for e in error.errors)
    reason = r.DOES_NOT_FIT if error.errors and fit_only else r.INVALID_SPEC
    return plan_failed(body, reason, message, obs, progress="fix the spec; nothing was "
                       "changed")


def plan_failed(
    body: Obj,
    reason: str,
    message: str,
    obs: Observed,
    *,
    progress: str = "stopped until the problem named by Degraded is fixed",
) -> Decision:
    """A reconcile that cannot go on: Degraded names the field or object and the fix, Progressing
    stops, the other conditions stay as they were; nothing else is written."""
    conds = [
        Cond(c.COND_DEGRADED, "True", reason, message),
        Cond(c.COND_PROGRESSING, "False", reason, progress),
    ]
    p = finish(body, Decision(), conds, obs, fields={"reason": reason}, keep_others=True)
    if reason == r.NAME_CONFLICT:  # the object in the way sends us no watch event when it goes
        p.requeue(BLOCKED_REQUEUE_SECONDS)
    return p
