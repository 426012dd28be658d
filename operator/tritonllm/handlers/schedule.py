"""When each deployment is reconciled next without a watch event: one timer queue for all.

Every pass ends by setting its object's next time: the decision's `requeue_after` (a build backoff
running out, a build or rollout under way, a missing prerequisite), else one resync period later
(a failed pass: a growing delay). The queue is a heap of (time, key) with the current time per
key beside it, so a new time replaces the old one in O(log N) and nothing is scanned.

The queue runs only while this replica acts: `run` is the body of one kopf daemon (on a
Namespace that always exists, see tritonllm.handlers.operator), and kopf stops every daemon when
peering pauses the replica and starts it again when the replica resumes. Times that came due
meanwhile fire then. One daemon rather than one per deployment: kopf keeps the latest full body
of every object that has a daemon, which for a thousand deployments is tens of MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable
from typing import Protocol

# A deployment in the queue: (namespace, name). The handlers' one key for a deployment (the
# reconciler's passes, the condition gauge); references to objects are ObjectRefs.
Key = tuple[str, str]


class Stopped(Protocol):
    """kopf's DaemonStopped, as far as the queue uses it."""

    def __bool__(self) -> bool: ...


class Schedule:
    def __init__(self, fire: Callable[[str, str], None]) -> None:
        self._fire = fire
        self._due: dict[Key, float] = {}  # loop time of each key's next reconcile
        self._heap: list[tuple[float, Key]] = []  # may hold outdated entries: _due decides
        self._wakeup: asyncio.Event | None = None

    def at(self, key: Key, delay: float) -> None:
        """Reconcile `key` in `delay` seconds (replacing the time it had)."""
        due = asyncio.get_running_loop().time() + delay
        self._due[key] = due
        heapq.heappush(self._heap, (due, key))
        if self._wakeup is not None and self._heap[0][0] == due:
            self._wakeup.set()  # earlier than what the queue sleeps for

    def cancel(self, key: Key) -> None:
        self._due.pop(key, None)

    def due_in(self, key: Key) -> float | None:
        due = self._due.get(key)
        return None if due is None else due - asyncio.get_running_loop().time()

    async def run(self, stopped: Stopped) -> None:
        """Fire each key when it is due, until `stopped` (kopf's daemon stopper)."""
        loop = asyncio.get_running_loop()
        self._wakeup = wakeup = asyncio.Event()
        try:
            while not stopped:
                while self._heap and self._heap[0][0] <= loop.time():
                    due, key = heapq.heappop(self._heap)
                    if self._due.get(key) == due:
                        del self._due[key]  # the pass sets the next time
                        self._fire(*key)
                delay = self._heap[0][0] - loop.time() if self._heap else None
                wakeup.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), timeout=delay)
        finally:
            self._wakeup = None

    def stop(self) -> None:
        """Wake the queue so that it sees its stopper (tests, shutdown)."""
        if self._wakeup is not None:
            self._wakeup.set()
