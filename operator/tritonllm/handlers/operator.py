"""kopf glue: what kopf watches and indexes, and which watch events lead to which reconcile.

We use kopf's raw event handlers and one daemon (the schedule) rather than its create/update
handlers: those keep per-object progress in annotations (writes on every change) while our
reconcile is level-based and idempotent. kopf's `on.delete` is not used either: it would put a
finalizer on every object (its `when=` filters are not consulted for finalizers). Our reconciler
adds its finalizer only when storage.engineRetention is Delete and releases it in the pass that
sees the deletion.

Every read of a reconcile is served from kopf indexes (tritonllm.handlers.cache), registered here
by `configure` (which knows the settings) before kopf starts; the startup handler hands them to
the reconciler, with the indexes of the children kopf does not watch (served by the
metadata-only index of taken names, tritonllm.k8s.names).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from tritonllm.api import constants as c
from tritonllm.api.settings import OperatorSettings
from tritonllm.k8s.client import Kube
from tritonllm.k8s.names import TakenNames

from .cache import (
    Cache,
    IndexSpec,
    index_specs,
    keep_name,
    kopf_specs,
    managed_resources,
    metadata_indices,
)
from .metrics import ACTING
from .reconciler import Reconciler

log = logging.getLogger("tritonllm.operator")

_state: dict[str, Any] = {}
MANAGED = {c.LABEL_MANAGED_BY: c.APP_NAME}
MANAGED_SELECTOR = f"{c.LABEL_MANAGED_BY}={c.APP_NAME}"
SERVING_PODS_SELECTOR = (
    f"{MANAGED_SELECTOR},{c.LABEL_COMPONENT} in "
    f"({c.COMPONENT_SERVER},{c.COMPONENT_WORKER},{c.COMPONENT_VERIFY},"
    f"{c.COMPONENT_BUILD},{c.COMPONENT_REPOSITORY})"
)
# kopf's per-object workers, per watched kind, and how long an idle one lingers (short: see
# `startup`).
WORKERS_PER_KIND = 64
WORKER_IDLE_SECONDS = 0.05
# asyncio gives every TLS connection a zero-filled read buffer of 256 KiB (SSLProtocol.max_size),
# resident for the connection's life: kopf keeps a connection per watch and our client one per
# slot (33 connections measured converging N=1000: about 8 MiB; up to 16 MiB when a burst opens
# more). A TLS record is at most 16 KiB, so 32 KiB reads lose nothing but a few more loop
# iterations on a large list. Measured at N=1000: peak RSS 163-166 -> 153-155 MiB.
TLS_READ_BUFFER = 32 * 1024
asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class NoDiffBase(kopf.DiffBaseStorage):
    """No "last handled" state. kopf builds each watched object's essence on every watch event
    (a deep copy of its whole body, twice) to diff it for change handlers and idle daemons. We
    register neither (tests/unit/test_handlers.py checks), so nothing reads the diff: the essence
    is empty and nothing is stored. In a burst this was a tenth of the operator's CPU."""

    def build(
        self, *, body: kopf.Body, extra_fields: Any = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


def configure(settings: OperatorSettings, kubeconfig: str | None) -> None:
    """Called by `tritonllm run` before kopf starts."""
    _state["settings"] = settings
    _state["kubeconfig"] = kubeconfig
    _state["indexes"] = specs = index_specs(gpu_nodes=settings.check_gpu_nodes)
    for spec in kopf_specs(specs):
        group, version, plural = spec.resource
        resource = (group, version, plural) if group else (version, plural)
        kopf.index(*resource, id=spec.id, labels=MANAGED if spec.managed else None)(
            _indexer(spec)
        )


def filter_server_side(settings: kopf.OperatorSettings, specs: list[IndexSpec]) -> None:
    """The list and watch requests of the kinds we create carry our label selector: the API
    server sends only our objects (kopf's `labels=` filters alone run after each object arrived
    and was parsed). Pods: only our serving pods (leaders, workers, verification pods) and the
    pods of our build and repository Jobs (why one does not start)."""
    for resource in managed_resources(kopf_specs(specs)):
        settings.watching.label_selectors[resource] = MANAGED_SELECTOR
    settings.watching.label_selectors[("", "v1", "pods")] = SERVING_PODS_SELECTOR


def _indexer(spec: IndexSpec) -> Any:
    # async: kopf runs sync handlers in a thread pool, a thread hop per watch event.
    async def index(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return spec.keyed(body)

    return index


def reconciler() -> Reconciler:
    if "reconciler" not in _state:
        settings: OperatorSettings = _state.get("settings") or OperatorSettings.from_env()
        kube = Kube.from_kubeconfig(
            _state.get("kubeconfig"),
            concurrency=settings.api_concurrency,
            timeout=settings.api_timeout_seconds,
        )
        names = TakenNames(kube, settings.namespaces, keep=keep_name)
        indices = {**(_state.get("indices") or {}),
                   **metadata_indices(_state.get("indexes", []), names)}
        cache = Cache(indices, names)
        _state["reconciler"] = Reconciler(kube, settings, cache)
    r: Reconciler = _state["reconciler"]
    return r


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    ours: OperatorSettings = _state.get("settings") or OperatorSettings.from_env()
    # Our own Events carry the reasons; kopf's log-to-event posting would duplicate them.
    settings.posting.enabled = False
    # A burst (a thousand objects applied at once) is handled by a bounded number of kopf
    # workers per kind (kopf still reads every event of the stream into its per-object queues:
    # the limit bounds concurrency, not memory). Our handlers only note the event and return,
    # so a worker is done in microseconds: one that lingers idle holds a place the next
    # object's worker waits for (at 1 s, the last of 1,000 new objects waits ~1000/64 s).
    settings.queueing.worker_limit = WORKERS_PER_KIND
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = ours.api_timeout_seconds
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    filter_server_side(settings, _state.get("indexes", []))
    # kopf hands every index to every handler, by id; they fill before any event is handled.
    _state["indices"] = {
        spec.id: kwargs[spec.id] for spec in _state.get("indexes", []) if spec.id in kwargs
    }
    names = reconciler().cache.names
    if names is not None:  # followed from start to cleanup, standby or acting
        _state["names"] = asyncio.create_task(names.run(), name="taken names")


def when_stopped(fn: Callable[[], Awaitable[None]]) -> None:
    """Call `fn` once this replica has stopped acting (the Lease's release: the standby takes
    over while kopf still closes its watches, a few seconds)."""
    _state["when_stopped"] = fn


def lost() -> None:
    """The Lease is lost (tritonllm.k8s.lease): stop acting at once, not when kopf's shutdown
    reaches `cleanup` (seconds later, past the standby's takeover): no new pass, and the passes
    in flight cancelled."""
    reconciler().stop(cancel=True)


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    names = _state.pop("names", None)
    if names is not None:
        names.cancel()
    r = _state.get("reconciler")
    try:
        if r is not None:
            r.stop()  # no new pass from here on, whatever the watches still deliver
            try:
                await asyncio.wait_for(r.wait_idle(), timeout=30)
            finally:
                await r.kube.close()
    finally:  # the Lease is released even when the last passes did not end in time
        stopped = _state.get("when_stopped")
        if stopped is not None:
            await stopped()


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def deployment_event(
    event: dict[str, Any], body: kopf.Body, namespace: str, name: str, **_: Any
) -> None:
    r = reconciler()
    if event.get("type") == "DELETED":
        r.forget(namespace, name)
        return
    if r.cache.echoes(body):
        return  # the status the last reconcile wrote, and nothing else
    r.request(namespace, name)


def _schedule_anchor(name: str, **_: Any) -> bool:
    """The Namespace whose daemon runs the schedule: one that exists while we run (the first
    watched namespace, else `default`)."""
    settings: OperatorSettings = _state.get("settings") or OperatorSettings.from_env()
    return name == (settings.namespaces[0] if settings.namespaces else "default")


@kopf.daemon("v1", "namespaces", when=_schedule_anchor, cancellation_timeout=1.0)
async def resync(stopped: kopf.DaemonStopped, **_: Any) -> None:
    """The schedule of every deployment (tritonllm.handlers.schedule): the next reconcile at the
    time the last one asked for (Decision.requeue_after), else every resync period as a level-based
    safety net. A kopf daemon, so that it runs only while this replica acts: kopf stops it when
    peering pauses the replica and starts it again (re-listing) when the replica resumes. Its
    life is therefore the replica's acting state (`tritonllm_operator_acting`, /healthz)."""
    _set_acting(True)
    try:
        await reconciler().schedule.run(stopped)
    finally:
        _set_acting(False)


def _set_acting(acting: bool) -> None:
    _state["acting"] = acting
    ACTING.set(1 if acting else 0)


@kopf.on.probe(id="state")
async def acting_or_paused(**_: Any) -> str:
    """/healthz answers 200 either way (a paused replica is healthy: it takes over when the
    acting one goes) and says which: {"state": "acting"} or {"state": "paused"}."""
    return "acting" if _state.get("acting") else "paused"


def _without_finalizer(fn: Any) -> None:
    """kopf marks every daemon as needing a finalizer (to stop it before the object goes). Ours
    only schedules reconciles, so it needs none: a finalizer here would put ours on a
    Namespace and make its deletion wait for a running operator.
    tests/unit/test_handlers.py checks this against the installed kopf."""
    registry = kopf.get_default_registry()._spawning
    registry._handlers = [
        dataclasses.replace(h, requires_finalizer=False) if h.fn is fn else h
        for h in registry._handlers
    ]


_without_finalizer(resync)


def _owner_instances(body: dict[str, Any], namespace: str) -> set[str]:
    """The deployments that own a child by owner reference and exist: an object labelled as ours
    with thousands of such references (anyone may plant one) costs a look-up each, not a pass
    each."""
    cache = reconciler().cache
    return {
        ref["name"]
        for ref in body["metadata"].get("ownerReferences") or []
        if ref.get("kind") == c.KIND and isinstance(ref.get("name"), str)
        and cache.exists(c.KIND, namespace, ref["name"])
    }


@kopf.on.event("batch", "v1", "jobs", labels=MANAGED)
async def job_event(event: dict[str, Any], body: kopf.Body, namespace: str, **_: Any) -> None:
    """A build Job is shared by every deployment with its engine key, a repository Job by every
    deployment of its namespace that renders its repository key."""
    if not reconciler().cache.changed("Job", body, deleted=event.get("type") == "DELETED"):
        return  # nothing the planner reads changed (e.g. only the count of active pods)
    labels = body["metadata"].get("labels") or {}
    names = _owner_instances(body, namespace)
    if labels.get(c.LABEL_ENGINE_KEY) and labels.get(c.LABEL_COMPONENT) == c.COMPONENT_BUILD:
        names |= set(reconciler().cache.deployments_using(namespace, labels[c.LABEL_ENGINE_KEY]))
    if labels.get(c.LABEL_REPO_KEY) and labels.get(c.LABEL_COMPONENT) == c.COMPONENT_REPOSITORY:
        names |= set(reconciler().cache.repository_users(namespace, labels[c.LABEL_REPO_KEY]))
    for n in names:
        reconciler().request(namespace, n)


@kopf.on.event("v1", "pods", labels=MANAGED)
async def pod_event(event: dict[str, Any], body: kopf.Body, **_: Any) -> None:
    """Serving and verification pods, for three things only: a container that exits with an
    error (its termination message goes into the deployment's conditions), the scheduler's
    verdict on a pod it cannot place, and the timestamps of a revision's first pod (its phases);
    and the pods of build and repository Jobs, for why one does not start. Nothing else of a pod
    is kept."""
    if event.get("type") == "DELETED":
        reconciler().pod_gone(dict(body))
    else:
        reconciler().pod_changed(dict(body))


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
async def workload_event(event: dict[str, Any], body: kopf.Body, namespace: str, **_: Any) -> None:
    _workload_event("Deployment", event, body, namespace)


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=MANAGED)
async def lws_event(event: dict[str, Any], body: kopf.Body, namespace: str, **_: Any) -> None:
    _workload_event("LeaderWorkerSet", event, body, namespace)


def _workload_event(kind: str, event: dict[str, Any], body: kopf.Body, namespace: str) -> None:
    if not reconciler().cache.changed(kind, body, deleted=event.get("type") == "DELETED"):
        return  # e.g. only a condition's timestamp moved
    for n in _owner_instances(body, namespace):
        reconciler().request(namespace, n)
