"""Decision: what one reconcile decided to write. The steps of the planner fill it in order."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, NamedTuple

from tritonllm.render.manifest import Manifest, ObjectRef, live_hash

from .observed import Observed


class EventNote(NamedTuple):
    """An Event the decision posts on the deployment (render.events builds the object)."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass
class Decision:
    """What to do now."""

    apply: list[Manifest] = dataclasses.field(default_factory=list)
    # Objects of the engine key created (never applied: the name must be free), in this order;
    # the executor records each one's uid in the engine record's status (buildJobUid,
    # buildPlanUid), the only proof later passes accept that the operator created it.
    create: list[Manifest] = dataclasses.field(default_factory=list)
    # Objects of a content key shared by the namespace's deployments (the repository Job),
    # created when missing (POST, never applied: the first deployment to create one is its
    # controller, the others read it). One found there already must be ours or another
    # deployment's of this namespace (tritonllm.plan.ownership.shared_trusted).
    create_shared: list[Manifest] = dataclasses.field(default_factory=list)
    # Objects deleted only if this deployment is their controller (an old revision's shared
    # repository Job: another deployment's is left to it).
    delete_own: list[ObjectRef] = dataclasses.field(default_factory=list)
    # Shared objects that get this deployment's owner reference added (not the controller's), so
    # that they live as long as any deployment using them.
    add_owner: list[ObjectRef] = dataclasses.field(default_factory=list)
    # Uids of the shared objects the operator created, as the engine record says (the build
    # objects: deletable), or as the watches show (the repository Job of the target key that
    # another deployment of the namespace created: read, never deleted, see delete_own).
    recorded: frozenset[str] = frozenset()
    delete: list[ObjectRef] = dataclasses.field(default_factory=list)
    scale: tuple[ObjectRef, int] | None = None  # (the workload, its replicas)
    engine_status: dict[str, Any] | None = None  # new TritonLLMEngine status, if changed
    status: dict[str, Any] | None = None  # new deployment status (wire form), if changed
    # The new status differs from the live one only in progress (plan.status.progress_only: the
    # phase timeline, counts, a condition's words, none of their statuses): the reconciler may
    # hold it back briefly (PROGRESS_HOLD_SECONDS), with the Events it implies, and send it with
    # the next change that matters, or alone once the hold is over.
    status_progress_only: bool = False
    events: list[EventNote] = dataclasses.field(default_factory=list)
    # Reconcile again after this many seconds: a step is waiting for something that produces no
    # watch event (a backoff running out) or that should be looked at sooner than the resync.
    requeue_after: float | None = None
    build_result: str | None = None  # "succeeded" | "failed" when a build just finished
    # Create the MPI SSH key Secret (random keys: created once, never re-applied).
    create_mpi_secret: bool = False
    # New metadata.finalizers list, when ours must be added or removed.
    finalizers: list[str] | None = None

    def requeue(self, seconds: float) -> None:
        """Ask to be reconciled again within `seconds` (the earliest request wins)."""
        if self.requeue_after is None or seconds < self.requeue_after:
            self.requeue_after = seconds


def want(p: Decision, obs: Observed, obj: Manifest) -> None:
    """Apply `obj` unless the live copy already carries its hash."""
    if live_hash(obs.live.get(obj.ref)) != obj.spec_hash:
        p.apply.append(obj.stamped())


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: str | None) -> dt.datetime | None:
    if not s:
        return None
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
