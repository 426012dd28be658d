"""One reconcile: read (the watch caches) -> render + plan (pure) -> write (k8s) -> status, Events.

Reconciles are coalesced per object: events arriving while one runs mark it dirty and it runs once
more afterwards, so a burst of child events costs one extra pass, never a pile-up. Each pass reads
the current state from what the watches delivered (tritonllm.handlers.cache: no read request), so
it does not matter which event triggered it (level-based).

When to look again without an event: every pass ends by scheduling the object's next reconcile
(tritonllm.handlers.schedule), at the decision's `requeue_after` (a backoff running out, a build or
rollout under way, a missing prerequisite) or else one resync period later; a failed pass is
retried with a growing delay, capped at MAX_ERROR_REQUEUE_SECONDS (error_backoff_seconds). The
pass that sees a deletion releases our finalizer; if that write fails, it is retried the same way
(the object is forgotten only once the finalizer is gone). The schedule runs only while this
replica acts (peering).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, TritonLLMDeployment, parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.k8s.client import Kube, KubeError
from tritonllm.plan import (
    FINALIZER,
    UNSAFE_ENGINE_KEY,
    Decision,
    Observed,
    engine_to_forget,
    plan,
    plan_deletion,
    plan_failed,
    plan_invalid,
    record_status,
)
from tritonllm.render import RenderOptions, jobs, naming, render_all, rendered_problems, validate
from tritonllm.render.events import event
from tritonllm.render.manifest import Manifest

from .cache import Cache
from .execute import NameConflict, Outbox, WriteRefused, execute, failure
from .metrics import RECONCILE_SECONDS, RECONCILES, ConditionGauge, PhaseHistory
from .observe import PodChecks, SecretChecks, made_by_ours, observe, read_before_render
from .schedule import Key, Schedule
from .smoke import SmokeChecks

log = logging.getLogger("tritonllm.reconcile")

Logger = logging.LoggerAdapter[Any]

# Passes in flight per client slot. A pass holds its rendered objects (about 75 kB for the CPU
# stand-in example) and what it observed while it waits for the client; 3 per slot (48 at the
# default concurrency) keeps first passes of a burst from queueing behind passes that wait for
# their writes. 4 gave the same times at N=1000 with 2 MiB more resident (docs/performance.md);
# status writes and Events no longer hold a slot (they are sent after the pass gave it back).
PASSES_PER_CLIENT_SLOT = 3
# A status change of progress alone (a Job started, a pod scheduled, "1/2 replicas updated": no
# summary condition changes its status) is held back this long, with the Events it implies, and
# sent with the next change that matters (a condition flips, a record is kept, a Warning), or
# alone once the hold is over: on a fast path every step would otherwise be a status write and
# an Event. The times come from the objects, so the hold delays when `kubectl get` shows them,
# never what they say.
PROGRESS_HOLD_SECONDS = 5.0
# A failed pass is retried after this many seconds, doubling per consecutive failure, up to
# MAX_ERROR_REQUEUE_SECONDS (and never later than the resync period).
ERROR_REQUEUE_SECONDS = 5.0
MAX_ERROR_REQUEUE_SECONDS = 300.0


def error_backoff_seconds(failures: int) -> float:
    """The delay before retrying a pass that failed `failures` times in a row: 5 s, 10 s, 20 s,
    ... up to 5 minutes, for any count (the exponent is bounded: 2.0 ** 1024 overflows a float,
    which once ended an object's reconciles for good after ~1,025 failures)."""
    doublings = min(max(failures - 1, 0), 32)  # 5 s * 2**32 is far beyond the cap
    return min(MAX_ERROR_REQUEUE_SECONDS, ERROR_REQUEUE_SECONDS * 2.0**doublings)


class Reconciler:
    """Reconciles TritonLLMDeployments; shared by every kopf handler of one operator."""

    def __init__(
        self,
        kube: Kube,
        settings: OperatorSettings,
        cache: Cache,
        *,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.cache = cache
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._dirty: set[Key] = set()
        self._conditions = ConditionGauge()
        self._phases = PhaseHistory()
        # Per (namespace, engine key): its lock and the passes holding or waiting for it.
        self._engine_locks: dict[Key, tuple[asyncio.Lock, int]] = {}
        self.schedule = Schedule(self.request)
        self._pods = PodChecks()
        self._secrets = SecretChecks()
        self._smoke = SmokeChecks(self.request)  # a set's end asks for its deployment's pass
        self._failures: dict[Key, int] = {}  # consecutive failed passes
        self._held: dict[Key, float] = {}  # since when a progress-only status waits (monotonic)
        self._gone: set[Key] = set()  # deleted since their last pass: nothing to schedule
        # The status and Events of each deployment's pass, sent once it gave its slot back.
        self._outbox: dict[Key, Outbox] = {}
        self._stopped = False  # the replica stops acting (kopf's cleanup)
        # Passes in flight at once: enough to keep the API client busy; more would only hold
        # more rendered objects in memory while waiting for it (a burst of 1000 new objects).
        self._passes = asyncio.Semaphore(PASSES_PER_CLIENT_SLOT * settings.api_concurrency)

    # --- scheduling ------------------------------------------------------------------------

    def pod_changed(self, pod: dict[str, Any]) -> None:
        """A serving pod changed: a container that exited with an error is reported in its
        deployment's conditions (ServingPodFailed)."""
        if not made_by_ours(self.cache, pod):
            return  # only labelled as ours: not read
        name = self._pods.pod_changed(pod)
        if not name:
            return
        ns, labels = pod["metadata"].get("namespace", ""), pod["metadata"].get("labels") or {}
        self.request(ns, name)
        if labels.get(c.LABEL_COMPONENT) == c.COMPONENT_REPOSITORY and labels.get(c.LABEL_REPO_KEY):
            # the content key's shared Job: every deployment waiting for it may start its pods
            for user in self.cache.repository_users(ns, labels[c.LABEL_REPO_KEY]):
                if user != name:
                    self.request(ns, user)

    def pod_gone(self, pod: dict[str, Any]) -> None:
        """A serving pod was deleted (what the scheduler said of it no longer holds; an error
        exit that its last state shows is reported as from a change)."""
        name = None
        if made_by_ours(self.cache, pod):
            name = self._pods.pod_gone(pod)
        else:  # only labelled as ours, or its workload went first: nothing read, kept state goes
            self._pods.forget_pod(pod)
        ns = pod["metadata"].get("namespace", "")
        instance = (pod["metadata"].get("labels") or {}).get(c.LABEL_INSTANCE)
        if instance and not self.cache.exists(c.KIND, ns, instance):
            # No such deployment (a pod labelled as ours by someone else, or one that outlived
            # its deployment): what was kept of its pods goes with them.
            self._pods.forget(ns, instance)
        elif name:
            self.request(ns, name)

    def stop(self, *, cancel: bool = False) -> None:
        """The replica stops acting: requests from now on are dropped. With `cancel` (the Lease
        is lost: a standby may act from its expiry on) the passes in flight are cancelled too,
        so none sends another write; a clean stop lets them end (`wait_idle`)."""
        self._stopped = True
        self._smoke.stop()  # smoke sets run outside the passes: no pass would read them
        if cancel:
            for task in self._running.values():
                task.cancel()

    def request(self, namespace: str, name: str) -> None:
        """Ask for a reconcile of one object (coalesced)."""
        if self._stopped:
            return
        key = (namespace, name)
        if key in self._running:
            self._dirty.add(key)
            return
        self._running[key] = asyncio.create_task(self._loop(key))

    async def _loop(self, key: Key) -> None:
        try:
            while True:
                async with self._passes:
                    self._dirty.discard(key)
                    requeue = await self._reconcile_once(*key)
                # The status and Events are sent after the pass gave its slot back (still before
                # this deployment's next pass): they wait behind every write that converges
                # (tritonllm.k8s.client, REPORT), and a pass holding its slot meanwhile would
                # keep another deployment's first pass waiting.
                requeue = await self._report_pass(key, requeue)
                self._schedule(key, requeue)
                if key not in self._dirty:
                    return
        finally:
            self._running.pop(key, None)

    def _schedule(self, key: Key, requeue_after: float | None) -> None:
        """The next reconcile: at `requeue_after`, else one resync period from now."""
        if key in self._gone:
            self._gone.discard(key)
            return
        resync = self.settings.resync_seconds
        self.schedule.at(key, resync if requeue_after is None else min(requeue_after, resync))

    def next_reconcile_in(self, namespace: str, name: str) -> float | None:
        """Seconds until the scheduled reconcile of an object (None: none scheduled)."""
        return self.schedule.due_in((namespace, name))

    async def wait_idle(self) -> None:
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    def forget(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self._conditions.forget(key)
        self.cache.forget(namespace, name)
        self.schedule.cancel(key)
        self._pods.forget(namespace, name)
        self._smoke.forget(namespace, name)
        self._failures.pop(key, None)
        self._held.pop(key, None)
        self._gone.add(key)

    # --- one pass --------------------------------------------------------------------------

    async def reconcile(self, namespace: str, name: str) -> float | None:
        """One pass, its status and Events; returns when to look again (seconds), if sooner
        than the resync."""
        requeue = await self._reconcile_once(namespace, name)
        return await self._report_pass((namespace, name), requeue)

    async def _report_pass(self, key: Key, requeue: float | None) -> float | None:
        """Send what the last pass of `key` decided to say. A status the API server refuses
        makes the pass a failed one (retried with the error backoff, like a failed write)."""
        box = self._outbox.pop(key, None)
        if box is None:
            return requeue
        try:
            await box.send(self.kube, self.cache)
        except KubeError as exc:
            log.warning("%s/%s: status not written: %s", *key, exc)
            RECONCILES.labels("error").inc()
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            return error_backoff_seconds(failures)
        return requeue

    async def _reconcile_once(self, namespace: str, name: str) -> float | None:
        logger = logging.LoggerAdapter(log, {"namespace": namespace, "object": name})
        started = time.monotonic()
        key = (namespace, name)
        try:
            requeue = await self._pass(namespace, name, logger)
            RECONCILES.labels("ok").inc()
            self._failures.pop(key, None)
            return requeue
        except (KubeError, NameConflict, WriteRefused, InvalidDeployment) as exc:
            logger.warning("reconcile failed: %s", exc)
        except Exception:
            logger.exception("reconcile crashed")
        finally:
            RECONCILE_SECONDS.observe(time.monotonic() - started)
        RECONCILES.labels("error").inc()
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        return error_backoff_seconds(failures)

    async def _pass(self, namespace: str, name: str, logger: Logger) -> float | None:
        await self.cache.listed()
        body = self.cache.get(c.KIND, namespace, name)
        if body is None:
            self.forget(namespace, name)
            return None
        if body["metadata"].get("deletionTimestamp"):
            if FINALIZER in (body["metadata"].get("finalizers") or []):
                # A failure raises: the object stays known and the pass is retried with the
                # error backoff until the finalizer is released (else it stays Terminating).
                await self._finalize(body, logger)
            self.forget(namespace, name)
            return None
        return await self._reconcile(body, logger)

    async def _reconcile(self, body: dict[str, Any], logger: Logger) -> float | None:
        now = self.clock()
        try:
            dep = parse_deployment(body)
            problems = validate(dep, self.settings)
            if problems:
                raise InvalidDeployment(problems)
        except InvalidDeployment as exc:
            logger.warning("invalid spec: %s", exc)
            decision = plan_invalid(body, exc, Observed(now=now))
            await execute(self.kube, self.cache, body, None, decision, logger)
            self._record(body, decision.status)
            return decision.requeue_after
        key = naming.engine_key(dep)
        try:
            async with self._engine_guard(dep.namespace, key):
                decision = await self._plan_and_execute(body, dep, key, now, logger)
        except Exception as exc:
            await self._report(body, exc, now, logger)
            raise
        self._record(body, decision.status)
        return decision.requeue_after

    async def _report(
        self, body: dict[str, Any], exc: Exception, now: dt.datetime, logger: Logger
    ) -> None:
        """Whatever ended a pass is said on the object (Degraded + an Event naming the object
        or field and the fix), not only in the log; the pass is then retried with backoff."""
        reason, message = failure(exc)
        meta = body["metadata"]
        # the newest status we know (this pass may have written to it before it failed)
        body = self.cache.get(c.KIND, meta["namespace"], meta["name"]) or body
        decision = plan_failed(body, reason, message, Observed(now=now))
        try:
            await execute(self.kube, self.cache, body, None, decision, logger)
            self._record(body, decision.status)
        except KubeError as err:  # the status itself cannot be written: the log is all we have
            logger.warning("could not report %s (%s): %s", reason, message, err)

    async def _plan_and_execute(
        self,
        body: dict[str, Any],
        dep: TritonLLMDeployment,
        key: str,
        now: dt.datetime,
        logger: Logger,
    ) -> Decision:
        before = read_before_render(self.cache, self.settings, dep, key, body)
        rendered = render_all(dep, before.opts)
        too_big = rendered_problems(rendered)
        if too_big:
            raise InvalidDeployment(too_big)
        obs = await observe(
            self.kube, self.cache, self.settings, dep, rendered, before,
            now=now, pods=self._pods, secrets=self._secrets, smoke=self._smoke,
            rollout=(body.get("status") or {}).get("rollout"),
        )
        decision = plan(body, dep, rendered, obs)
        self._hold_progress((dep.namespace, dep.name), decision)
        if decision.status is not None:
            old = (body.get("status") or {}).get("phases") or []
            decision.events += self._phases.ended(old, decision.status.get("phases") or [])
        outbox = self._outbox.setdefault((dep.namespace, dep.name), Outbox())
        await execute(self.kube, self.cache, body, dep, decision, logger, engine_key=key,
                      outbox=outbox)
        return decision

    def _hold_progress(self, key: Key, decision: Decision) -> None:
        """Hold back a status write of progress alone (PROGRESS_HOLD_SECONDS) and its Events
        (the pass that writes the status posts them, from the same flips), unless it has waited
        long enough or says something is wrong (a Warning: a pod that cannot start); any other
        status write sends it along."""
        warns = any(e.type == "Warning" for e in decision.events)  # a problem is said at once
        if decision.status is None or not decision.status_progress_only or warns:
            if decision.status is not None:
                self._held.pop(key, None)
            return
        now = time.monotonic()
        since = self._held.setdefault(key, now)
        if now - since >= PROGRESS_HOLD_SECONDS:
            self._held.pop(key, None)
            return
        decision.status = None
        decision.events = []
        decision.requeue(PROGRESS_HOLD_SECONDS - (now - since))

    def _engine_guard(
        self, namespace: str, key: str
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        """While an engine is not Ready, the deployments sharing it plan one at a time (each sees
        the record and Job the one before wrote: one build, failures counted once). A Ready
        engine is only read, so its users reconcile in parallel."""
        engine = self.cache.get(c.ENGINE_KIND, namespace, key)
        if record_status(engine).state == "Ready":
            return contextlib.nullcontext()
        return self._engine_lock(namespace, key)

    @contextlib.asynccontextmanager
    async def _engine_lock(self, namespace: str, key: str) -> AsyncIterator[None]:
        """An engine's lock, kept only while passes hold or wait for it: every change of a
        spec is a new engine key, and a lock per key ever seen would stay forever."""
        k = (namespace, key)
        lock, users = self._engine_locks.get(k) or (asyncio.Lock(), 0)
        self._engine_locks[k] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            users = self._engine_locks[k][1] - 1
            if users:
                self._engine_locks[k] = (lock, users)
            else:
                del self._engine_locks[k]

    def _record(self, body: dict[str, Any], new_status: dict[str, Any] | None) -> None:
        """Publish the deployment's conditions in the tritonllm_deployments gauge."""
        meta = body["metadata"]
        status = new_status if new_status is not None else (body.get("status") or {})
        conditions = {x["type"]: x["status"] for x in status.get("conditions") or []}
        self._conditions.set((meta["namespace"], meta["name"]), conditions)

    async def _warn(self, body: dict[str, Any], reason: str, message: str, logger: Logger) -> None:
        try:
            await self.kube.post_event(
                event(body, type_="Warning", reason=reason, message=message, now=self.clock())
            )
        except KubeError as exc:
            logger.warning("could not post %s: %s", reason, exc)

    async def _finalize(self, body: dict[str, Any], logger: Logger) -> None:
        """engineRetention Delete: forget the engine if no other deployment uses it, then release
        the finalizer — in this pass, even if forgetting failed (deletion is never blocked). If
        releasing it fails (a conflict, the API server unavailable, throttled), the KubeError
        ends the pass and it is retried with the error backoff; forgetting again is harmless
        (the record is already gone, the cleanup Job already exists)."""
        meta = body["metadata"]
        key, refused = engine_to_forget(body)
        if refused:
            logger.warning("engine cleanup refused: %s", refused)
            await self._warn(body, UNSAFE_ENGINE_KEY, refused, logger)
        users = self.cache.deployments_using(meta["namespace"], key) if key else []
        forget, finalizers = plan_deletion(body, users)
        if key and forget:
            try:
                await self.kube.delete(c.API_VERSION, c.ENGINE_KIND, meta["namespace"], key)
                logger.info("forgot engine %s (engineRetention Delete)", key)
                # Its files go too: a Job on the store (the operator never mounts the claim).
                dep = parse_deployment(body)
                job = jobs.engine_cleanup_job(dep, key, RenderOptions(settings=self.settings))
                await self.kube.create(Manifest.of(job))
                logger.info("removing engine %s from claim %s", key, dep.spec.storage.claimName)
            except (KubeError, InvalidDeployment, ValueError) as exc:
                logger.warning("could not forget engine %s: %s", key, exc)
        elif key:
            logger.info("engine %s kept: other deployments use it", key)
        await self.kube.set_finalizers(body, finalizers)
