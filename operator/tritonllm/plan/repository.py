"""The model repository step: its ConfigMap and Job for the target engine and serving settings.

Both are named by the repository key (a content hash of the rendered files and the launch plan),
so a serving change is a new revision next to the current one; the Job runs only once the engine
is ready and nothing is blocked. The ConfigMap is the deployment's own (its serving pods mount
its launch plan); the Job and the directory it writes are the content key's, shared by every
deployment of the namespace that renders the same repository: the first to need it creates it,
the others wait for it (so N identical deployments run one Job, not N).

The Job is collected a day after it finishes (ttlSecondsAfterFinished); the files stay on the
store. The revision its completion wrote is recorded in status.repository, and a missing Job
whose revision (key, directory and claim) is recorded there counts as done: a Ready deployment
stays Ready, and no new Job rewrites what is already there.
"""

from __future__ import annotations

import dataclasses

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.status import RepositoryStatus
from tritonllm.render import Rendered

from .conditions import Cond
from .observed import JobObs, Obj, Observed
from .stalls import Context, Stall, explain
from .writes import Decision, want


@dataclasses.dataclass(frozen=True)
class RepositoryStep:
    job: JobObs
    condition: Cond  # RepositoryReady

    @property
    def ready(self) -> bool:
        return self.job.phase == "Succeeded"

    @property
    def failed(self) -> bool:
        return self.job.phase == "Failed"


def written(dep: TritonLLMDeployment, rendered: Rendered) -> RepositoryStatus:
    """The record of the target revision, once its Job has completed (status.repository)."""
    return RepositoryStatus(
        key=rendered.repository_key,
        path=rendered.repository_dir,
        claimName=dep.spec.storage.claimName,
    )


def recorded(body: Obj, dep: TritonLLMDeployment, rendered: Rendered) -> bool:
    """Whether the status records the target revision as written."""
    record = (body.get("status") or {}).get("repository") or {}
    return bool(record) and record == written(dep, rendered).to_wire()


def repository_step(
    p: Decision,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    obs: Observed,
    *,
    engine_ready: bool,
    blocked: bool,
    was_written: bool = False,
) -> RepositoryStep:
    """Write the repository once the engine is ready; RepositoryReady from its Job (and, while
    it runs, from what holds its pod), or from the record (`was_written`) once the finished Job
    is collected."""
    job = JobObs.of(obs.repo_job, obs.repo_pods)
    if obs.repo_job_orphaned:
        job = JobObs("Missing")
    if job.phase == "Missing" and was_written:
        job = JobObs("Succeeded")
    if engine_ready and not blocked:
        want(p, obs, rendered.repository_configmap)
        if job.phase == "Missing" and not obs.repo_job_orphaned:
            # Named by the content key: another deployment of the namespace that renders the
            # same repository may create it first (then this one reads it).
            p.create_shared.append(rendered.repository_job.stamped())
    stall = obs.repo_stall if job.phase == "Active" else None
    ctx = Context(dep.namespace, dep.spec.storage.claimName, None, spec_resources=False)
    return RepositoryStep(job, _condition(rendered, job, engine_ready=engine_ready, stall=stall,
                                          ctx=ctx, orphaned=obs.repo_job_orphaned))


def _condition(
    rendered: Rendered, job: JobObs, *, engine_ready: bool, stall: Stall | None, ctx: Context,
    orphaned: bool,
) -> Cond:
    if job.phase == "Succeeded":
        where = f"model repository at {rendered.repository_dir}"
        return Cond(c.COND_REPOSITORY_READY, "True", r.REPOSITORY_WRITTEN, where)
    if job.phase == "Failed":
        message = f"{job.reason}: {job.message}".strip(": ")
        return Cond(c.COND_REPOSITORY_READY, "False", r.REPOSITORY_FAILED, message)
    if not engine_ready:
        message = "the repository is written once the engine is ready"
        return Cond(c.COND_REPOSITORY_READY, "False", r.WAITING_FOR_ENGINE, message)
    if orphaned and job.phase == "Missing":
        message = (f"Job {rendered.repository_job.name} of a deleted deployment is being "
                   "garbage-collected; it is created again once it is gone")
        return Cond(c.COND_REPOSITORY_READY, "False", r.WRITING, message)
    if stall is not None:
        message = explain(stall, rendered.repository_job.name, "repository", ctx)
        return Cond(c.COND_REPOSITORY_READY, "False", stall.reason, message)
    message = f"Job {rendered.repository_job.name} is writing the model repository"
    return Cond(c.COND_REPOSITORY_READY, "False", r.WRITING, message)
