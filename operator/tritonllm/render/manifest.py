"""Manifest: one rendered Kubernetes object, its identity as typed fields.

Renderers build wire dicts; everything they hand out is a Manifest, so callers (the planner, the
executor, the CLI) address objects by `kind`, `name` and `namespace` instead of digging through
`obj["metadata"]`. A Manifest is also a read-only Mapping over its wire body, as kopf's typed
views of bodies are, so `m["spec"]` reads like the object it stands for. `body` is what goes to
the API server (or into `tritonllm render` output).

An object named without its body (one to delete, co-own or scale, a live copy to look up) is an
`ObjectRef`: the one type of reference between the planner's steps, the read phase and the
executor. `Manifest.ref` is a rendered object's.

The spec hash: every applied child carries `tritonllm.io/spec-hash`, a hash of the object as
rendered; the planner applies an object only when the live copy carries another hash (so an
unchanged object is never written again). `stamped()` adds it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

from tritonllm.api import constants as c

from . import naming


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    """A Kubernetes object by identity: apiVersion, kind, namespace, name. `uid`, where known (an
    object read from the API server), says which incarnation; it takes no part in equality, so
    a rendered object's reference finds its live copy."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str | None = dataclasses.field(default=None, compare=False)

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> ObjectRef:
        """The reference of an object in its wire form (with its uid, when it has one)."""
        meta = body["metadata"]
        return cls(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"],
                   meta.get("uid"))


@dataclasses.dataclass(frozen=True, eq=False)
class Manifest(Mapping[str, Any]):
    """A Kubernetes object: `body` on the wire, identity alongside."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    body: dict[str, Any]

    @classmethod
    def of(cls, body: dict[str, Any]) -> Manifest:
        meta = body["metadata"]
        return cls(body["apiVersion"], body["kind"], meta["name"], meta.get("namespace"), body)

    # --- a read-only view of the body ----------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.body)

    def __len__(self) -> int:
        return len(self.body)

    @property
    def ref(self) -> ObjectRef:
        """This object's reference: how the planner looks up the live copy."""
        return ObjectRef(self.api_version, self.kind, self.namespace, self.name)

    # --- the spec hash ---------------------------------------------------------------------------

    @functools.cached_property
    def spec_hash(self) -> str:
        """Hash of the object as rendered (its own hash annotation excluded)."""
        meta = self.body["metadata"]
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if k != c.ANNOTATION_SPEC_HASH
        }
        plain = {k: v for k, v in meta.items() if k != "annotations"}
        return naming.stable_hash({**self.body, "metadata": {**plain, "annotations": annotations}})

    def stamped(self) -> Manifest:
        """The object with its spec-hash annotation, as applied."""
        meta = self.body["metadata"]
        annotations = {**(meta.get("annotations") or {}), c.ANNOTATION_SPEC_HASH: self.spec_hash}
        return dataclasses.replace(
            self, body={**self.body, "metadata": {**meta, "annotations": annotations}}
        )


def live_hash(obj: Mapping[str, Any] | None) -> str | None:
    """The spec-hash annotation of a live object (None when absent)."""
    if obj is None:
        return None
    return str((obj["metadata"].get("annotations") or {}).get(c.ANNOTATION_SPEC_HASH)) or None
