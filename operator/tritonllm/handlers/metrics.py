"""The operator's Prometheus metrics (docs/operator.md lists them).

The per-condition gauge is kept by counts updated per deployment (old conditions out, new in), so
publishing it costs the same with one deployment or a thousand.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from tritonllm.api import constants as c
from tritonllm.api.status import PhaseTime
from tritonllm.plan import EventNote, phases

from .schedule import Key

RECONCILES = Counter("tritonllm_reconciles_total", "Reconcile passes", ["result"])
RECONCILE_SECONDS = Histogram("tritonllm_reconcile_duration_seconds", "Duration of a reconcile")
BUILDS = Counter("tritonllm_engine_builds_total", "Finished engine builds", ["result"])
REPLICA_WRITES = Counter(
    "tritonllm_replica_writes_total",
    "Writes that set a serving workload's replica count (a scale, or an apply carrying "
    "spec.replicas)",
    ["kind"],
)
ACTING = Gauge(
    "tritonllm_operator_acting",
    "1 while this replica reconciles; 0 while it is paused (kopf peering lets another replica "
    "act) or has not started acting yet",
)
PHASE_SECONDS = Histogram(
    "tritonllm_phase_seconds",
    "Lifecycle phases of deployments' revisions, timed from the cluster's records (status.phases)",
    ["phase"],
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200),
)
BY_CONDITION = Gauge(
    "tritonllm_deployments", "Deployments by condition and status", ["condition", "status"]
)
for _type in c.CONDITION_TYPES:
    for _status in ("True", "False", "Unknown"):
        BY_CONDITION.labels(_type, _status).set(0)

class ConditionGauge:
    """tritonllm_deployments{condition, status}: the conditions of every known deployment."""

    def __init__(self) -> None:
        self._by_object: dict[Key, dict[str, str]] = {}
        self._counts: Tally[tuple[str, str]] = Tally()

    def set(self, key: Key, conditions: dict[str, str]) -> None:
        old = self._by_object.get(key, {})
        if old == conditions:
            return
        self._move(old, -1)
        self._move(conditions, +1)
        self._by_object[key] = conditions

    def forget(self, key: Key) -> None:
        self._move(self._by_object.pop(key, {}), -1)

    def _move(self, conditions: dict[str, str], delta: int) -> None:
        for pair in conditions.items():
            self._counts[pair] += delta
            BY_CONDITION.labels(*pair).set(self._counts[pair])


class PhaseHistory:
    """tritonllm_phase_seconds, and the recent durations of each phase in this process: a phase
    that takes far longer than its history gets a Warning Event (plan.phases.slow)."""

    KEEP = 50

    def __init__(self) -> None:
        self._recent: dict[str, list[float]] = {}

    def ended(self, old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
              ) -> list[EventNote]:
        events: list[EventNote] = []
        for phase in phases.newly_ended([PhaseTime.model_validate(p) for p in new], old):
            if phase.seconds is None:
                continue
            history = self._recent.setdefault(phase.name, [])
            message = phases.slow(phase, history)
            if message:
                events.append(EventNote("Warning", "PhaseSlow", message))
            PHASE_SECONDS.labels(phase.name).observe(phase.seconds)
            history.append(phase.seconds)
            del history[: -self.KEEP]
        return events
