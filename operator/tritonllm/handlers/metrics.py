"""The operator's Prometheus metrics (docs/operator.md lists them).

The per-condition gauge is kept by counts updated per deployment (old conditions out, new in), so
publishing it costs the same with one deployment or a thousand.
"""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram

from tritonllm.api import constants as c

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
BY_CONDITION = Gauge(
    "tritonllm_deployments", "Deployments by condition and status", ["condition", "status"]
)
for _type in c.CONDITION_TYPES:
    for _status in ("True", "False", "Unknown"):
        BY_CONDITION.labels(_type, _status).set(0)

Key = tuple[str, str]


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
