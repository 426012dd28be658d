"""Carry out a Decision: the writes, in a fixed order, then the status and the Events.

Order: finalizers, the MPI SSH Secret, the ConfigMaps to apply, the content key's shared objects
(the repository Job, which mounts its plan ConfigMap: created early, its pod is what the first
workload of every deployment of that content waits for), the other applies (in apply order),
creates of the engine key's build objects (their uids go into the engine record's status), owner
references added to them, deletions, scale, the engine record's status, the deployment's status,
Events. Everything sent
is a Manifest from tritonllm.render; what the API server returns is remembered by the cache until
the watches deliver it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import InvalidDeployment, TritonLLMDeployment
from tritonllm.api.topology import DEPLOYMENT, LEADER_WORKER_SET
from tritonllm.k8s.client import Kube, KubeError
from tritonllm.plan import Decision, conflict_message, controlled_by, is_ours
from tritonllm.render import Manifest, naming
from tritonllm.render.events import event
from tritonllm.render.mpi import mpi_secret, ssh_key_pairs
from tritonllm.render.pod import owner_references
from tritonllm.render.status import status_object

from .cache import Cache
from .metrics import BUILDS, REPLICA_WRITES

Logger = logging.LoggerAdapter[Any]

# Kinds created under names others may already use: before creating one the watches do not show,
# the executor looks the name up (the name must be free or the object ours): in the index of
# taken names (tritonllm.k8s.names) when it knows the kind, else with a GET. Claims are the
# user's (never owned), engine records the operator's own kind.
CHECKED_KINDS = frozenset(
    {
        "ConfigMap",
        "Secret",
        "Service",
        "Job",
        "Deployment",
        "LeaderWorkerSet",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ScaledObject",
        "PodMonitor",
    }
)
# Longest server message quoted into a condition (a refused 1 MiB object echoes much of it).
MAX_QUOTED = 600


class NameConflict(Exception):
    """An object the deployment needs exists and is not its own."""


class WriteRefused(Exception):
    """The API server refused a write of one object."""

    def __init__(self, verb: str, kind: str, name: str, error: KubeError) -> None:
        super().__init__(f"{verb} {kind}/{name}: {error}")
        self.verb, self.kind, self.name, self.error = verb, kind, name, error


def failure(exc: BaseException) -> tuple[str, str]:
    """(Degraded reason, message naming the object and the fix) for what ended a reconcile."""
    if isinstance(exc, NameConflict):
        return r.NAME_CONFLICT, str(exc)
    if isinstance(exc, InvalidDeployment):
        return r.INVALID_SPEC, "; ".join(str(e) for e in exc.errors)
    if isinstance(exc, WriteRefused):
        what, err = f"{exc.kind}/{exc.name}", exc.error
    elif isinstance(exc, KubeError):
        what, err = "a request", exc
    else:
        return r.RENDER_FAILED, (
            f"{type(exc).__name__}: {str(exc)[:MAX_QUOTED]} (an operator error: please report it "
            "with the spec)"
        )
    msg = err.message if len(err.message) <= MAX_QUOTED else err.message[:MAX_QUOTED] + "..."
    if "admission webhook" in msg or "ValidatingAdmissionPolicy" in msg:
        return r.ADMISSION_REFUSED, (
            f"an admission webhook or policy refused {what}: {msg}; change the spec field it "
            "names, or ask the cluster's administrators"
        )
    if err.status == 403 and "exceeded quota" in msg:
        return r.QUOTA_EXCEEDED, (
            f"{what} exceeds a ResourceQuota of the namespace: {msg}; lower "
            "podTemplate.resources, serving.replicas or storage.create.size, or raise the quota"
        )
    if err.status == 403:
        return r.FORBIDDEN, (
            f"the operator may not write {what}: {msg}; grant it in the operator's Role or "
            "ClusterRole (charts/tritonllm, settings.namespaces)"
        )
    if err.status in (400, 422):
        return r.APPLY_REFUSED, (
            f"the API server refused {what}: {msg}; fix the spec field it names"
        )
    return r.API_ERROR, (
        f"{what} failed: {err.status} {err.reason}: {msg}; retried with a growing delay"
    )


async def execute(
    kube: Kube,
    cache: Cache,
    body: Mapping[str, Any],
    dep: TritonLLMDeployment | None,
    p: Decision,
    logger: Logger,
    *,
    engine_key: str | None = None,
    outbox: Outbox | None = None,
) -> None:
    """`outbox`: the deployment's status and the Events go there, for the caller to send once
    the pass has given its slot back (tritonllm.handlers.reconciler), instead of here."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    if p.finalizers is not None:
        await kube.set_finalizers(body, p.finalizers)
    if p.create_mpi_secret and dep is not None:
        await _mpi_secret(kube, cache, body, dep, p, logger)
    uid = dep.metadata.uid or "" if dep is not None else ""
    configmaps = [obj for obj in p.apply if obj.kind == "ConfigMap"]
    await _apply(kube, cache, configmaps, p, ns, uid, logger)
    await _create_shared(kube, cache, p, ns, uid, logger)
    await _apply(kube, cache, [obj for obj in p.apply if obj.kind != "ConfigMap"], p, ns, uid,
                 logger)
    await _create(kube, cache, p, ns, engine_key, logger)
    if p.add_owner and dep is not None:
        await _add_owner(kube, p, dep, logger)
    await _delete(kube, cache, p, ns, uid, logger)
    if p.scale and dep is not None:
        workload, replicas = p.scale
        try:
            await kube.scale(workload.api_version, workload.kind, ns, workload.name, replicas)
            REPLICA_WRITES.labels(workload.kind).inc()
        except KubeError as exc:
            raise WriteRefused("scale", workload.kind, workload.name, exc) from exc
        logger.info("scaled %s to %d", workload.kind, replicas)
    if p.engine_status is not None and engine_key is not None:
        obj = status_object(c.ENGINE_KIND, ns, engine_key, p.engine_status)
        cache.remember(await kube.apply_status(obj))
    if p.build_result:
        BUILDS.labels(p.build_result).inc()
    box = Outbox() if outbox is None else outbox
    if p.status is not None:
        box.status = status_object(c.KIND, ns, name, p.status)
    now = dt.datetime.now(dt.UTC)
    for type_, reason, message in p.events:
        box.events.append(event(body, type_=type_, reason=reason, message=message, now=now))
        logger.info("event %s %s: %s", type_, reason, message)
    if outbox is None:
        await box.send(kube, cache)


@dataclasses.dataclass
class Outbox:
    """What a pass reports, last: the deployment's status, then its Events (REPORT requests:
    they wait behind every write that converges, tritonllm.k8s.client)."""

    status: Manifest | None = None
    events: list[Manifest] = dataclasses.field(default_factory=list)

    async def send(self, kube: Kube, cache: Cache) -> None:
        """The status (a KubeError ends the pass: it is retried), then the Events (best
        effort: Kube.post_event)."""
        if self.status is not None:
            cache.remember(await kube.apply_status(self.status))
            self.status = None
        for note in self.events:
            await kube.post_event(note)
        self.events = []


async def _delete(kube: Kube, cache: Cache, p: Decision, ns: str, uid: str, logger: Logger) -> None:
    """What no longer belongs: ours only (a name someone else uses is a conflict), and the
    shared objects this deployment controls (`delete_own`)."""
    own = [(ref, True) for ref in p.delete] + [(ref, False) for ref in p.delete_own]
    for ref, must_be_ours in own:
        live = cache.get(ref.kind, ns, ref.name)
        if live is None:
            continue  # nothing of ours by that name (deleting by name could hit another's)
        if not must_be_ours and not controlled_by(live, uid):
            continue  # another deployment's shared object: left to it
        if not is_ours(live, uid, recorded=p.recorded):
            raise NameConflict(conflict_message(ref.kind, ref.name, live))
        try:
            if await kube.delete(ref.api_version, ref.kind, ns, ref.name,
                                 uid=live["metadata"].get("uid")):
                logger.info("deleted %s/%s", ref.kind, ref.name)
        except KubeError as exc:
            raise WriteRefused("delete", ref.kind, ref.name, exc) from exc


async def _apply(
    kube: Kube, cache: Cache, objs: list[Manifest], p: Decision, ns: str, uid: str,
    logger: Logger,
) -> None:
    for obj in objs:
        if obj.kind in CHECKED_KINDS:
            await _name_is_free(kube, cache, obj, uid, p.recorded)
        try:
            cache.remember(await kube.apply(obj))
            logger.info("applied %s/%s", obj.kind, obj.name)
            if _sets_serving_replicas(obj):
                REPLICA_WRITES.labels(obj.kind).inc()
        except KubeError as exc:
            if exc.status == 422 and obj.kind == "Job" and cache.get("Job", ns, obj.name):
                # A Job's pod template is immutable: replace it (it is keyed by content, so
                # this only happens after a tools-image or operator upgrade).
                await kube.delete("batch/v1", "Job", ns, obj.name)
                continue
            raise WriteRefused("apply", obj.kind, obj.name, exc) from exc


def _sets_serving_replicas(obj: Manifest) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return (obj.kind in (DEPLOYMENT, LEADER_WORKER_SET) and "replicas" in obj["spec"]
            and labels.get(c.LABEL_COMPONENT) == c.COMPONENT_SERVER)


async def _name_is_free(
    kube: Kube, cache: Cache, obj: Manifest, uid: str, recorded: frozenset[str]
) -> None:
    """The object to apply is ours or does not exist yet."""
    live = await _find(kube, cache, obj)
    if live is not None and not is_ours(live, uid, recorded=recorded):
        raise NameConflict(conflict_message(obj.kind, obj.name, live))


async def _find(kube: Kube, cache: Cache, obj: Manifest) -> dict[str, Any] | None:
    """The live object of `obj`'s name, or None. What the watches show costs no request; an
    object they do not show (not labelled as ours) is looked up in the index of taken names,
    or read once where the index does not know the kind yet."""
    live = cache.get(obj.kind, obj.namespace, obj.name)
    known = live is not None
    if not known and cache.names is not None:
        known, live = cache.names.lookup(obj.kind, obj.namespace or "", obj.name)
    try:
        if not known:
            live = await kube.get(obj.api_version, obj.kind, obj.namespace, obj.name)
    except KubeError as exc:
        raise WriteRefused("get", obj.kind, obj.name, exc) from exc
    return live


# Where the engine record's status keeps the uid of each build object the operator created.
RECORDED_AS = {"Job": "buildJobUid", "ConfigMap": "buildPlanUid"}


async def _create(
    kube: Kube, cache: Cache, p: Decision, ns: str, engine_key: str | None, logger: Logger
) -> None:
    """Create the engine key's build objects (POST: a name someone took first is refused, never
    adopted) and record their uids in the engine record's status at once (should a later write
    of this pass fail, an unrecorded object of ours would read as someone else's)."""
    created_any = False
    try:
        for obj in p.create:
            try:
                created = await kube.create(obj)
            except KubeError as exc:
                raise WriteRefused("create", obj.kind, obj.name, exc) from exc
            if created is None:
                live = cache.get(obj.kind, ns, obj.name) or await kube.get(
                    obj.api_version, obj.kind, ns, obj.name)
                if live is not None and live["metadata"].get("uid") in p.recorded:
                    continue  # ours (created by an earlier pass)
                raise NameConflict(conflict_message(obj.kind, obj.name, live))
            cache.remember(created)
            created_any = True
            logger.info("created %s/%s", obj.kind, obj.name)
            if p.engine_status is not None and obj.kind in RECORDED_AS:
                uid = created["metadata"]["uid"]
                p.engine_status = {**p.engine_status, RECORDED_AS[obj.kind]: uid}
    finally:
        if created_any and p.engine_status is not None and engine_key is not None:
            record = status_object(c.ENGINE_KIND, ns, engine_key, p.engine_status)
            cache.remember(await kube.apply_status(record))
            p.engine_status = None  # written


async def _create_shared(
    kube: Kube, cache: Cache, p: Decision, ns: str, uid: str, logger: Logger
) -> None:
    """Create the objects of a content key shared in the namespace (the repository Job). While
    one pass of this replica creates one, the others that need it wait for that request rather
    than send their own (N identical deployments applied at once: one POST). One that exists
    already (another replica or an earlier pass created it) is used if it is ours or another
    deployment's of the namespace; anything else is in the way."""
    for obj in p.create_shared:
        key = (obj.kind, ns, obj.name)
        pending = cache.creating.get(key)
        if pending is not None:
            await asyncio.shield(pending)
            continue
        live = cache.get(obj.kind, ns, obj.name)
        if live is not None:  # created since this pass looked (by another deployment's pass)
            _check_shared(cache, obj, live, uid)
            continue
        done = asyncio.get_running_loop().create_future()
        cache.creating[key] = done
        try:
            await _create_one_shared(kube, cache, obj, ns, uid, logger)
        finally:
            cache.creating.pop(key, None)
            done.set_result(None)


async def _create_one_shared(
    kube: Kube, cache: Cache, obj: Manifest, ns: str, uid: str, logger: Logger
) -> None:
    try:
        created = await kube.create(obj)
    except KubeError as exc:
        raise WriteRefused("create", obj.kind, obj.name, exc) from exc
    if created is not None:
        cache.remember(created)
        logger.info("created %s/%s", obj.kind, obj.name)
        return
    live = await _find(kube, cache, obj)
    if live is not None:
        _check_shared(cache, obj, live, uid)
    logger.info("%s/%s exists: created by another deployment of the namespace",
                obj.kind, obj.name)


def _check_shared(cache: Cache, obj: Manifest, live: Mapping[str, Any], uid: str) -> None:
    """A shared object found under the name is ours or another deployment's of the namespace
    (tritonllm.plan.ownership.shared_controller); anything else is in the way."""
    if not (is_ours(live, uid) or cache.deployment_controls(obj.namespace or "", live)):
        raise NameConflict(conflict_message(obj.kind, obj.name, live))


async def _add_owner(kube: Kube, p: Decision, dep: TritonLLMDeployment, logger: Logger) -> None:
    """This deployment's (non-controller) owner reference on the shared build objects."""
    ref = owner_references(dep, controller=False)[0]
    for shared in p.add_owner:
        try:
            await kube.add_owner(shared.api_version, shared.kind, dep.namespace, shared.name, ref)
        except KubeError as exc:
            if exc.status == 404:
                continue  # gone meanwhile: the next pass creates it
            raise WriteRefused("patch", shared.kind, shared.name, exc) from exc
        logger.info("%s/%s is also owned by this deployment", shared.kind, shared.name)


async def _mpi_secret(
    kube: Kube,
    cache: Cache,
    body: Mapping[str, Any],
    dep: TritonLLMDeployment,
    p: Decision,
    logger: Logger,
) -> None:
    """Create the MPI key Secret and record its uid in the status at once (should a later write
    of this pass fail, the Secret would otherwise read as someone else's) and in the status
    this pass writes: only the Secret with this uid is ever used."""
    created = await _create_mpi_secret(kube, dep, logger)
    ns, name = dep.namespace, dep.name
    recorded = {**(body.get("status") or {}), "mpiSecretUid": created}
    try:
        cache.remember(await kube.apply_status(status_object(c.KIND, ns, name, recorded)))
    except KubeError as exc:
        # Unrecorded, it would read as someone else's: remove it (that very one); the next
        # pass creates it again.
        secret = naming.mpi_secret_name(dep)
        try:
            await kube.delete("v1", "Secret", ns, secret, uid=created)
        except KubeError as err:
            logger.warning("could not remove unrecorded Secret/%s: %s", secret, err)
        raise WriteRefused("record", c.KIND, name, exc) from exc
    if p.status is not None:
        p.status = {**p.status, "mpiSecretUid": created}


async def _create_mpi_secret(kube: Kube, dep: TritonLLMDeployment, logger: Logger) -> str:
    """The per-deployment SSH keys of the multi-node MPI bootstrap (docs/in-pod.md); returns the
    new Secret's uid. A Secret of that name the operator did not just create is never trusted
    (its keys would let someone in): NameConflict."""
    name = naming.mpi_secret_name(dep)
    try:
        created = await kube.create(mpi_secret(dep, ssh_key_pairs(f"tritonllm-{dep.name}")))
        live = None if created else await kube.get("v1", "Secret", dep.namespace, name)
    except KubeError as exc:
        raise WriteRefused("create", "Secret", name, exc) from exc
    if created is None:
        raise NameConflict(conflict_message("Secret", name, live))
    logger.info("created Secret/%s (MPI SSH keys)", name)
    return str(created["metadata"]["uid"])
