"""The planner: observed state in, the next writes and the new status out. Pure.

The operator is level-based and stateless: every reconcile reads the world, and this module
decides, in order,

1. the model store (create the claim if asked; otherwise wait for it),
2. prerequisites the schema cannot see (the token Secret, nodes with the GPU product),
3. the engine: reuse a Ready TritonLLMEngine (cache hit) or run its build Job, retrying a failed
   build with exponential backoff up to a limit,
4. the model repository Job for the target engine and serving settings,
5. the serving workload: switched to the new repository only once it is ready, so the old engine
   keeps serving during a rebuild (rolling update with maxUnavailable 0); a replicas-only change
   scales what is running,
6. the status (conditions with transitions, replicas, endpoint) and the Events for each flip.

Writes are filtered here: an object whose rendered hash equals the hash annotation on the live
object is not applied again, and an unchanged status is not patched, so a reconcile of an
unchanged object writes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, TritonLLMDeployment
from tritonllm.render import Rendered, naming
from tritonllm.render.engine import engine_record

from .conditions import Cond, merge_conditions

MAX_BUILD_ATTEMPTS = 3
BACKOFF_BASE_SECONDS = 30
BACKOFF_MAX_SECONDS = 600
KEEP_REPOSITORY_REVISIONS = 2  # current + previous (rollback)


def object_hash(obj: dict[str, Any]) -> str:
    """Hash of an object as we render it (the annotation itself excluded)."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
    annotations = {
        k: v
        for k, v in (obj["metadata"].get("annotations") or {}).items()
        if k != c.ANNOTATION_SPEC_HASH
    }
    return naming.stable_hash({**obj, "metadata": {**meta, "annotations": annotations}})


def with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    annotations = {
        **(obj["metadata"].get("annotations") or {}),
        c.ANNOTATION_SPEC_HASH: object_hash(obj),
    }
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


def live_hash(obj: dict[str, Any] | None) -> str | None:
    if obj is None:
        return None
    return str((obj["metadata"].get("annotations") or {}).get(c.ANNOTATION_SPEC_HASH)) or None


@dataclasses.dataclass(frozen=True)
class JobObs:
    """What a Job tells us."""

    phase: str  # Missing | Active | Succeeded | Failed
    reason: str = ""
    message: str = ""
    uid: str = ""

    @staticmethod
    def of(job: dict[str, Any] | None, pods: list[dict[str, Any]] | None = None) -> JobObs:
        if job is None:
            return JobObs("Missing")
        st = job.get("status") or {}
        uid = job["metadata"].get("uid", "")
        for cond in st.get("conditions") or []:
            if cond.get("status") != "True":
                continue
            if cond["type"] == "Complete":
                return JobObs("Succeeded", uid=uid)
            if cond["type"] == "Failed":
                reason, message = cond.get("reason", "Failed"), cond.get("message", "")
                tail = _termination_message(pods or [])
                return JobObs("Failed", reason, tail or message, uid)
        if st.get("succeeded"):
            return JobObs("Succeeded", uid=uid)
        return JobObs("Active", uid=uid)


def _termination_message(pods: list[dict[str, Any]]) -> str:
    """The last failed container's termination message (the log tail, with
    terminationMessagePolicy FallbackToLogsOnError)."""
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True):
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term and term.get("exitCode", 0) != 0:
                msg = (term.get("message") or "").strip()
                code = term.get("exitCode")
                head = f"container {cs.get('name')} exited with code {code}"
                reason = term.get("reason")
                head += f" ({reason})" if reason else ""
                return f"{head}: {msg[-2000:]}" if msg else head
    return ""


def unschedulable_message(pods: list[dict[str, Any]]) -> str | None:
    """The scheduler's message for the first serving pod it cannot place (GPUs, affinity)."""
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(c.LABEL_COMPONENT) not in (c.COMPONENT_SERVER, "worker"):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return f"{pod['metadata']['name']}: {cond.get('message', '')}".strip()
    return None


@dataclasses.dataclass(frozen=True)
class Observed:
    """Everything the planner needs, read from the API server by the handlers."""

    now: dt.datetime
    store: dict[str, Any] | None = None  # the PVC
    secret_present: bool | None = None  # None: no credentials requested
    gpu_nodes: int | None = None  # None: no product requested
    engine: dict[str, Any] | None = None  # TritonLLMEngine record
    build_job: dict[str, Any] | None = None
    build_pods: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    repo_job: dict[str, Any] | None = None
    repo_pods: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    workload: dict[str, Any] | None = None  # Deployment or LeaderWorkerSet
    # Live children by (kind, name), for the hash comparison.
    live: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    # Repository revisions (repo keys) that exist as ConfigMaps/Jobs of this deployment.
    repo_revisions: list[str] = dataclasses.field(default_factory=list)
    # Multi node only: whether the per-deployment MPI SSH key Secret exists (None: not needed).
    mpi_secret_present: bool | None = None
    # Why a serving pod cannot be scheduled (the scheduler's message), if one cannot.
    unschedulable: str | None = None


@dataclasses.dataclass
class Plan:
    """What to do now."""

    apply: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    delete: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    scale: tuple[str, str, int] | None = None  # (apiVersion, kind, replicas) of the workload
    engine_status: dict[str, Any] | None = None  # new TritonLLMEngine status, if changed
    status: dict[str, Any] | None = None  # new deployment status, if changed
    events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    requeue_after: float | None = None
    build_result: str | None = None  # "succeeded" | "failed" when a build just finished
    # Create the MPI SSH key Secret (random keys: created once, never re-applied).
    create_mpi_secret: bool = False
    # New metadata.finalizers list, when ours must be added or removed.
    finalizers: list[str] | None = None


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(s: str | None) -> dt.datetime | None:
    if not s:
        return None
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def backoff_seconds(attempts: int) -> int:
    return int(min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, attempts - 1)))


def _want(plan: Plan, obs: Observed, obj: dict[str, Any]) -> None:
    """Apply `obj` unless the live copy already carries its hash."""
    obj = with_hash(obj)
    live = obs.live.get((obj["kind"], obj["metadata"]["name"]))
    if live_hash(live) != obj["metadata"]["annotations"][c.ANNOTATION_SPEC_HASH]:
        plan.apply.append(obj)


def _workload_counts(workload: dict[str, Any] | None) -> tuple[int, int, int, bool]:
    """(desired replicas, ready, updated, rollout done) of a Deployment or LeaderWorkerSet."""
    if workload is None:
        return 0, 0, 0, False
    spec, st = workload.get("spec") or {}, workload.get("status") or {}
    desired = int(spec.get("replicas", 1))
    ready = int(st.get("readyReplicas", 0))
    updated = int(st.get("updatedReplicas", 0))
    observed = st.get("observedGeneration", 0) >= workload["metadata"].get("generation", 0)
    done = observed and updated >= desired and ready >= desired
    return desired, ready, updated, done


def _served_keys(workload: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(engine key, repository key) the live workload's pod template runs."""
    if workload is None:
        return None, None
    spec = workload.get("spec") or {}
    tmpl = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate")
    labels = ((tmpl or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_ENGINE_KEY), labels.get(c.LABEL_REPO_KEY)


def plan_invalid(body: dict[str, Any], error: InvalidDeployment, obs: Observed) -> Plan:
    """An object that slipped past the schema: say which field, touch nothing else."""
    message = "; ".join(str(e) for e in error.errors)
    conds = [
        Cond(c.COND_DEGRADED, "True", "InvalidSpec", message),
        Cond(c.COND_PROGRESSING, "False", "InvalidSpec", "fix the spec; nothing was changed"),
    ]
    return _finish(body, Plan(), conds, obs, extra={"reason": "InvalidSpec"}, keep_others=True)


def plan(body: dict[str, Any], dep: TritonLLMDeployment, rendered: Rendered, obs: Observed) -> Plan:
    """The next step for a valid deployment."""
    p = Plan()
    spec = dep.spec
    now = _rfc3339(obs.now)
    key = rendered.engine_key
    uid = body["metadata"].get("uid", "")
    objects = {(o["kind"], o["metadata"]["name"]): o for o in rendered.objects}
    conds: list[Cond] = []
    blocked: Cond | None = None

    # 1. the model store
    pvc = rendered.by_kind("PersistentVolumeClaim")
    if pvc and obs.store is None:
        p.apply.append(pvc[0])  # create once; never updated or deleted by us afterwards
    elif obs.store is None:
        blocked = Cond(
            c.COND_DEGRADED,
            "True",
            "StoreMissing",
            f"PersistentVolumeClaim {spec.storage.claimName} (spec.storage.claimName) does not "
            f"exist in namespace {dep.namespace}: create it, or set spec.storage.create to have "
            "the operator create it",
        )
    # 2. prerequisites
    if obs.secret_present is False and spec.model.credentials:
        cred = spec.model.credentials
        blocked = blocked or Cond(
            c.COND_DEGRADED,
            "True",
            "SecretMissing",
            f"Secret {cred.secretName} with key {cred.key} (spec.model.credentials) is missing in "
            f"namespace {dep.namespace}: create it with the Hugging Face token",
        )
    if obs.gpu_nodes == 0:
        blocked = blocked or Cond(
            c.COND_DEGRADED,
            "True",
            "NoMatchingNodes",
            f"no node has {c.GPU_PRODUCT_LABEL}={spec.gpu.product} (spec.gpu.product): check the "
            f"value against `kubectl get nodes -L {c.GPU_PRODUCT_LABEL}`",
        )

    # 3. the engine
    engine_state, engine_cond, engine_status = _engine(
        p, dep, rendered, obs, uid, now, blocked is not None
    )
    conds.append(engine_cond)
    engine_ready = engine_state == "Ready"

    # 4. the repository
    repo = JobObs.of(obs.repo_job, obs.repo_pods)
    repo_cm = next(
        o
        for o in rendered.by_kind("ConfigMap")
        if o["metadata"]["name"].endswith(rendered.repository_key)
    )
    repo_job = next(
        o
        for o in rendered.by_kind("Job")
        if o["metadata"]["name"] == naming.repository_job_name(dep, rendered.repository_key)
    )
    if engine_ready and blocked is None:
        _want(p, obs, repo_cm)
        if repo.phase == "Missing":
            p.apply.append(with_hash(repo_job))
    repo_ready = repo.phase == "Succeeded"
    if repo_ready:
        conds.append(
            Cond(
                c.COND_REPOSITORY_READY,
                "True",
                "RepositoryWritten",
                f"model repository at {rendered.repository_dir}",
            )
        )
    elif repo.phase == "Failed":
        conds.append(
            Cond(
                c.COND_REPOSITORY_READY,
                "False",
                "RepositoryFailed",
                f"{repo.reason}: {repo.message}".strip(": "),
            )
        )
    elif not engine_ready:
        conds.append(
            Cond(
                c.COND_REPOSITORY_READY,
                "False",
                "WaitingForEngine",
                "the repository is written once the engine is ready",
            )
        )
    else:
        conds.append(
            Cond(
                c.COND_REPOSITORY_READY,
                "False",
                "Writing",
                f"Job {repo_job['metadata']['name']} is writing the model repository",
            )
        )

    # 5. serving
    served_engine, served_repo = _served_keys(obs.workload)
    workload = next(o for o in rendered.objects if o["kind"] in ("Deployment", "LeaderWorkerSet"))
    if blocked is None:
        _want(p, obs, objects[("Service", naming.serving_name(dep))])
    if repo_ready and blocked is None:
        p.create_mpi_secret = obs.mpi_secret_present is False
        _want(p, obs, workload)
        for kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget"):
            for o in rendered.by_kind(kind):
                _want(p, obs, o)
    elif obs.workload is not None and spec.autoscaling is None:
        desired = int((obs.workload.get("spec") or {}).get("replicas", 1))
        if desired != spec.serving.replicas:
            p.scale = (workload["apiVersion"], workload["kind"], spec.serving.replicas)
    # Children that no longer belong: HPA/PDB switched off, old repository revisions.
    for kind, api in (
        ("HorizontalPodAutoscaler", "autoscaling/v2"),
        ("PodDisruptionBudget", "policy/v1"),
    ):
        if (kind, naming.serving_name(dep)) in obs.live and not rendered.by_kind(kind):
            p.delete.append((api, kind, naming.serving_name(dep)))
    keep = {rendered.repository_key, served_repo}
    for rev in obs.repo_revisions:
        if rev not in keep:
            p.delete.append(("v1", "ConfigMap", naming.plan_configmap_name(dep, rev)))
            p.delete.append(("batch/v1", "Job", naming.repository_job_name(dep, rev)))

    desired, ready, updated, done = _workload_counts(obs.workload)
    serving_target = served_repo == rendered.repository_key
    if ready > 0:
        conds.append(
            Cond(
                c.COND_AVAILABLE,
                "True",
                "Serving",
                f"{ready} of {desired} replicas ready at {rendered.endpoint}",
            )
        )
    elif obs.workload is None:
        conds.append(
            Cond(
                c.COND_AVAILABLE,
                "False",
                "NotDeployed",
                "the serving workload is created once the repository is ready",
            )
        )
    else:
        conds.append(
            Cond(
                c.COND_AVAILABLE,
                "False",
                "NoReadyReplicas",
                "no serving replica has passed its readiness probe yet",
            )
        )

    failed = engine_state == "Failed" or repo.phase == "Failed"
    if blocked is not None:
        conds.append(blocked)
        conds.append(Cond(c.COND_PROGRESSING, "False", blocked.reason, blocked.message))
        reason = blocked.reason
        p.requeue_after = 60
    elif failed:
        cond = (
            engine_cond
            if engine_state == "Failed"
            else next(x for x in conds if x.type == c.COND_REPOSITORY_READY)
        )
        conds.append(Cond(c.COND_DEGRADED, "True", cond.reason, cond.message))
        retrying = (
            engine_state == "Failed" and engine_status.get("attempts", 0) < MAX_BUILD_ATTEMPTS
        )
        conds.append(
            Cond(
                c.COND_PROGRESSING,
                "True" if retrying else "False",
                "RetryingBuild" if retrying else cond.reason,
                cond.message,
            )
        )
        reason = cond.reason
    else:
        conds.append(Cond(c.COND_DEGRADED, "False", "AsExpected", ""))
        if not engine_ready:
            conds.append(Cond(c.COND_PROGRESSING, "True", engine_cond.reason, engine_cond.message))
            reason = engine_cond.reason
        elif not repo_ready:
            conds.append(
                Cond(
                    c.COND_PROGRESSING, "True", "WritingRepository", "writing the model repository"
                )
            )
            reason = "WritingRepository"
        elif not (serving_target and done):
            what = "rolling out" if obs.workload else "starting"
            reason = "RollingOut"
            message = f"{what}: {updated}/{desired} replicas updated, {ready} ready"
            if obs.unschedulable:
                reason = "Unschedulable"
                message += f"; a serving pod cannot be scheduled: {obs.unschedulable}"
            conds.append(Cond(c.COND_PROGRESSING, "True", reason, message))
        else:
            conds.append(
                Cond(
                    c.COND_PROGRESSING,
                    "False",
                    "Deployed",
                    "every replica runs the current engine and settings",
                )
            )
            reason = "Ready" if ready else "ScaledToZero"

    p.finalizers = finalizers_for(body, spec.storage.engineRetention == "Delete")
    engine_info: dict[str, Any] = {
        "key": key,
        "path": rendered.engine_dir,
        "trtllmVersion": str(dep.trtllm_version),
        "tensorParallel": spec.engine.parallelism.tensor,
        "pipelineParallel": spec.engine.parallelism.pipeline,
        "cached": engine_ready and engine_status.get("builtFor") not in (None, uid),
    }
    if engine_status.get("buildJob") and not engine_ready:
        engine_info["buildJob"] = engine_status["buildJob"]
    extra: dict[str, Any] = {
        "engine": engine_info,
        "replicas": desired,
        "readyReplicas": ready,
        "selector": rendered.selector,
        "endpoint": rendered.endpoint,
        "ready": f"{ready}/{desired}",
        "reason": reason,
        "parallelism": f"{spec.engine.parallelism.tensor}x{spec.engine.parallelism.pipeline}",
    }
    previous = (body.get("status") or {}).get("previousEngine")
    if served_engine and served_engine != key:
        previous = {"key": served_engine, "path": naming.engine_dir(served_engine)}
    if previous:
        extra["previousEngine"] = previous
    if engine_state in ("Building", "Pending") or (repo_ready and not done):
        p.requeue_after = p.requeue_after or 30
    return _finish(body, p, conds, obs, extra=extra)


FINALIZER = f"{c.GROUP}/engine-cleanup"


def finalizers_for(body: dict[str, Any], want: bool) -> list[str] | None:
    """The finalizers list with ours added or removed as `want` says; None if already right.

    Only engineRetention Delete needs a finalizer (to forget engines when the deployment goes);
    with the default Retain the object has none, so nothing can block its deletion.
    """
    current = list(body["metadata"].get("finalizers") or [])
    if (FINALIZER in current) == want:
        return None
    return [*current, FINALIZER] if want else [f for f in current if f != FINALIZER]


def plan_deletion(body: dict[str, Any], users_of_engine: list[str]) -> tuple[bool, list[str]]:
    """On deletion with our finalizer: (forget the engine record?, the new finalizers list).

    The engine record goes only when no other deployment uses its key. The finalizer is released
    in the same pass whatever happens, so deletion is never blocked on the cleanup.
    """
    name = body["metadata"]["name"]
    others = [u for u in users_of_engine if u != name]
    return not others, [f for f in body["metadata"].get("finalizers") or [] if f != FINALIZER]


def _engine(
    p: Plan,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    obs: Observed,
    uid: str,
    now: str,
    blocked: bool,
) -> tuple[str, Cond, dict[str, Any]]:
    """Engine record and build Job decisions. Returns (state, EngineReady condition, status)."""
    key = rendered.engine_key
    record = engine_record(dep, key)
    if obs.engine is None:
        if not blocked:
            p.apply.append(record)
        status: dict[str, Any] = {"state": "Pending", "attempts": 0}
    else:
        status = dict(obs.engine.get("status") or {"state": "Pending", "attempts": 0})
    old_status = dict(status)
    state = status.get("state", "Pending")
    job_name = naming.build_job_name(key, dep.spec.runtime)
    job = JobObs.of(obs.build_job, obs.build_pods)
    what = "download" if dep.spec.runtime == "llmapi" else "build"

    if state != "Ready" and not blocked:
        if job.phase == "Succeeded":
            state = "Ready"
            status.update(
                state="Ready",
                builtAt=now,
                message=f"{what} finished",
                builtFor=status.get("builtFor") or uid,
            )
            status.pop("buildJob", None)
            p.build_result = "succeeded"
        elif job.phase == "Failed":
            last = status.get("lastFailure") or {}
            if last.get("job") != job.uid:  # count each failed Job once
                status["attempts"] = int(status.get("attempts", 0)) + 1
                status["lastFailure"] = {
                    "reason": job.reason or "BackoffLimitExceeded",
                    "message": job.message,
                    "time": now,
                    "job": job.uid,
                }
                p.build_result = "failed"
            attempts = int(status["attempts"])
            state = "Failed"
            status["state"] = "Failed"
            if attempts < MAX_BUILD_ATTEMPTS:
                failed_at = _parse_time(status["lastFailure"]["time"]) or obs.now
                wait = backoff_seconds(attempts) - (obs.now - failed_at).total_seconds()
                if wait <= 0:
                    # Retry: remove the failed Job; the next reconcile creates a fresh one.
                    p.delete.append(("batch/v1", "Job", job_name))
                    status["message"] = f"retrying the {what} (attempt {attempts + 1})"
                else:
                    status["message"] = (
                        f"{what} failed (attempt {attempts} of "
                        f"{MAX_BUILD_ATTEMPTS}); retrying in {int(wait)}s"
                    )
                    p.requeue_after = max(5.0, wait)
            else:
                status["message"] = (
                    f"{what} failed {attempts} times; change the spec (a new "
                    "engine key) or delete the TritonLLMEngine to try again"
                )
        else:
            if job.phase == "Missing":
                for o in rendered.objects:
                    if o["metadata"]["name"] == job_name and o["kind"] in ("ConfigMap", "Job"):
                        _want(p, obs, o)
            state = "Building"
            status.update(
                state="Building", buildJob=job_name, message=f"Job {job_name} is running the {what}"
            )
            status.setdefault("builtFor", uid)
    # The record's status is written once the record exists or is created in this pass.
    record_exists = obs.engine is not None or not blocked
    if record_exists and (status != old_status or obs.engine is None):
        p.engine_status = status

    if state == "Ready":
        cached = status.get("builtFor") not in (None, uid)
        cond = Cond(
            c.COND_ENGINE_READY,
            "True",
            "EngineCached" if cached else "EngineBuilt",
            f"engine {key} at {rendered.engine_dir}"
            + (" (reused from the cache)" if cached else ""),
        )
    elif state == "Failed":
        last = status.get("lastFailure") or {}
        cond = Cond(
            c.COND_ENGINE_READY,
            "False",
            "BuildFailed",
            f"Job {job_name} failed ({last.get('reason', '')}): {last.get('message', '')}".strip(),
        )
    elif blocked:
        cond = Cond(c.COND_ENGINE_READY, "Unknown", "Blocked", "waiting for prerequisites")
    else:
        cond = Cond(
            c.COND_ENGINE_READY,
            "False",
            "Building" if what == "build" else "Downloading",
            status.get("message", ""),
        )
    return state, cond, status


def _finish(
    body: dict[str, Any],
    p: Plan,
    conds: list[Cond],
    obs: Observed,
    *,
    extra: dict[str, Any],
    keep_others: bool = False,
) -> Plan:
    """Merge conditions, build the status, and keep it only if something changed."""
    old = body.get("status") or {}
    generation = int(body["metadata"].get("generation") or 0)
    old_conds = list(old.get("conditions") or [])
    if keep_others:  # carry the conditions this plan does not decide
        decided = {x.type for x in conds}
        conds = [
            *conds,
            *(
                Cond(x["type"], x["status"], x["reason"], x.get("message", ""))
                for x in old_conds
                if x["type"] not in decided
            ),
        ]
    merged, flips = merge_conditions(old_conds, conds, generation=generation, now=_rfc3339(obs.now))
    order = {t: i for i, t in enumerate(c.CONDITION_TYPES)}
    merged.sort(key=lambda x: order.get(x["type"], 99))
    status = {
        **{k: v for k, v in old.items() if k not in extra and k != "conditions"},
        **extra,
        "conditions": merged,
        "observedGeneration": generation,
    }
    if status != old:
        p.status = status
    for cond, prev in flips:
        if prev is None and cond.status != "True":
            continue  # the first "not yet" of a new object is not news
        bad = (cond.type == c.COND_DEGRADED and cond.status == "True") or (
            cond.type in (c.COND_AVAILABLE, c.COND_ENGINE_READY, c.COND_REPOSITORY_READY)
            and cond.status == "False"
            and cond.reason not in ("WaitingForEngine",)
        )
        p.events.append(
            (
                "Warning" if bad else "Normal",
                cond.reason,
                cond.message or f"{cond.type} is {cond.status}",
            )
        )
    return p
