"""The only code that talks to the Kubernetes API server.

An asyncio client over aiohttp (the HTTP stack kopf already runs on): it sends the objects
tritonllm.render built (Manifests); every write is a server-side apply with field manager
``tritonllm`` (or a finalizer/scale merge patch), and every call is counted in Prometheus metrics
by verb and kind, so "a reconcile of an unchanged object writes nothing" is measurable. Not the
`kubernetes` package: it is not needed, and loading it alone costs the process about 45 MiB.

A request the API server answers with 429 Too Many Requests (API Priority and Fairness, a
max-in-flight limit) was not carried out: it is sent again after the answer's Retry-After seconds
(bounded by RETRY_AFTER_MAX_SECONDS; RETRY_AFTER_DEFAULT_SECONDS when the header is missing or
unreadable), at most MAX_THROTTLED_RETRIES times; then the 429 is the call's error and the
reconcile backs off. Each retry is counted in tritonllm_api_throttled_total and logged. The slot
is given back while it waits, so a throttled request holds no connection. A client made with
`throttled_retries=0` answers a 429 at once with the error: the Lease's (tritonllm.k8s.lease),
whose calls must end within the renew deadline and whose own loop tries again.

At most `concurrency` requests are in flight (the operator's client concurrency). When requests
wait for a slot, the ones that make the cluster converge (children applied, deleted, scaled) go
before the ones that report on it (status writes, Events): under a burst, workloads start as
soon as the API server allows, and the bookkeeping follows, but a report that has waited
REPORT_PATIENCE_SECONDS goes next (a burst of a thousand new deployments no longer leaves the
first ones without a status for a minute).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import email.utils
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

import aiohttp
from prometheus_client import Counter

from tritonllm.api import constants as c

from .auth import Credentials, load_credentials
from .jsonlist import list_items

log = logging.getLogger(__name__)

API_CALLS = Counter(
    "tritonllm_api_calls_total", "Kubernetes API calls made by the operator", ["verb", "kind"]
)
API_THROTTLED = Counter(
    "tritonllm_api_throttled_total",
    "Requests the API server answered with 429 Too Many Requests (each is sent again after its "
    "Retry-After)",
    ["verb", "kind"],
)
# 429 Too Many Requests: wait what Retry-After says, within these bounds, this many times at most.
RETRY_AFTER_DEFAULT_SECONDS = 1.0  # no usable Retry-After header
RETRY_AFTER_MAX_SECONDS = 30.0  # a longer Retry-After is cut to this
MAX_THROTTLED_RETRIES = 5  # then the 429 is the call's KubeError (the reconcile backs off)
WRITE_VERBS = frozenset({"create", "apply", "patch", "delete", "event"})
DEFAULT_CONCURRENCY = 16
CONVERGE, REPORT = 0, 1  # request priorities: lower goes first
# A status write or Event waits behind converging writes at most this long (then goes next): in a
# burst of a thousand new deployments, each one's status still says within seconds that it was
# seen, and one that became Ready says so.
REPORT_PATIENCE_SECONDS = 2.0
PEERING_API_VERSION = "kopf.dev/v1"  # kopf's peering objects (tritonllm.k8s.peering)
LEASE_API_VERSION = "coordination.k8s.io/v1"  # leader election (tritonllm.k8s.lease)
# Metadata only (tritonllm.k8s.names): the API server sends no spec, data or status.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


class Slots:
    """A semaphore whose waiters are served by priority, then in arrival order; with `patience`,
    a waiter of a lower priority that has waited that long goes before the higher ones (a status
    write is never starved by a burst of converging writes)."""

    def __init__(self, n: int, *, patience: float | None = None) -> None:
        self._free = n
        self._patience = patience
        self._queues: dict[int, collections.deque[tuple[float, asyncio.Future[None]]]] = {}

    async def acquire(self, priority: int) -> None:
        if self._free > 0 and not any(self._queues.values()):
            self._free -= 1
            return
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()
        self._queues.setdefault(priority, collections.deque()).append((loop.time(), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # granted, but its task was cancelled before it could use it
            raise

    def release(self) -> None:
        while True:
            queue = self._next()
            if queue is None:
                self._free += 1
                return
            _, granted = queue.popleft()
            if not granted.done():
                granted.set_result(None)  # the slot passes on directly
                return

    def _next(self) -> collections.deque[tuple[float, asyncio.Future[None]]] | None:
        waiting = [(prio, q) for prio, q in sorted(self._queues.items()) if q]
        if not waiting:
            return None
        if self._patience is not None:
            now = asyncio.get_running_loop().time()
            for _, queue in waiting[1:]:
                if now - queue[0][0] >= self._patience:
                    return queue
        return waiting[0][1]


@dataclasses.dataclass(frozen=True)
class Resource:
    plural: str
    namespaced: bool = True


# Kinds the operator writes (and pods, which it lists): (apiVersion, kind) -> REST resource.
RESOURCES: dict[tuple[str, str], Resource] = {
    ("v1", "ConfigMap"): Resource("configmaps"),
    ("v1", "Secret"): Resource("secrets"),
    ("v1", "Service"): Resource("services"),
    ("v1", "Pod"): Resource("pods"),
    ("v1", "PersistentVolumeClaim"): Resource("persistentvolumeclaims"),
    ("v1", "Event"): Resource("events"),
    ("batch/v1", "Job"): Resource("jobs"),
    ("apps/v1", "Deployment"): Resource("deployments"),
    # read by name only: the controller of a verification pod (tritonllm.handlers.smoke)
    ("apps/v1", "ReplicaSet"): Resource("replicasets"),
    ("apps/v1", "StatefulSet"): Resource("statefulsets"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): Resource("leaderworkersets"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): Resource("horizontalpodautoscalers"),
    ("policy/v1", "PodDisruptionBudget"): Resource("poddisruptionbudgets"),
    ("keda.sh/v1alpha1", "ScaledObject"): Resource("scaledobjects"),
    ("monitoring.coreos.com/v1", "PodMonitor"): Resource("podmonitors"),
    ("networking.k8s.io/v1", "NetworkPolicy"): Resource("networkpolicies"),
    (c.API_VERSION, c.KIND): Resource(c.PLURAL),
    (c.API_VERSION, c.ENGINE_KIND): Resource(c.ENGINE_PLURAL),
    (PEERING_API_VERSION, "KopfPeering"): Resource("kopfpeerings"),
    (LEASE_API_VERSION, "Lease"): Resource("leases"),
    (PEERING_API_VERSION, "ClusterKopfPeering"): Resource("clusterkopfpeerings", namespaced=False),
}


class Sendable(Protocol):
    """What the client writes: a rendered object (tritonllm.render.Manifest) or one alike."""

    @property
    def api_version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def body(self) -> dict[str, Any]: ...


class KubeError(RuntimeError):
    """An API call failed (the caller decides whether 404 or 409 is one)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def _error(status: int, reason: str, text: str) -> KubeError:
    """A KubeError from an error response (a metav1.Status, when the server sends one)."""
    try:
        body = json.loads(text)
        return KubeError(status, str(body.get("reason", reason)), str(body.get("message", text)))
    except (ValueError, AttributeError):
        return KubeError(status, reason, text)


def retry_after_seconds(value: str | None, *, now: dt.datetime | None = None) -> float:
    """How long to wait before sending a throttled request again: Retry-After in seconds (what
    the API server sends) or as an HTTP date, bounded to [0, RETRY_AFTER_MAX_SECONDS]."""
    if value is None or not value.strip():
        return RETRY_AFTER_DEFAULT_SECONDS
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return RETRY_AFTER_DEFAULT_SECONDS
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    if seconds != seconds:  # NaN
        return RETRY_AFTER_DEFAULT_SECONDS
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_SECONDS)


def path_for(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    res = RESOURCES[(api_version, kind)]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if res.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{res.plural}"
    return f"{base}/{name}" if name else base


class Kube:
    """An async client of one API server, for one event loop."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        field_manager: str = c.FIELD_MANAGER,
        concurrency: int = DEFAULT_CONCURRENCY,
        timeout: float = 60.0,
        throttled_retries: int = MAX_THROTTLED_RETRIES,
    ) -> None:
        self.credentials = credentials
        self.field_manager = field_manager
        self.concurrency = concurrency
        self.timeout = timeout
        self.throttled_retries = throttled_retries  # 429s sent again, each after its Retry-After
        self._session: aiohttp.ClientSession | None = None
        self._slots: Slots | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, **kwargs: Any) -> Kube:
        """--kubeconfig/KUBECONFIG/~/.kube/config when present, else the pod's service account."""
        return cls(load_credentials(kubeconfig), **kwargs)

    def _open(self) -> tuple[aiohttp.ClientSession, Slots]:
        if self._session is None or self._slots is None:
            connector = aiohttp.TCPConnector(limit=self.concurrency, ssl=self.credentials.ssl)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout)
            )
            self._slots = Slots(self.concurrency, patience=REPORT_PATIENCE_SECONDS)
        return self._session, self._slots

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(
        self,
        verb: str,
        kind: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Any:
        API_CALLS.labels(verb, kind).inc()
        session, slots = self._open()
        headers = {**self._headers(accept), "Content-Type": content_type}
        data = None if body is None else json.dumps(body)
        reporting = verb == "event" or kind.endswith("/status")
        retries = 0
        while True:
            await slots.acquire(REPORT if reporting else CONVERGE)
            try:
                async with session.request(
                    method, self.credentials.server + path, params=query or [], data=data,
                    headers=headers,
                ) as resp:
                    text = await resp.text()
                    throttled = resp.status == 429 and retries < self.throttled_retries
                    if resp.status >= 400 and not throttled:
                        raise _error(resp.status, resp.reason or "", text)
                    if not throttled:
                        return json.loads(text) if text else None
                    delay = retry_after_seconds(resp.headers.get("Retry-After"))
            finally:
                slots.release()
            retries += 1
            API_THROTTLED.labels(verb, kind).inc()
            log.warning(
                "API server throttled %s %s (429 Too Many Requests): sending it again in %.1f s "
                "(retry %d of %d)", verb, kind, delay, retries, self.throttled_retries,
            )
            await asyncio.sleep(delay)

    # --- reads (the rest comes from the watches: tritonllm.handlers.cache) -------------------

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        *,
        labels: Mapping[str, str],
        fields: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """The objects of a kind in a namespace with these labels (and field values)."""
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items()))]
        if fields:
            query.append(("fieldSelector", ",".join(f"{k}={v}" for k, v in fields.items())))
        out = await self._call(
            "list",
            kind,
            "GET",
            path_for(api_version, kind, namespace),
            query=query,
        )
        items: list[dict[str, Any]] = out.get("items", [])
        return items

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """One object, or None when it does not exist (only before creating an object the
        watches do not show: is the name free?)."""
        try:
            out: dict[str, Any] = await self._call(
                "get", kind, "GET", path_for(api_version, kind, namespace, name)
            )
            return out
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def _headers(self, accept: str) -> dict[str, str]:
        """Accept, and the credentials' Authorization where they have one."""
        headers = {"Accept": accept}
        auth = self.credentials.authorization()
        if auth:
            headers["Authorization"] = auth
        return headers

    async def list_metadata(
        self, api_version: str, kind: str, namespace: str | None,
        each: Callable[[dict[str, Any]], Any] = dict,
    ) -> tuple[Sequence[Any], str]:
        """Every object of a kind (in a namespace, or everywhere), metadata only
        (PartialObjectMetadataList), as `each` makes it, and the list's resourceVersion to watch
        from. The answer is parsed an object at a time as it arrives (tritonllm.k8s.jsonlist),
        never held whole: it holds what anyone put in the objects."""
        API_CALLS.labels("list", kind).inc()
        session, slots = self._open()
        headers = self._headers(METADATA_LIST)
        url = self.credentials.server + path_for(api_version, kind, namespace)
        await slots.acquire(CONVERGE)
        try:
            async with session.get(url, headers=headers) as resp:
                if resp.status >= 400:
                    raise _error(resp.status, resp.reason or "", await resp.text())
                items, meta = await list_items(resp.content.read, each)
        finally:
            slots.release()
        return items, str(meta.get("resourceVersion") or "")

    async def watch_metadata(
        self, api_version: str, kind: str, namespace: str | None, resource_version: str,
        *, timeout_seconds: int = 300,
    ) -> AsyncIterator[dict[str, Any]]:
        """The watch events of a kind from `resource_version`, metadata only, until the server
        ends the stream (after `timeout_seconds`). A long-lived request: it holds no client slot.
        An ERROR event (e.g. 410 Gone: the version is too old) is yielded like the others."""
        API_CALLS.labels("watch", kind).inc()
        session, _ = self._open()
        headers = self._headers(METADATA)
        query = [("watch", "1"), ("resourceVersion", resource_version),
                 ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
        url = self.credentials.server + path_for(api_version, kind, namespace)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30)
        async with session.get(url, params=query, headers=headers, timeout=timeout) as resp:
            if resp.status >= 400:
                raise _error(resp.status, resp.reason or "", await resp.text())
            # One JSON object per line, of any length (a client-side-applied object's
            # last-applied annotation can exceed aiohttp's line limit).
            pending = b""
            async for chunk in resp.content.iter_any():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
            if pending.strip():
                yield json.loads(pending)

    # --- writes ----------------------------------------------------------------------------

    async def apply(self, obj: Sendable) -> dict[str, Any]:
        """Server-side apply (force: the operator owns the fields it sets)."""
        path = path_for(obj.api_version, obj.kind, obj.namespace, obj.name)
        out: dict[str, Any] = await self._call(
            "apply",
            obj.kind,
            "PATCH",
            path,
            body=obj.body,
            query=[("fieldManager", self.field_manager), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )
        return out

    async def create(self, obj: Sendable) -> dict[str, Any] | None:
        """Create; the object as created, or None when the name is taken (for objects that must
        not be re-applied, or adopted)."""
        path = path_for(obj.api_version, obj.kind, obj.namespace)
        return await self._unless_conflict("create", "POST", path, obj)

    async def replace(self, obj: Sendable) -> dict[str, Any] | None:
        """Replace (PUT) an object whose body carries the resourceVersion it was read at; None
        when it changed since (409 Conflict: someone else wrote it first)."""
        path = path_for(obj.api_version, obj.kind, obj.namespace, obj.name)
        return await self._unless_conflict("replace", "PUT", path, obj)

    async def _unless_conflict(
        self, verb: str, method: str, path: str, obj: Sendable
    ) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = await self._call(
                verb, obj.kind, method, path, body=obj.body,
                query=[("fieldManager", self.field_manager)],
            )
            return out
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise

    async def add_owner(
        self, api_version: str, kind: str, namespace: str, name: str, ref: Mapping[str, Any]
    ) -> None:
        """Add one owner reference (a strategic merge by uid: the others stay, a second add of
        the same is a no-op). Built-in kinds only (custom resources take no strategic merge)."""
        await self._call(
            "patch",
            kind,
            "PATCH",
            path_for(api_version, kind, namespace, name),
            body={"metadata": {"ownerReferences": [dict(ref)]}},
            query=[("fieldManager", self.field_manager)],
            content_type="application/strategic-merge-patch+json",
        )

    async def apply_status(self, obj: Sendable) -> dict[str, Any]:
        """Server-side apply of the status subresource."""
        path = path_for(obj.api_version, obj.kind, obj.namespace, obj.name)
        out: dict[str, Any] = await self._call(
            "apply",
            obj.kind + "/status",
            "PATCH",
            path + "/status",
            body=obj.body,
            query=[("fieldManager", self.field_manager), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )
        return out

    async def set_finalizers(self, obj: Mapping[str, Any], finalizers: Sequence[str]) -> None:
        """Replace metadata.finalizers, guarded by resourceVersion (a concurrent change makes the
        patch fail with 409 and the next reconcile computes the list again)."""
        meta = obj["metadata"]
        await self._call(
            "patch",
            obj["kind"],
            "PATCH",
            path_for(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]),
            body={
                "metadata": {
                    "finalizers": finalizers or None,
                    "resourceVersion": meta["resourceVersion"],
                }
            },
            content_type="application/merge-patch+json",
        )

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, body: Any
    ) -> None:
        """A JSON merge patch (RFC 7386: a null removes the key) of a whole object."""
        await self._call(
            "patch", kind, "PATCH", path_for(api_version, kind, namespace, name), body=body,
            content_type="application/merge-patch+json",
        )

    async def scale(
        self, api_version: str, kind: str, namespace: str, name: str, replicas: int
    ) -> None:
        await self._call(
            "patch",
            kind + "/scale",
            "PATCH",
            path_for(api_version, kind, namespace, name) + "/scale",
            body={"spec": {"replicas": replicas}},
            query=[("fieldManager", self.field_manager)],
            content_type="application/merge-patch+json",
        )

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
        uid: str | None = None,
    ) -> bool:
        """Delete; False when it was already gone. With `uid`, only that very object (one
        recreated under the name since it was seen is left alone: 409)."""
        body: dict[str, Any] = {"propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._call(
                "delete",
                kind,
                "DELETE",
                path_for(api_version, kind, namespace, name),
                body=body,
            )
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    async def post_event(self, event: Sendable) -> None:
        """Create a core/v1 Event (best effort: events never fail a reconcile)."""
        try:
            await self._call(
                "event", "Event", "POST", path_for("v1", "Event", event.namespace), body=event.body
            )
        except KubeError as exc:
            log.warning("could not post event %s: %s", event.body.get("reason"), exc)
