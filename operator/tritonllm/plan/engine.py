"""The engine step: reuse a Ready TritonLLMEngine (a cache hit) or run its build Job.

The TritonLLMEngine record of an engine key is created on first use and carries the build's
state machine in its status:

    Pending ──► Building ──► Ready                       (the build Job succeeded)
                   │
                   └──► Failed ──► (backoff) ──► Building   (attempts < MAX_BUILD_ATTEMPTS)
                          └──► stays Failed until the spec (the key) changes or the record goes

A failed Job is counted once (by its UID) and kept for inspection until the backoff has run out;
then it is deleted so that the next reconcile creates a fresh one. While a backoff runs, the plan
asks to be requeued when it ends.
"""

from __future__ import annotations

import dataclasses

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.engine import EngineFailure, TritonLLMEngineStatus
from tritonllm.api.status import EngineAnchor
from tritonllm.render import ObjectRef, Rendered
from tritonllm.render.engine import engine_record
from tritonllm.render.plans import has_artifact

from .conditions import Cond
from .observed import JobObs, Obj, Observed, build_report
from .ownership import owner_uids
from .stalls import Context, Stall, explain
from .writes import Decision, parse_time, rfc3339, want

MAX_BUILD_ATTEMPTS = 3
BACKOFF_BASE_SECONDS = 30
BACKOFF_MAX_SECONDS = 600
# The shortest wait the engine step asks for (a backoff about to end, a deleted Job to recreate).
MIN_REQUEUE_SECONDS = 5.0


def backoff_seconds(attempts: int) -> int:
    return int(min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, attempts - 1)))


def record_status(record: Obj | None) -> TritonLLMEngineStatus:
    """The status of a TritonLLMEngine record (a fresh Pending one when there is none yet)."""
    return TritonLLMEngineStatus.model_validate((record or {}).get("status") or {})


def is_cache_hit(status: TritonLLMEngineStatus, uid: str) -> bool:
    """Ready, and built by another deployment's reconcile: this deployment reuses it."""
    return status.state == "Ready" and status.builtFor not in (None, uid)


def accepted_digest(body: Obj) -> str | None:
    """The engine digest the deployment's owner accepted in place of the anchored one."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return annotations.get(c.ANNOTATION_ACCEPT_ENGINE_DIGEST) or None


def anchored(body: Obj, key: str) -> EngineAnchor | None:
    """status.engineAnchor of the deployment `body`, when it is this engine key's."""
    raw = (body.get("status") or {}).get("engineAnchor")
    try:
        anchor = EngineAnchor.model_validate(raw) if isinstance(raw, dict) else None
    except ValueError:  # only the operator writes it; unreadable, it anchors nothing
        return None
    return anchor if anchor is not None and anchor.key == key else None


def engine_anchor(body: Obj, key: str, record: TritonLLMEngineStatus) -> EngineAnchor | None:
    """The digests the serving pods check the store against: the ones the deployment's status
    anchored for this engine key, taken from the record the first time it is Ready with a
    digest. A recreated record's other digest replaces them only when the deployment's owner
    accepts it by name (the annotation): deleting the record must not re-anchor what a pod that
    can write the store left there."""
    anchor = anchored(body, key)
    digest = record.digest if record.state == "Ready" else None
    if digest and (anchor is None or (digest != anchor.digest
                                      and digest == accepted_digest(body))):
        return EngineAnchor(key=key, digest=digest, fingerprintDigest=record.fingerprintDigest)
    return anchor


def digest_changed(
    rendered: Rendered, record: TritonLLMEngineStatus, anchor: EngineAnchor | None
) -> Cond | None:
    """Degraded when the Ready record names another digest than the anchored one."""
    if anchor is None or record.state != "Ready" or record.digest == anchor.digest:
        return None
    now = record.digest or "no digest"
    accept = (f"annotate the deployment {c.ANNOTATION_ACCEPT_ENGINE_DIGEST}={now}"
              if record.digest else "rebuild it with a build that reports its digest")
    return Cond(
        c.COND_DEGRADED, "True", r.ENGINE_DIGEST_CHANGED,
        f"TritonLLMEngine {rendered.engine_key} now records engine digest {now}, not "
        f"{anchor.digest}, which this deployment anchored when the engine was first recorded "
        "(status.engineAnchor): the record was recreated and its build re-read the store at "
        f"{rendered.engine_dir}. Nothing new is rolled out and the serving pods still check the "
        f"store against {anchor.digest} (a changed engine is refused). If the engine on the "
        f"store is the one to serve (rebuilt on purpose), {accept}; otherwise delete the "
        "TritonLLMEngine and the engine directory to rebuild it, then accept the digest its "
        "build reports",
    )


@dataclasses.dataclass(frozen=True)
class EngineStep:
    """Where the engine stands after this step."""

    status: TritonLLMEngineStatus
    condition: Cond  # EngineReady
    cached: bool  # Ready and built for another deployment (is_cache_hit): reused, not built
    # The rendered launch plan carries the digest the record holds (False in the pass that
    # records it: the repository waits one pass, so that its plan names the digest).
    digest_rendered: bool = True
    # The digests anchored in the deployment's status (engine_anchor), and Degraded when the
    # record names others (digest_changed): the pass then changes nothing that serves.
    anchor: EngineAnchor | None = None
    digest_changed: Cond | None = None

    @property
    def ready(self) -> bool:
        return self.status.state == "Ready"

    @property
    def usable(self) -> bool:
        """Ready, and the plans rendered in this pass name its digest."""
        return self.ready and self.digest_rendered

    @property
    def failed(self) -> bool:
        return self.status.state == "Failed"

    @property
    def retrying(self) -> bool:
        return self.failed and self.status.attempts < MAX_BUILD_ATTEMPTS


def engine_step(
    p: Decision,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    obs: Observed,
    *,
    uid: str,
    blocked: bool,
    body: Obj,
) -> EngineStep:
    """Engine record and build Job decisions."""
    if obs.engine is None and not blocked:
        p.apply.append(engine_record(dep, rendered.engine_key))
    old = record_status(obs.engine)
    status = old
    if old.state != "Ready" and not blocked:
        status = _advance(p, dep, rendered, obs, old, uid)
    # The record's status is written once the record exists or is created in this pass.
    record_exists = obs.engine is not None or not blocked
    if record_exists and (status != old or obs.engine is None or p.create):
        p.engine_status = status.to_wire()
    stall = obs.build_stall if status.state == "Building" else None
    rendered_digest = (rendered.launch_plan.get("engineDigest") or {}).get("engine")
    anchor = engine_anchor(body, rendered.engine_key, status)
    expected = anchor.digest if anchor is not None else status.digest
    # Only what the build records in an artifact.json has a digest (an engine, a quantized
    # llmapi checkpoint; not a plain download).
    digest_rendered = rendered_digest == expected or not has_artifact(dep)
    if status.state == "Ready" and not digest_rendered:
        p.requeue(MIN_REQUEUE_SECONDS)  # the record's write brings a reconcile first, usually
    cached = is_cache_hit(status, uid)
    condition = _condition(dep, rendered, status, cached=cached, blocked=blocked, stall=stall)
    return EngineStep(status, condition, cached, digest_rendered, anchor,
                      digest_changed(rendered, status, anchor))


def _what(dep: TritonLLMDeployment) -> str:
    if dep.spec.runtime == "llmapi":
        return "quantization" if dep.spec.engine.quantization.format != "none" else "download"
    return "build"


def _advance(
    p: Decision,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    obs: Observed,
    status: TritonLLMEngineStatus,
    uid: str,
) -> TritonLLMEngineStatus:
    """One transition of the build state machine, from what the build Job says."""
    job = JobObs.of(obs.build_job, obs.build_pods)
    what, name = _what(dep), rendered.build_job.name
    if job.phase == "Succeeded":
        p.build_result = "succeeded"
        # The engine's digest, from the build pod's own report: serving pods refuse an engine
        # on the store that is not this one (tritonllm.runtime.verified).
        report = build_report(obs.build_job, obs.build_pods) if has_artifact(dep) else {}
        unreported = " (it reported no engine digest: serving pods check the store's "
        unreported += "artifact.json only)"
        return status.model_copy(
            update={
                "state": "Ready",
                "builtAt": rfc3339(obs.now),
                "message": f"{what} finished"
                + ("" if report or not has_artifact(dep) else unreported),
                "builtFor": status.builtFor or uid,
                "buildJob": None,
                "digest": report.get("digest"),
                "fingerprintDigest": report.get("fingerprintDigest"),
            }
        )
    if job.phase == "Failed":
        return _failed(p, status, job, rendered.build_job.ref, what, obs)
    if job.phase == "Missing":
        # Created, not applied: a name taken meanwhile is refused, never adopted; the executor
        # records the new uids (buildPlanUid, buildJobUid) with this status.
        if obs.live.get(rendered.build_configmap.ref) is None:
            p.create.append(rendered.build_configmap.stamped())
        else:
            want(p, obs, rendered.build_configmap)
        p.create.append(rendered.build_job.stamped())
        status = status.model_copy(update={"buildJobUid": None})
    else:
        _add_owner(p, rendered, obs, uid)
    return status.model_copy(
        update={
            "state": "Building",
            "buildJob": name,
            "message": f"Job {name} is running the {what}",
            "builtFor": uid if status.builtFor is None else status.builtFor,
        }
    )


def _add_owner(p: Decision, rendered: Rendered, obs: Observed, uid: str) -> None:
    """Every deployment waiting for a build owns its Job and plan (not as their controller):
    deleting the one that started it must not garbage-collect a build others still wait for.
    The garbage collector drops the reference of a deployment that goes."""
    if not uid:
        return
    for obj, live in (
        (rendered.build_configmap, obs.live.get(rendered.build_configmap.ref)),
        (rendered.build_job, obs.build_job),
    ):
        if live is not None and uid not in owner_uids(live):
            p.add_owner.append(dataclasses.replace(obj.ref, uid=live["metadata"].get("uid")))


def _failed(
    p: Decision, status: TritonLLMEngineStatus, job: JobObs, job_ref: ObjectRef, what: str,
    obs: Observed,
) -> TritonLLMEngineStatus:
    """A failed build Job: count it once, then back off, retry or give up."""
    last = status.lastFailure
    if last is None or last.job != job.uid:
        failure = EngineFailure(
            reason=job.reason or "BackoffLimitExceeded",
            message=job.message,
            time=rfc3339(obs.now),
            job=job.uid,
        )
        status = status.model_copy(update={"attempts": status.attempts + 1, "lastFailure": failure})
        p.build_result = "failed"
    attempts = status.attempts
    if attempts >= MAX_BUILD_ATTEMPTS:
        message = (
            f"{what} failed {attempts} times; change the spec (a new "
            "engine key) or delete the TritonLLMEngine to try again"
        )
    else:
        assert status.lastFailure is not None
        failed_at = parse_time(status.lastFailure.time) or obs.now
        wait = backoff_seconds(attempts) - (obs.now - failed_at).total_seconds()
        if wait <= 0:
            # Retry: remove the failed Job; the next reconcile (soon) creates a fresh one.
            p.delete.append(dataclasses.replace(job_ref, uid=job.uid or None))
            p.requeue(MIN_REQUEUE_SECONDS)
            message = f"retrying the {what} (attempt {attempts + 1})"
        else:
            message = (
                f"{what} failed (attempt {attempts} of {MAX_BUILD_ATTEMPTS}); "
                f"retrying in {int(wait)}s"
            )
            p.requeue(max(MIN_REQUEUE_SECONDS, wait))
    return status.model_copy(update={"state": "Failed", "message": message})


def _condition(
    dep: TritonLLMDeployment,
    rendered: Rendered,
    status: TritonLLMEngineStatus,
    *,
    cached: bool,
    blocked: bool,
    stall: Stall | None = None,
) -> Cond:
    """EngineReady from the engine's state (and, while it builds, from what holds its pod)."""
    key = rendered.engine_key
    if status.state == "Ready":
        message = f"engine {key} at {rendered.engine_dir}"
        message += " (reused from the cache)" if cached else ""
        return Cond(
            c.COND_ENGINE_READY, "True", r.ENGINE_CACHED if cached else r.ENGINE_BUILT, message
        )
    if status.state == "Failed":
        last = status.lastFailure or EngineFailure(reason="", time="")
        message = f"Job {rendered.build_job.name} failed ({last.reason}): {last.message}"
        return Cond(c.COND_ENGINE_READY, "False", r.BUILD_FAILED, message.strip())
    if blocked:
        return Cond(c.COND_ENGINE_READY, "Unknown", r.BLOCKED, "waiting for prerequisites")
    if stall is not None:
        ctx = Context(dep.namespace, dep.spec.storage.claimName, dep.spec.gpu.product)
        message = explain(stall, rendered.build_job.name, _what(dep), ctx)
        return Cond(c.COND_ENGINE_READY, "False", stall.reason, message)
    reason = r.DOWNLOADING if _what(dep) == "download" else r.BUILDING
    return Cond(c.COND_ENGINE_READY, "False", reason, status.message or "")
