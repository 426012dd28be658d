"""Leader election between operator replicas with a coordination.k8s.io Lease.

kopf's peering hands over only when a dead replica's record expires (60 s) or its replica
removes it on SIGTERM; a replica killed outright (SIGKILL, a node lost, the OOM killer) stalls
every reconcile for that minute. A Lease held for a few seconds and renewed well within them
hands over in seconds instead (docs/operator.md has the measured figure):

    standby ──(the Lease is free, or its record has not changed for leaseDurationSeconds)──►
        take it (an update at the resourceVersion read: two standbys cannot both win) ──►
    leader: start kopf (standalone: the Lease is the election), renew every duration / 3
        ──(no successful renew within 2/3 of the duration, or another holder)──► lost:
        cancel the passes in flight, stop kopf and exit, so that a fresh start waits as a standby

The renew deadline holds whatever the API server does: it is counted from when the last
successful write was sent, every renewal is cut at what is left of it, and the Lease's client
sends no request again by itself (a 429 with Retry-After: 3, retried inside the call up to five
times, once kept a replica acting for 17 s against a 4 s deadline while its standby could take
over after 6 s). A failed renewal is tried again after `retry_every`, within the deadline.

Expiry is judged the way client-go's leaderelection judges it: by how long the record has been
seen unchanged on this replica's own monotonic clock, never by comparing the holder's
renewTime with this machine's wall clock (clocks of two nodes differ). A leader that stops on
SIGTERM gives the Lease up, so its standby takes over at its next try.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from .client import LEASE_API_VERSION, Kube, KubeError

log = logging.getLogger("tritonllm.lease")

KIND = "Lease"

# What a Lease request may fail with and be tried again: the API server's answer, and the way to
# it (a timeout, a refused or reset connection while the API server or the node's network is busy
# or restarting). Neither may end the standby's wait or the leader's renewals: a standby that
# exited on one would restart into a crash-loop back-off instead of taking over.
RETRIED = (KubeError, aiohttp.ClientError, TimeoutError, OSError)


class LeaseLost(RuntimeError):
    """This replica no longer holds the Lease: it must stop acting."""


def micro_time(now: dt.datetime | None = None) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, in UTC."""
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass
class _Lease:
    """The object as Kube.create and Kube.replace send it."""

    namespace: str
    name: str
    body: dict[str, Any]
    api_version: str = LEASE_API_VERSION
    kind: str = KIND


class LeaderLease:
    """One replica's view of the Lease: acquire it, keep it, give it up."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration: float = 6.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.duration = duration
        self.renew_every = duration / 3  # three tries before the record could expire
        self.renew_deadline = duration * 2 / 3  # stop acting before a standby may take over
        self.retry_every = min(1.0, duration / 6)
        self.clock = clock
        self._seen: tuple[str, float] | None = None  # (the record as last read, first seen at)
        self._written_at: float | None = None  # when our last successful write was sent
        self.released = False  # given up on a clean stop: keep() ends without LeaseLost

    # --- deciding -------------------------------------------------------------------------------

    def expired(self, lease: dict[str, Any]) -> bool:
        """Free, ours, or unchanged on our clock for longer than its leaseDurationSeconds."""
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if not holder or holder == self.identity:
            return True
        record = f"{holder}|{spec.get('renewTime')}|{spec.get('leaseTransitions')}"
        now = self.clock()
        if self._seen is None or self._seen[0] != record:
            self._seen = (record, now)
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        return now - self._seen[1] >= duration

    def _spec(self, old: dict[str, Any] | None) -> dict[str, Any]:
        spec = dict((old or {}).get("spec") or {})
        now = micro_time()
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if old else 0)
        spec.update(holderIdentity=self.identity, renewTime=now,
                    leaseDurationSeconds=max(1, round(self.duration)))
        return spec

    def _object(self, old: dict[str, Any] | None, spec: dict[str, Any]) -> _Lease:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if old is not None:
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        body = {"apiVersion": LEASE_API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}
        return _Lease(self.namespace, self.name, body)

    # --- acting ---------------------------------------------------------------------------------

    async def try_acquire(self) -> bool:
        """One attempt: take the Lease if it is free or expired, renew it if it is ours."""
        sent = self.clock()
        if await self._try_acquire():
            self._written_at = sent
            return True
        return False

    async def _try_acquire(self) -> bool:
        lease = await self.kube.get(LEASE_API_VERSION, KIND, self.namespace, self.name)
        if lease is None:
            return await self.kube.create(self._object(None, self._spec(None))) is not None
        if not self.expired(lease):
            return False
        return await self.kube.replace(self._object(lease, self._spec(lease))) is not None

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease (the standby's loop)."""
        while True:
            try:
                if await self.try_acquire():
                    log.info("acquired Lease %s/%s as %s", self.namespace, self.name,
                             self.identity)
                    return
            except RETRIED as exc:
                log.warning("Lease %s/%s: %s", self.namespace, self.name, said(exc))
            await asyncio.sleep(self.retry_every)

    async def keep(self, on_lost: Callable[[], None] | None = None) -> None:
        """Renew until the Lease is lost (raises LeaseLost) or released (returns). `on_lost` is
        called the moment the loss is decided, before this raises: it stops the replica's work
        in flight (tritonllm.handlers.operator.lost) with no wait for the task around this."""
        renewed = self._written_at if self._written_at is not None else self.clock()
        wait = self.renew_every
        while True:
            await asyncio.sleep(max(0.0, min(wait, renewed + self.renew_deadline - self.clock())))
            if self.released:
                return
            sent = self.clock()
            if sent - renewed >= self.renew_deadline:
                raise self._lost(f"Lease {self.namespace}/{self.name} not renewed for "
                                 f"{sent - renewed:.1f} s (deadline {self.renew_deadline:.1f} s)",
                                 on_lost)
            written = False
            try:
                # cut at the deadline: a hanging or throttled API server cannot hold it past it
                async with asyncio.timeout(renewed + self.renew_deadline - sent):
                    written = await self._renew()
            except LeaseLost as exc:
                raise self._lost(str(exc), on_lost) from None
            except RETRIED as exc:
                log.warning("could not renew Lease %s/%s: %s", self.namespace, self.name,
                            said(exc))
            if written:
                renewed, wait = sent, self.renew_every
                self._written_at = sent
            else:  # tried again sooner, while the deadline allows
                wait = min(self.retry_every, self.renew_every)

    async def _renew(self) -> bool:
        """One renewal: written, or not (a conflict); LeaseLost when another replica holds it."""
        lease = await self.kube.get(LEASE_API_VERSION, KIND, self.namespace, self.name)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        if lease is not None and holder not in (self.identity, "", None):
            raise LeaseLost(f"Lease {self.namespace}/{self.name} is held by {holder}")
        new = self._object(lease, self._spec(lease))
        written = await (self.kube.create(new) if lease is None else self.kube.replace(new))
        return written is not None

    def _lost(self, why: str, on_lost: Callable[[], None] | None) -> LeaseLost:
        log.warning("%s: this replica stops acting", why)
        if on_lost is not None:
            on_lost()
        return LeaseLost(why)

    async def release(self) -> None:
        """Give the Lease up (a clean stop): the standby takes over at its next try."""
        self.released = True
        try:
            lease = await self.kube.get(LEASE_API_VERSION, KIND, self.namespace, self.name)
            if ((lease or {}).get("spec") or {}).get("holderIdentity") != self.identity:
                return
            assert lease is not None
            spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
            await self.kube.replace(self._object(lease, spec))
            log.info("released Lease %s/%s", self.namespace, self.name)
        except RETRIED as exc:
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.name,
                        said(exc))


def lease_client(kubeconfig: str | None, duration: float) -> Kube:
    """The Lease's own API client: two requests at most, each cut at a third of the duration,
    and a 429 returned at once rather than sent again after its Retry-After (keep() tries again
    itself, within the renew deadline)."""
    return Kube.from_kubeconfig(kubeconfig, concurrency=2, timeout=duration / 3,
                                throttled_retries=0)


def said(exc: BaseException) -> str:
    """An error in a log line: a timeout's str() is empty."""
    return str(exc) or type(exc).__name__
