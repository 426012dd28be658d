"""Ownership: the operator trusts, changes and deletes only objects it created. Pure.

Labels and owner references can be written by anyone who may create the object, so neither alone
says who created it. An object is the deployment's when it carries the operator's managed-by
label and

- a per-deployment object (Service, workload, repository Job and plan, ...): a *controller* owner
  reference to the deployment's uid (the operator writes exactly one; a non-controller reference
  is what the shared build objects carry for every user); the MPI key Secret, whose keys open the
  workers' sshd, also needs its uid to be the one the deployment's status recorded when the
  operator created it (`mpiSecretUid`; users cannot write the status);
- an object of an engine key, shared by the deployments with that key (the build Job and its plan
  ConfigMap): its own uid is the one the operator recorded in the TritonLLMEngine's status when it
  created it (`buildJobUid`, `buildPlanUid`; users cannot write that status), or that the
  deployment's status copied from it (`buildObjectUids`, for a record deleted mid-build). A Job
  planted under the computable name, with the right labels and a `Complete` status, is therefore
  never read as a finished build.

- the repository Job of a content key, shared by the namespace's deployments that render the same
  repository: controlled by the deployment that created it, and trusted by the others when the
  watch shows that deployment, with that uid, in the namespace (`shared_controller`); only its
  controller deletes it.

Anything else with a name the deployment needs (a Service that was there first, the cluster's own
`kubernetes` Service, a planted Job or Secret) is a name conflict: nothing is applied to it,
nothing deletes it, nothing reads its result, and the deployment says which object is in the way
(Degraded, reason NameConflict) until it is renamed or removed.

What the watches show is checked here, before any write; an object the watches cannot show
(one without our label) is found by the executor's read before it creates an object
(`tritonllm.handlers.execute`), which reports it the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.engine import TritonLLMEngineStatus
from tritonllm.api.topology import DEPLOYMENT, LEADER_WORKER_SET
from tritonllm.render import ObjectRef

from .observed import Observed
from .writes import Decision


def controlled_by(live: Mapping[str, Any], uid: str) -> bool:
    """Whether the live object names the deployment with this uid as its controller."""
    refs = (live.get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(
        r.get("uid") == uid and r.get("controller") is True and r.get("kind") == c.KIND
        for r in refs
    )


def is_ours(live: Mapping[str, Any], uid: str, *, recorded: Collection[str] = ()) -> bool:
    """Whether a live object was created for the deployment with this uid (per-deployment: a
    controller reference) or by the operator for its engine key (its uid is in `recorded`)."""
    meta = live.get("metadata") or {}
    if (meta.get("labels") or {}).get(c.LABEL_MANAGED_BY) != c.APP_NAME:
        return False
    if meta.get("uid") and meta.get("uid") in recorded:
        return True
    return controlled_by(live, uid)


def shared_controller(live: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(name, uid) of the TritonLLMDeployment that controls an object of a content key shared
    in its namespace (the repository Job), when the object carries our label. The caller
    trusts it only if the watch shows a deployment of that name with that uid: the object was
    then created for a deployment of the namespace (the same proof as a per-deployment
    object's controller reference)."""
    meta = (live or {}).get("metadata") or {}
    if (meta.get("labels") or {}).get(c.LABEL_MANAGED_BY) != c.APP_NAME:
        return None
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") is True and ref.get("kind") == c.KIND and ref.get("uid"):
            return str(ref.get("name", "")), str(ref["uid"])
    return None


def pod_workloads(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The workloads (kind, name) that may have made a pod, read from its controller reference
    by the names their controllers give: a Deployment's ReplicaSet is `<workload>-<its
    pod-template-hash>`, a LeaderWorkerSet's StatefulSets are `<workload>` (the leaders) and
    `<workload>-<group>` (a group's workers). [] for a pod no such controller made. Whether one
    is a deployment's own is checked against the watch (`shared_controller`): a pod that only
    carries our labels names no workload of ours."""
    meta = pod.get("metadata") or {}
    ref: Mapping[str, Any] = next(
        (r for r in meta.get("ownerReferences") or [] if r.get("controller") is True), {})
    name = str(ref.get("name") or "")
    if not name or not str(ref.get("apiVersion", "")).startswith("apps/"):
        return []
    if ref.get("kind") == "ReplicaSet":
        suffix = "-" + str((meta.get("labels") or {}).get("pod-template-hash") or "")
        ok = len(suffix) > 1 and name.endswith(suffix)
        return [(DEPLOYMENT, name[: -len(suffix)])] if ok else []
    if ref.get("kind") == "StatefulSet":
        head, _, group = name.rpartition("-")
        groups = [(LEADER_WORKER_SET, head)] if head and group.isdigit() else []
        return [(LEADER_WORKER_SET, name), *groups]
    return []


def recorded_uids(engine: Mapping[str, Any] | None) -> frozenset[str]:
    """The uids of the build objects the operator created, as its engine record says."""
    st = TritonLLMEngineStatus.model_validate((engine or {}).get("status") or {})
    return frozenset(u for u in (st.buildJobUid, st.buildPlanUid) if u)


def trusted_build_uids(
    body: Mapping[str, Any], obs: Observed
) -> tuple[frozenset[str], list[str] | None]:
    """The build objects' uids the operator recorded: as the engine record says, and as the
    deployment's status copied them (`buildObjectUids`: the record can be deleted while its
    build runs). Second: the copy to write, when the record holds uids the copy lacks."""
    from_record = recorded_uids(obs.engine)
    copied = frozenset((body.get("status") or {}).get("buildObjectUids") or [])
    fresh = sorted(from_record) if from_record and from_record != copied else None
    return from_record | copied, fresh


def recorded_uid_fields(mpi_adopted: str | None, build_uids: list[str] | None) -> dict[str, Any]:
    """The deployment status fields that record uids of objects the operator created."""
    out: dict[str, Any] = {}
    if mpi_adopted:
        out["mpiSecretUid"] = mpi_adopted
    if build_uids:
        out["buildObjectUids"] = build_uids
    return out


def owner_uids(live: Mapping[str, Any] | None) -> set[str]:
    return {r.get("uid", "") for r in ((live or {}).get("metadata") or {}).get("ownerReferences")
            or []}


def mpi_secret_check(
    body: Mapping[str, Any], obs: Observed, uid: str
) -> tuple[str | None, str | None]:
    """The MPI key Secret: (a conflict message, a uid to record). Ours is the one whose uid the
    deployment's status records (`mpiSecretUid`, written when the operator created it). A
    deployment reconciled by an older operator, which recorded none, adopts the Secret it
    controls once its LeaderWorkerSet (created only after that Secret) exists and is ours; a
    Secret found before the operator created one (a first pass) is never adopted."""
    live = obs.mpi_secret
    if live is None:
        return None, None
    name = (live.get("metadata") or {}).get("name", "")
    recorded = ((body.get("status") or {}).get("mpiSecretUid")) or None
    live_uid = (live.get("metadata") or {}).get("uid")
    if recorded:
        if live_uid == recorded and is_ours(live, uid, recorded={recorded}):
            return None, None
        return conflict_message("Secret", name, live), None
    legacy = obs.workload is not None and is_ours(obs.workload, uid)
    if legacy and is_ours(live, uid) and live_uid:
        return None, str(live_uid)
    return conflict_message("Secret", name, live), None


def conflict_message(kind: str, name: str, live: Mapping[str, Any] | None = None) -> str:
    """Which object is in the way, whose it looks like, and the fix."""
    meta = (live or {}).get("metadata") or {}
    owners = ", ".join(
        f"{r.get('kind', '?')}/{r.get('name', '?')}" for r in meta.get("ownerReferences") or []
        if r.get("name")
    )
    by = (meta.get("labels") or {}).get(c.LABEL_MANAGED_BY)
    whose = f" (owned by {owners})" if owners else (f" (managed by {by})" if by else "")
    return (
        f"{kind}/{name} already exists and was not created by this TritonLLMDeployment{whose}; "
        "the operator neither adopts nor changes it: rename the deployment, or delete or "
        f"rename that {kind}"
    )


def conflicts(
    p: Decision, obs: Observed, uid: str, *, build_objects: Iterable[ObjectRef] = ()
) -> list[str]:
    """Messages for every object the deployment needs that is not its own: what the planner
    would apply, delete or read. `build_objects` (the build Job and plan) are checked only
    while the engine is not Ready (a Ready engine's Job is never read again)."""
    recorded = recorded_uids(obs.engine) | p.recorded
    ready = TritonLLMEngineStatus.model_validate(
        (obs.engine or {}).get("status") or {}).state == "Ready"
    skip = set() if not ready else set(build_objects)
    seen: dict[ObjectRef, Mapping[str, Any]] = {
        k: v for k, v in obs.live.items() if k not in skip
    }
    repo_job = None if obs.repo_job_orphaned else obs.repo_job  # on its way out: not in the way
    for job in (obs.build_job, repo_job):
        if job is not None:
            meta = job["metadata"]
            ref = ObjectRef("batch/v1", "Job", meta.get("namespace"), meta["name"])
            if ref not in skip:
                seen[ref] = job
    for ref in [obj.ref for obj in p.apply] + p.delete:
        live = obs.live.get(ref)
        if live is not None:
            seen[ref] = live
    return [conflict_message(ref.kind, ref.name, live) for ref, live in seen.items()
            if not is_ours(live, uid, recorded=recorded)]
