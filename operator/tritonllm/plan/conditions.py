"""metav1.Condition bookkeeping: one pure function decides every condition change.

lastTransitionTime changes only when status flips; reason/message/observedGeneration updates do
not count as transitions (and do not make Events).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]


@dataclasses.dataclass(frozen=True)
class Cond:
    type: str
    status: Status
    reason: str
    message: str = ""


def merge_conditions(
    old: list[dict[str, Any]], new: list[Cond], *, generation: int, now: str
) -> tuple[list[dict[str, Any]], list[tuple[Cond, str | None]]]:
    """The new conditions list, and the flips as (condition, previous status or None)."""
    by_type = {c["type"]: c for c in old}
    out: list[dict[str, Any]] = []
    flips: list[tuple[Cond, str | None]] = []
    for cond in new:
        prev = by_type.get(cond.type)
        changed = prev is None or prev.get("status") != cond.status
        out.append(
            {
                "type": cond.type,
                "status": cond.status,
                "reason": cond.reason,
                "message": cond.message,
                "observedGeneration": generation,
                "lastTransitionTime": now if changed else prev["lastTransitionTime"],  # type: ignore[index]
            }
        )
        if changed:
            flips.append((cond, prev.get("status") if prev else None))
    return out, flips
