"""Manifest: one rendered Kubernetes object, its identity as typed fields.

Renderers build wire dicts; everything they hand out is a Manifest, so callers (the planner, the
executor, the CLI) address objects by `kind`, `name` and `namespace` instead of digging through
`obj["metadata"]`. A Manifest is also a read-only Mapping over its wire body, as kopf's typed
views of bodies are, so `m["spec"]` reads like the object it stands for. `body` is what goes to
the API server (or into `tritonllm render` output).

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
    def ref(self) -> tuple[str, str]:
        """(kind, name): how the planner looks up the live copy."""
        return self.kind, self.name

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
