"""Shared pydantic configuration for every API model, and the cross-field rule helper.

The API models are the single source of truth for the CRD: field docstrings become the schema's
descriptions (and so `kubectl explain` text), defaults become schema defaults, and each
cross-field rule is declared once as a :class:`Rule` that carries both its CEL expression (for the
API server, at admission) and its Python check (for the operator and `tritonllm render`, which
must reject the same objects with the same message when no API server is involved).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


@dataclasses.dataclass(frozen=True)
class Rule:
    """A cross-field validation rule, enforced twice with one message.

    ``cel`` runs in the API server (``x-kubernetes-validations``) with ``self`` bound to the object
    the rule is attached to; ``check`` runs in Python on the same object and returns True when the
    object is valid. ``field`` is the path reported to the user, relative to that object (for the
    CRD it becomes ``fieldPath``); ``message`` names the fix.
    """

    cel: str
    message: str
    check: Callable[[Any], bool]
    field: str = ""
    # CEL transition rules (those using oldSelf) only have a CEL side.
    transition: bool = False

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.cel, "message": self.message}
        if self.field:
            out["fieldPath"] = "." + self.field
        return out


class ApiModel(BaseModel):
    """Base for every spec/status model: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
        frozen=True,
        # As the API server: "2" is not an integer and "true" not a boolean.
        strict=True,
    )

    # Cross-field rules of this object; see Rule.
    rules: ClassVar[tuple[Rule, ...]] = ()

    def to_wire(self) -> dict[str, Any]:
        """The object as it appears in Kubernetes (camelCase, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
