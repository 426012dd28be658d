"""An in-memory API server for reconciler tests: what tritonllm.k8s.client.Kube does, on dicts.

Writes land in `objects` (keyed by (kind, namespace, name)) the way the API server would keep
them (server-side applies replace the applied fields we own, status applies replace status), and
every call is recorded with the event loop's time, so a test can say *when* something happened.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tritonllm.api import constants as c
from tritonllm.handlers.cache import Cache, IndexSpec, index_specs
from tritonllm.k8s.client import KubeError, Sendable

Ref = tuple[str, str | None, str]  # (kind, namespace, name)


@dataclasses.dataclass(frozen=True)
class Call:
    time: float
    verb: str
    kind: str
    name: str


def _field(obj: Mapping[str, Any], path: str) -> Any:
    """A field selector's value ("involvedObject.name")."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


class FakeKube:
    def __init__(self, objects: Sequence[dict[str, Any]] = ()) -> None:
        self.objects: dict[Ref, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.events: list[dict[str, Any]] = []
        self._versions = itertools.count(100)
        for obj in objects:
            self.put(obj)

    # --- test helpers ------------------------------------------------------------------------

    def cache(self) -> Cache:
        """The reconciler's watch cache over these objects (kopf's indexes, always current)."""
        return Cache(LiveIndices(self, index_specs(gpu_nodes=True)))

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(obj["kind"], meta.get("namespace"), meta["name"])] = obj
        return obj

    def writes(self, verb: str | None = None, kind: str | None = None) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.verb != "get" and c.verb != "list"
            and (verb is None or c.verb == verb)
            and (kind is None or c.kind == kind)
        ]

    def _record(self, verb: str, kind: str, name: str) -> None:
        self.calls.append(Call(asyncio.get_running_loop().time(), verb, kind, name))

    # --- reads (pods only: the rest comes from the cache) --------------------------------------

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        *,
        labels: Mapping[str, str],
        fields: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        self._record("list", kind, "")
        out = []
        for (k, ns, _), obj in self.objects.items():
            have = obj["metadata"].get("labels") or {}
            if (
                k == kind
                and ns == namespace
                and all(have.get(a) == b for a, b in labels.items())
                and all(_field(obj, path) == want for path, want in (fields or {}).items())
            ):
                out.append(copy.deepcopy(obj))
        return out

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        self._record("get", kind, name)
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    # --- writes --------------------------------------------------------------------------------

    async def apply(self, obj: Sendable) -> dict[str, Any]:
        self._record("apply", obj.kind, obj.name)
        live = self.objects.get((obj.kind, obj.namespace, obj.name))
        body = copy.deepcopy(obj.body)
        if live is not None:
            body["metadata"] = {**live["metadata"], **body["metadata"]}
            body.setdefault("status", live.get("status"))
        return self.put(body)

    async def create(self, obj: Sendable) -> dict[str, Any] | None:
        self._record("create", obj.kind, obj.name)
        if (obj.kind, obj.namespace, obj.name) in self.objects:
            return None
        body = copy.deepcopy(obj.body)
        body["metadata"]["uid"] = f"uid-{next(self._versions)}"  # a fresh uid per creation
        return self.put(body)

    async def add_owner(
        self, api_version: str, kind: str, namespace: str, name: str, ref: Mapping[str, Any]
    ) -> None:
        self._record("patch", kind, name)
        live = self.objects.get((kind, namespace, name))
        if live is None:
            raise KubeError(404, "NotFound", f"{kind} {name} not found")
        refs = [r for r in live["metadata"].get("ownerReferences") or []
                if r.get("uid") != ref.get("uid")]
        self.put({**live, "metadata": {**live["metadata"], "ownerReferences": [*refs, dict(ref)]}})

    async def apply_status(self, obj: Sendable) -> dict[str, Any]:
        self._record("apply", obj.kind + "/status", obj.name)
        live = self.objects.get((obj.kind, obj.namespace, obj.name))
        if live is None:
            raise KubeError(404, "NotFound", f"{obj.kind} {obj.name} not found")
        return self.put({**live, "status": copy.deepcopy(obj.body["status"])})

    async def set_finalizers(self, obj: Mapping[str, Any], finalizers: Sequence[str]) -> None:
        meta = obj["metadata"]
        self._record("patch", obj["kind"], meta["name"])
        live = self.objects[(obj["kind"], meta["namespace"], meta["name"])]
        self.put({**live, "metadata": {**live["metadata"], "finalizers": list(finalizers)}})

    async def scale(
        self, api_version: str, kind: str, namespace: str, name: str, replicas: int
    ) -> None:
        self._record("patch", kind + "/scale", name)
        live = self.objects[(kind, namespace, name)]
        self.put({**live, "spec": {**live["spec"], "replicas": replicas}})

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
        self._record("delete", kind, name)
        live = self.objects.get((kind, namespace, name))
        if uid and live is not None and live["metadata"].get("uid") != uid:
            raise KubeError(409, "Conflict", "Precondition failed: UID in precondition")
        return self.objects.pop((kind, namespace, name), None) is not None

    async def post_event(self, event: Sendable) -> None:
        self._record("event", "Event", event.body["reason"])
        self.events.append(event.body)


class LiveIndices(Mapping[str, Mapping[Any, list[Any]]]):
    """kopf's indexes as they would be for the FakeKube's objects (recomputed on every read)."""

    def __init__(self, kube: FakeKube, specs: Sequence[IndexSpec]) -> None:
        self.kube = kube
        self.specs = {s.id: s for s in specs}

    def __getitem__(self, id: str) -> Mapping[Any, list[Any]]:
        spec = self.specs[id]
        out: dict[Any, list[Any]] = defaultdict(list)
        for (kind, _, _), obj in self.kube.objects.items():
            labels = obj["metadata"].get("labels") or {}
            if kind != spec.kind or (
                spec.managed and labels.get(c.LABEL_MANAGED_BY) != c.APP_NAME
            ):
                continue
            for key, value in spec.keyed(obj).items():
                out[key].append(value)
        return dict(out)

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)
