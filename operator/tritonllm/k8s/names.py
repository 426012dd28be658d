"""Which names are taken: a metadata-only list and watch of every object of the kinds the operator
creates under names anyone can compute (a deployment's Service and workload are named after it).

The operator's own watches carry its label selector (tritonllm.handlers.operator), so an object
someone else made under a name a deployment needs never reaches them. Before it creates a child
those watches do not show, the executor must know whether the name is free or taken by someone
else's object (tritonllm.handlers.execute: nothing a user already had is overwritten). Reading
the name once per child (a GET) was a quarter of the API requests of a converging deployment;
this index answers from one list and one watch per kind and namespace instead, with only what
the ownership check reads (uid, the managed-by label, one owner reference) kept per object: the
API server sends metadata only (PartialObjectMetadata), no spec, data or status, and an object
with thousands of labels or owner references costs the index no more than any other.

A kind whose list fails (not served by this cluster, not allowed) or whose watch broke is
"unknown" until it is listed again: the executor then reads the name as before (a GET). Secrets
are not indexed: the operator may not list them (it reads the two it needs by name).

The same lists and watches also serve as the operator's cache of the children whose spec and
status it never reads (ConfigMaps, Services, NetworkPolicies, HPAs, PDBs: identity, labels and
the spec-hash annotation are all the planner looks at, tritonllm.handlers.cache). What is kept of
an object is the caller's choice (`keep`), and views by name (`by_name`) and by any other key
(`index`) read it in the shape of kopf's indexes. Those kinds thus cost one metadata-only watch
each, not a second full-object watch through kopf's per-event machinery as well.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from tritonllm.api import constants as c

from .client import KubeError

log = logging.getLogger(__name__)

# (apiVersion, kind) of the children created with apply under computable names.
INDEXED: tuple[tuple[str, str], ...] = (
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("batch/v1", "Job"),
    ("apps/v1", "Deployment"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("policy/v1", "PodDisruptionBudget"),
)
RETRY_SECONDS = 5.0  # after a failed list or a broken watch
SHORTEST_WATCH_SECONDS = 1.0  # a stream that ends sooner is followed by a pause this long
ABSENT_RETRY_SECONDS = 300.0  # a kind this cluster does not serve, or we may not list

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name)
Keep = Callable[[Mapping[str, Any]], Obj]  # what is kept of an object (its "kind" set)
Keyed = Callable[[Mapping[str, Any]], dict[Any, Any]]  # an index's key -> value of an object


class MetadataSource(Protocol):
    """What the index reads (tritonllm.k8s.client.Kube)."""

    async def list_metadata(
        self, api_version: str, kind: str, namespace: str | None, each: Callable[[Obj], Any]
    ) -> tuple[Sequence[Any], str]: ...

    def watch_metadata(
        self, api_version: str, kind: str, namespace: str | None, resource_version: str
    ) -> Any: ...


def slim(obj: Mapping[str, Any]) -> Obj:
    """What the ownership check reads of an object (tritonllm.plan.ownership), nothing else: its
    uid, the managed-by label and one owner reference (the controller, else the first: the
    conflict message names it). The index holds every object of its kinds, anyone's, so however
    many labels or owners one carries, this is all that is kept of it."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    kept: Obj = {"name": meta.get("name"), "namespace": _intern(meta.get("namespace")),
                 "uid": meta.get("uid")}
    if c.LABEL_MANAGED_BY in labels:
        kept["labels"] = {c.LABEL_MANAGED_BY: _intern(labels[c.LABEL_MANAGED_BY])}
    owner = _one_owner(meta.get("ownerReferences"))
    if owner is not None:
        kept["ownerReferences"] = [owner]
    return {"kind": _intern(obj.get("kind")), "metadata": kept}


def _one_owner(refs: Any) -> Obj | None:
    """The controller reference (the API server allows one), else the first; its identity."""
    refs = [r for r in refs or () if isinstance(r, Mapping)]
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is None:
        return None
    return {k: _intern(ref[k]) if k in ("apiVersion", "kind") else ref[k]
            for k in ("apiVersion", "kind", "name", "uid", "controller") if k in ref}


def _intern(text: Any) -> Any:
    """One copy of a string every object repeats (a namespace, a kind)."""
    return sys.intern(text) if isinstance(text, str) else text


class TakenNames:
    """Every object of the INDEXED kinds in the watched namespaces (all, when none are named), by
    (kind, namespace, name); metadata only."""

    def __init__(
        self, source: MetadataSource, namespaces: Sequence[str] = (),
        kinds: Sequence[tuple[str, str]] = INDEXED, *, keep: Keep = slim,
    ) -> None:
        self._source = source
        self._scopes: list[str | None] = list(namespaces) or [None]
        self._kinds = list(kinds)
        self._keep = keep
        self._objects: dict[str, dict[Key, Obj]] = {kind: {} for _, kind in self._kinds}
        self._synced: set[tuple[str, str | None]] = set()
        # Listed once, or found not served / not allowed: what `wait_listed` waits for.
        self._settled: set[tuple[str, str | None]] = set()
        self._indexes: dict[str, list[_Index]] = {kind: [] for _, kind in self._kinds}

    def lookup(self, kind: str, namespace: str, name: str) -> tuple[bool, Obj | None]:
        """(known, object): known is False while the kind is not listed in that namespace (ask
        the API server); the object is None when the name is free."""
        if (kind, namespace) not in self._synced and (kind, None) not in self._synced:
            return False, None
        return True, self._objects[kind].get((kind, namespace, name))

    # --- views in the shape of kopf's indexes ----------------------------------------------

    def follows(self, kind: str) -> bool:
        return kind in self._objects

    def by_name(
        self, kind: str, where: Callable[[Mapping[str, Any]], bool]
    ) -> Mapping[tuple[str | None, str], list[Obj]]:
        """(namespace, name) -> [what is kept of the object], for the objects `where` accepts
        (what is already kept, no second copy)."""
        return _ByName(self._objects[kind], kind, where)

    def index(
        self, kind: str, keyed: Keyed
    ) -> Mapping[Any, list[Any]]:
        """key -> the values of the objects `keyed` (given what is kept of each) files under it,
        kept current with the watch."""
        view = _Index(keyed)
        self._indexes[kind].append(view)
        for key, obj in self._objects[kind].items():
            view.put(key, obj)
        return view

    async def wait_listed(self, kinds: Sequence[str], timeout: float) -> list[str]:
        """Wait until each of `kinds` was listed in every scope (or found not served or not
        allowed), at most `timeout` seconds; the kinds still waited for (empty: all listed)."""
        wanted = {(kind, scope) for kind in kinds for scope in self._scopes}
        deadline = time.monotonic() + timeout
        while not wanted <= self._settled and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return sorted({kind for kind, scope in wanted - self._settled})

    # --- following the cluster ---------------------------------------------------------------

    async def run(self) -> None:
        """Follow every kind in every scope until cancelled."""
        await asyncio.gather(*(self._follow(api_version, kind, scope)
                               for api_version, kind in self._kinds for scope in self._scopes))

    async def _follow(self, api_version: str, kind: str, scope: str | None) -> None:
        while True:
            try:
                rv = await self._list(api_version, kind, scope)
                while rv:  # a new watch from where the last one ended; "" after 410 Gone
                    started = time.monotonic()
                    rv = await self._watch(api_version, kind, scope, rv)
                    if time.monotonic() - started < SHORTEST_WATCH_SECONDS:
                        await asyncio.sleep(SHORTEST_WATCH_SECONDS)  # never a tight loop
                continue  # too old to resume: list again at once (the names stay known)
            except asyncio.CancelledError:
                raise
            except KubeError as exc:
                absent = exc.status in (403, 404)
                delay = ABSENT_RETRY_SECONDS if absent else RETRY_SECONDS
                if absent:
                    self._settled.add((kind, scope))
                log.log(logging.INFO if absent else logging.WARNING,
                        "names of %s in %s: %s; reading each name before creating it instead",
                        kind, scope or "all namespaces", exc)
            except Exception as exc:  # a broken stream: list again
                delay = RETRY_SECONDS
                log.warning("watch of %s names in %s broke: %s", kind, scope or "all", exc)
            self._synced.discard((kind, scope))
            await asyncio.sleep(delay)

    async def _list(self, api_version: str, kind: str, scope: str | None) -> str:
        # each object reduced to what is kept of it as soon as it is read, not the list whole
        kept, rv = await self._source.list_metadata(
            api_version, kind, scope, lambda item: self._keep({**item, "kind": kind}))
        objects = self._objects[kind]
        listed = {self._key(kind, item) for item in kept}
        for key in [k for k in objects if (scope is None or k[1] == scope) and k not in listed]:
            self._drop(kind, key)
        for item in kept:
            self._file(kind, item)
        self._synced.add((kind, scope))
        self._settled.add((kind, scope))
        return rv

    async def _watch(self, api_version: str, kind: str, scope: str | None, rv: str) -> str:
        """One watch stream; returns the version to go on from, or "" to list again."""
        async for event in self._source.watch_metadata(api_version, kind, scope, rv):
            type_, obj = event.get("type"), event.get("object") or {}
            if type_ == "ERROR":  # 410 Gone (the version is too old) and the like
                return ""
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if type_ == "DELETED":
                self._drop(kind, self._key(kind, obj))
            elif type_ in ("ADDED", "MODIFIED"):
                self._put(kind, obj)
        return rv

    def _put(self, kind: str, obj: Mapping[str, Any]) -> None:
        self._file(kind, self._keep({**obj, "kind": kind}))

    def _file(self, kind: str, kept: Obj) -> None:
        """What is kept of an object: by name, and in every view."""
        key = self._key(kind, kept)
        self._objects[kind][key] = kept
        for view in self._indexes[kind]:
            view.put(key, kept)

    def _drop(self, kind: str, key: Key) -> None:
        if self._objects[kind].pop(key, None) is not None:
            for view in self._indexes[kind]:
                view.drop(key)

    @staticmethod
    def _key(kind: str, obj: Mapping[str, Any]) -> Key:
        meta = obj.get("metadata") or {}
        return (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def __len__(self) -> int:
        return sum(len(v) for v in self._objects.values())


class _ByName(Mapping[tuple[str | None, str], list[Obj]]):
    def __init__(self, objects: dict[Key, Obj], kind: str,
                 where: Callable[[Mapping[str, Any]], bool]) -> None:
        self._objects, self._kind, self._where = objects, kind, where

    def __getitem__(self, key: tuple[str | None, str]) -> list[Obj]:
        obj = self._objects.get((self._kind, str(key[0] or ""), key[1]))
        if obj is None or not self._where(obj):
            raise KeyError(key)
        return [obj]

    def __iter__(self) -> Iterator[tuple[str | None, str]]:
        return ((ns, name) for (_, ns, name), obj in self._objects.items() if self._where(obj))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Index(Mapping[Any, list[Any]]):
    """key -> values, and which keys each object is filed under (to unfile it)."""

    def __init__(self, keyed: Keyed) -> None:
        self._keyed = keyed
        self._values: dict[Any, dict[Key, Any]] = {}
        self._filed: dict[Key, list[Any]] = {}

    def put(self, ref: Key, obj: Mapping[str, Any]) -> None:
        self.drop(ref)
        entries = self._keyed(obj)
        for key, value in entries.items():
            self._values.setdefault(key, {})[ref] = value
        if entries:
            self._filed[ref] = list(entries)

    def drop(self, ref: Key) -> None:
        for key in self._filed.pop(ref, ()):
            values = self._values.get(key)
            if values is not None:
                values.pop(ref, None)
                if not values:
                    del self._values[key]

    def __getitem__(self, key: Any) -> list[Any]:
        return list(self._values[key].values())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
