"""The only code that talks to the Kubernetes API server.

A thin, typed layer over the `kubernetes` client's ApiClient: it sends the objects tritonllm.render
built (Manifests) and hands back what it reads as plain dicts; every write is a server-side apply
with field manager ``tritonllm`` (or a finalizer/scale merge patch), and every call is counted in
Prometheus metrics by verb and kind, so "a reconcile of an unchanged object writes nothing" is
measurable. Blocking client calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from tritonllm.api import constants as c

log = logging.getLogger(__name__)

API_CALLS = Counter(
    "tritonllm_api_calls_total", "Kubernetes API calls made by the operator", ["verb", "kind"]
)
WRITE_VERBS = frozenset({"create", "apply", "patch", "delete", "event"})


@dataclasses.dataclass(frozen=True)
class Resource:
    plural: str
    namespaced: bool = True


# Kinds the operator reads or writes: (apiVersion, kind) -> REST resource.
RESOURCES: dict[tuple[str, str], Resource] = {
    ("v1", "ConfigMap"): Resource("configmaps"),
    ("v1", "Secret"): Resource("secrets"),
    ("v1", "Service"): Resource("services"),
    ("v1", "PersistentVolumeClaim"): Resource("persistentvolumeclaims"),
    ("v1", "Pod"): Resource("pods"),
    ("v1", "Event"): Resource("events"),
    ("v1", "Node"): Resource("nodes", namespaced=False),
    ("v1", "Namespace"): Resource("namespaces", namespaced=False),
    ("batch/v1", "Job"): Resource("jobs"),
    ("apps/v1", "Deployment"): Resource("deployments"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): Resource("leaderworkersets"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): Resource("horizontalpodautoscalers"),
    ("policy/v1", "PodDisruptionBudget"): Resource("poddisruptionbudgets"),
    (c.API_VERSION, c.KIND): Resource(c.PLURAL),
    (c.API_VERSION, c.ENGINE_KIND): Resource(c.ENGINE_PLURAL),
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
    """An API call failed for a reason other than 'not found'."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def _error(exc: ApiException) -> KubeError:
    message = exc.reason or ""
    try:
        body = json.loads(exc.body or "{}")
        message = body.get("message", message)
        reason = body.get("reason", exc.reason or "")
    except (ValueError, AttributeError):
        reason = exc.reason or ""
    return KubeError(exc.status or 0, str(reason), str(message))


def path_for(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    res = RESOURCES[(api_version, kind)]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if res.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{res.plural}"
    return f"{base}/{name}" if name else base


def load_api_client(kubeconfig: str | None = None) -> k8s_client.ApiClient:
    """KUBECONFIG/--kubeconfig when given or present, else the in-cluster service account."""
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except (k8s_config.ConfigException, FileNotFoundError, TypeError):
        if kubeconfig:
            raise
        k8s_config.load_incluster_config(client_configuration=configuration)
    return k8s_client.ApiClient(configuration)


class Kube:
    """Async facade over one ApiClient."""

    def __init__(self, api: k8s_client.ApiClient, field_manager: str = c.FIELD_MANAGER) -> None:
        self.api = api
        self.field_manager = field_manager

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
    ) -> Any:
        API_CALLS.labels(verb, kind).inc()

        def call() -> Any:
            return self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                response_type="object",
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=True,
                _request_timeout=60,
            )

        try:
            return await asyncio.to_thread(call)
        except ApiException as exc:
            raise _error(exc) from None

    # --- reads -----------------------------------------------------------------------------

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self._call(
                "get", kind, "GET", path_for(api_version, kind, namespace, name)
            )
            return obj
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        labels: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        query = []
        if labels:
            query.append(("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items())))
        out = await self._call(
            "list", kind, "GET", path_for(api_version, kind, namespace), query=query
        )
        items: list[dict[str, Any]] = out.get("items", [])
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

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

    async def create(self, obj: Sendable) -> bool:
        """Create; False when it already exists (for objects that must not be re-applied)."""
        try:
            await self._call(
                "create",
                obj.kind,
                "POST",
                path_for(obj.api_version, obj.kind, obj.namespace),
                body=obj.body,
                query=[("fieldManager", self.field_manager)],
            )
            return True
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise

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
    ) -> bool:
        """Delete; False when it was already gone."""
        try:
            await self._call(
                "delete",
                kind,
                "DELETE",
                path_for(api_version, kind, namespace, name),
                body={"propagationPolicy": propagation},
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
