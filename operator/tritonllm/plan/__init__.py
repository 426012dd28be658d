"""The planner: what one reconcile read (``Observed``) to what it writes (``Decision``), pure.

``plan()`` is the entry for a valid deployment, ``plan_invalid()`` and ``plan_failed()`` for one
whose spec or pass failed, ``plan_deletion()`` for one being deleted. Callers (the handlers)
import from here; the modules behind it are the planner's steps (``reconcile`` runs them in
order) and what the read phase uses to classify what it read.
"""

from tritonllm.render import ObjectRef

from .deletion import FINALIZER, UNSAFE_ENGINE_KEY, engine_to_forget, plan_deletion
from .engine import engine_anchor, is_cache_hit, record_status
from .gc import optional_refs
from .observed import (
    Observed,
    SmokeAnswer,
    SmokeRun,
    WorkloadObs,
    failure_state,
    job_failed,
    job_finished,
    job_has_pod,
    job_running,
    serving_failure,
    unschedulable_message,
)
from .ownership import (
    conflict_message,
    controlled_by,
    is_ours,
    pod_workloads,
    shared_controller,
)
from .phases import PodTimes
from .reconcile import plan, plan_failed, plan_invalid
from .rollout import judge
from .stalls import Stall, job_stall
from .writes import Decision, EventNote

__all__ = [
    "FINALIZER",
    "UNSAFE_ENGINE_KEY",
    "Decision",
    "EventNote",
    "ObjectRef",
    "Observed",
    "PodTimes",
    "SmokeAnswer",
    "SmokeRun",
    "Stall",
    "WorkloadObs",
    "conflict_message",
    "controlled_by",
    "engine_anchor",
    "engine_to_forget",
    "failure_state",
    "is_cache_hit",
    "is_ours",
    "job_failed",
    "job_finished",
    "job_has_pod",
    "job_running",
    "job_stall",
    "judge",
    "optional_refs",
    "plan",
    "plan_deletion",
    "plan_failed",
    "plan_invalid",
    "pod_workloads",
    "record_status",
    "serving_failure",
    "shared_controller",
    "unschedulable_message",
]
