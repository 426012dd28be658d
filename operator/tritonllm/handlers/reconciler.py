"""One reconcile: read (k8s) -> render + plan (pure) -> write (k8s) -> status and Events.

Reconciles are coalesced per object: events arriving while one runs mark it dirty and it runs once
more afterwards, so a burst of child events costs one extra pass, never a pile-up. Each pass reads
fresh state, so it does not matter which event triggered it (level-based).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, TritonLLMDeployment, parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.k8s.client import Kube, KubeError
from tritonllm.plan.reconcile import (
    FINALIZER,
    Observed,
    Plan,
    plan,
    plan_deletion,
    plan_invalid,
    unschedulable_message,
)
from tritonllm.render import Rendered, RenderOptions, naming, render_all, validate
from tritonllm.render.pod import owner_references
from tritonllm.render.serving import is_multi_node
from tritonllm.runtime.ssh import generate_secret_data

log = logging.getLogger("tritonllm.reconcile")

RECONCILES = Counter("tritonllm_reconciles_total", "Reconcile passes", ["result"])
RECONCILE_SECONDS = Histogram("tritonllm_reconcile_duration_seconds", "Duration of a reconcile")
BUILDS = Counter("tritonllm_engine_builds_total", "Finished engine builds", ["result"])
BY_CONDITION = Gauge(
    "tritonllm_deployments", "Deployments by condition and status", ["condition", "status"]
)

Key = tuple[str, str]


class Reconciler:
    """Reconciles TritonLLMDeployments; shared by every kopf handler of one operator."""

    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._dirty: set[Key] = set()
        self._conditions: dict[Key, dict[str, str]] = {}
        self._engine_locks: dict[Key, asyncio.Lock] = {}

    # --- scheduling ------------------------------------------------------------------------

    def request(self, namespace: str, name: str) -> None:
        """Ask for a reconcile of one object (coalesced)."""
        key = (namespace, name)
        if key in self._running:
            self._dirty.add(key)
            return
        self._running[key] = asyncio.create_task(self._loop(key))

    async def _loop(self, key: Key) -> None:
        try:
            while True:
                self._dirty.discard(key)
                await self.reconcile(*key)
                if key not in self._dirty:
                    return
        finally:
            self._running.pop(key, None)

    async def wait_idle(self) -> None:
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    def forget(self, namespace: str, name: str) -> None:
        self._conditions.pop((namespace, name), None)
        self._publish_conditions()

    # --- one pass --------------------------------------------------------------------------

    async def reconcile(self, namespace: str, name: str) -> None:
        logger = logging.LoggerAdapter(log, {"namespace": namespace, "object": name})
        started = time.monotonic()
        try:
            body = await self.kube.get(c.API_VERSION, c.KIND, namespace, name)
            if body is None:
                self.forget(namespace, name)
                return
            if body["metadata"].get("deletionTimestamp"):
                self._conditions.pop((namespace, name), None)
                if FINALIZER in (body["metadata"].get("finalizers") or []):
                    await self._finalize(body, logger)
                return
            await self._reconcile(body, logger)
            RECONCILES.labels("ok").inc()
        except KubeError as exc:
            RECONCILES.labels("error").inc()
            logger.warning("reconcile failed: %s", exc)
        except Exception:
            RECONCILES.labels("error").inc()
            logger.exception("reconcile crashed")
        finally:
            RECONCILE_SECONDS.observe(time.monotonic() - started)

    async def _reconcile(self, body: dict[str, Any], logger: logging.LoggerAdapter[Any]) -> None:
        now = dt.datetime.now(dt.UTC)
        try:
            dep = parse_deployment(body)
            problems = validate(dep)
            if problems:
                raise InvalidDeployment(problems)
        except InvalidDeployment as exc:
            logger.warning("invalid spec: %s", exc)
            await self._execute(body, None, plan_invalid(body, exc, Observed(now=now)), logger)
            return
        key = naming.engine_key(dep)
        engine = await self.kube.get(c.API_VERSION, c.ENGINE_KIND, dep.namespace, key)
        workload_kind = (
            ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
            if is_multi_node(dep)
            else ("apps/v1", "Deployment")
        )
        workload = await self.kube.get(*workload_kind, dep.namespace, naming.serving_name(dep))
        uid = body["metadata"].get("uid", "")
        engine_status = (engine or {}).get("status") or {}
        opts = RenderOptions(
            tools_image=self.settings.tools_image,
            engine_cached=engine_status.get("state") == "Ready"
            and engine_status.get("builtFor") not in (None, uid),
            observed_replicas=((workload or {}).get("spec") or {}).get("replicas")
            if dep.spec.autoscaling
            else None,
        )
        dep = dep.model_copy(update={"metadata": dep.metadata.model_copy(update={"uid": uid})})
        rendered = render_all(dep, opts)
        obs = await self._observe(dep, rendered, engine, workload, now)
        async with self._engine_lock(dep.namespace, key):
            decision = plan(body, dep, rendered, obs)
            await self._execute(body, dep, decision, logger, rendered=rendered, engine=engine)

    def _engine_lock(self, namespace: str, key: str) -> asyncio.Lock:
        return self._engine_locks.setdefault((namespace, key), asyncio.Lock())

    async def _observe(
        self,
        dep: TritonLLMDeployment,
        r: Rendered,
        engine: dict[str, Any] | None,
        workload: dict[str, Any] | None,
        now: dt.datetime,
    ) -> Observed:
        ns, spec = dep.namespace, dep.spec
        get = self.kube.get
        store = await get("v1", "PersistentVolumeClaim", ns, spec.storage.claimName)
        secret_present = None
        if spec.model.credentials:
            secret = await get("v1", "Secret", ns, spec.model.credentials.secretName)
            secret_present = secret is not None and spec.model.credentials.key in (
                secret.get("data") or {}
            )
        gpu_nodes = None
        if spec.gpu.product and self.settings.check_gpu_nodes:
            nodes = await self.kube.list(
                "v1", "Node", None, labels={c.GPU_PRODUCT_LABEL: spec.gpu.product}
            )
            gpu_nodes = len(nodes)
        build_name = naming.build_job_name(r.engine_key, spec.runtime)
        build_job = await get("batch/v1", "Job", ns, build_name)
        repo_name = naming.repository_job_name(dep, r.repository_key)
        repo_job = await get("batch/v1", "Job", ns, repo_name)
        live: dict[tuple[str, str], dict[str, Any]] = {}
        for obj in r.objects:
            kind, name = obj["kind"], obj["metadata"]["name"]
            if kind in ("Job", "PersistentVolumeClaim"):
                continue
            if kind in ("Deployment", "LeaderWorkerSet"):
                found = workload
            else:
                found = await get(obj["apiVersion"], kind, ns, name)
            if found is not None:
                live[(kind, name)] = found
        for kind, api in (
            ("HorizontalPodAutoscaler", "autoscaling/v2"),
            ("PodDisruptionBudget", "policy/v1"),
        ):
            if not r.by_kind(kind):
                found = await get(api, kind, ns, naming.serving_name(dep))
                if found is not None:
                    live[(kind, naming.serving_name(dep))] = found
        revisions = await self.kube.list(
            "v1",
            "ConfigMap",
            ns,
            labels={c.LABEL_INSTANCE: dep.name, c.LABEL_COMPONENT: c.COMPONENT_REPOSITORY},
        )
        repo_revisions = sorted(
            {cm["metadata"]["labels"].get(c.LABEL_REPO_KEY, "") for cm in revisions} - {""}
        )

        async def pods_of(job: dict[str, Any] | None) -> list[dict[str, Any]]:
            if job is None or not any(
                x.get("type") == "Failed" and x.get("status") == "True"
                for x in (job.get("status") or {}).get("conditions") or []
            ):
                return []
            return await self.kube.list(
                "v1", "Pod", ns, labels={"job-name": job["metadata"]["name"]}
            )

        unschedulable = None
        desired, ready = (
            (workload or {}).get("spec", {}).get("replicas", 1),
            ((workload or {}).get("status") or {}).get("readyReplicas", 0),
        )
        if workload is not None and ready < desired:
            pods = await self.kube.list("v1", "Pod", ns, labels={c.LABEL_INSTANCE: dep.name})
            unschedulable = unschedulable_message(pods)
        mpi_secret_present = None
        if is_multi_node(dep):
            mpi_secret_present = (
                await get("v1", "Secret", ns, naming.mpi_secret_name(dep)) is not None
            )
        return Observed(
            mpi_secret_present=mpi_secret_present,
            unschedulable=unschedulable,
            now=now,
            store=store,
            secret_present=secret_present,
            gpu_nodes=gpu_nodes,
            engine=engine,
            build_job=build_job,
            build_pods=await pods_of(build_job),
            repo_job=repo_job,
            repo_pods=await pods_of(repo_job),
            workload=workload,
            live=live,
            repo_revisions=repo_revisions,
        )

    async def _execute(
        self,
        body: dict[str, Any],
        dep: TritonLLMDeployment | None,
        p: Plan,
        logger: logging.LoggerAdapter[Any],
        *,
        rendered: Rendered | None = None,
        engine: dict[str, Any] | None = None,
    ) -> None:
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if p.finalizers is not None:
            await self.kube.set_finalizers(body, p.finalizers)
        if p.create_mpi_secret and dep is not None:
            await self._create_mpi_secret(dep, body, logger)
        for obj in p.apply:
            try:
                await self.kube.apply(obj)
                logger.info("applied %s/%s", obj["kind"], obj["metadata"]["name"])
            except KubeError as exc:
                if exc.status == 422 and obj["kind"] == "Job":
                    # A Job's pod template is immutable: replace it (it is keyed by content, so
                    # this only happens after a tools-image or operator upgrade).
                    await self.kube.delete("batch/v1", "Job", ns, obj["metadata"]["name"])
                    continue
                raise
        for api_version, kind, obj_name in p.delete:
            if await self.kube.delete(api_version, kind, ns, obj_name):
                logger.info("deleted %s/%s", kind, obj_name)
        if p.scale and dep is not None:
            api_version, kind, replicas = p.scale
            await self.kube.scale(api_version, kind, ns, naming.serving_name(dep), replicas)
            logger.info("scaled %s to %d", kind, replicas)
        if p.engine_status is not None and rendered is not None:
            await self.kube.apply_status(
                {
                    "apiVersion": c.API_VERSION,
                    "kind": c.ENGINE_KIND,
                    "metadata": {"name": rendered.engine_key, "namespace": ns},
                    "status": p.engine_status,
                }
            )
        if p.build_result:
            BUILDS.labels(p.build_result).inc()
        if p.status is not None:
            await self.kube.apply_status(
                {
                    "apiVersion": c.API_VERSION,
                    "kind": c.KIND,
                    "metadata": {"name": name, "namespace": ns},
                    "status": p.status,
                }
            )
        for type_, reason, message in p.events:
            await self.kube.event(body, type_=type_, reason=reason, message=message)
            logger.info("event %s %s: %s", type_, reason, message)
        status = p.status if p.status is not None else (body.get("status") or {})
        self._conditions[(ns, name)] = {
            x["type"]: x["status"] for x in status.get("conditions") or []
        }
        self._publish_conditions()

    async def deployments_using(self, namespace: str, key: str) -> list[str]:
        """Names of the deployments whose status says they use engine `key`."""
        items = await self.kube.list(c.API_VERSION, c.KIND, namespace)
        return [
            i["metadata"]["name"]
            for i in items
            if ((i.get("status") or {}).get("engine") or {}).get("key") == key
        ]

    async def _finalize(self, body: dict[str, Any], logger: logging.LoggerAdapter[Any]) -> None:
        """engineRetention Delete: forget the engine if no other deployment uses it, then release
        the finalizer — in this pass, even if forgetting failed (deletion is never blocked)."""
        meta = body["metadata"]
        key = ((body.get("status") or {}).get("engine") or {}).get("key")
        users = await self.deployments_using(meta["namespace"], key) if key else []
        forget, finalizers = plan_deletion(body, users)
        if key and forget:
            try:
                await self.kube.delete(c.API_VERSION, c.ENGINE_KIND, meta["namespace"], key)
                logger.info("forgot engine %s (engineRetention Delete)", key)
            except KubeError as exc:
                logger.warning("could not forget engine %s: %s", key, exc)
        elif key:
            logger.info("engine %s kept: other deployments use it", key)
        await self.kube.set_finalizers(body, finalizers)

    async def _create_mpi_secret(
        self, dep: TritonLLMDeployment, body: dict[str, Any], logger: logging.LoggerAdapter[Any]
    ) -> None:
        """The per-deployment SSH keys of the multi-node MPI bootstrap (docs/in-pod.md): random,
        so created once and never re-applied; owned by the deployment."""
        data = await asyncio.to_thread(generate_secret_data, f"tritonllm-{dep.name}")
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": naming.mpi_secret_name(dep),
                "namespace": dep.namespace,
                "labels": naming.base_labels(dep, c.COMPONENT_SERVER),
                "ownerReferences": owner_references(dep),
            },
            "stringData": data,
        }
        await self.kube.create(secret)
        logger.info("created Secret/%s (MPI SSH keys)", naming.mpi_secret_name(dep))

    def _publish_conditions(self) -> None:
        counts: dict[tuple[str, str], int] = {
            (t, s): 0 for t in c.CONDITION_TYPES for s in ("True", "False", "Unknown")
        }
        for conds in self._conditions.values():
            for t, s in conds.items():
                counts[(t, s)] = counts.get((t, s), 0) + 1
        for (t, s), n in counts.items():
            BY_CONDITION.labels(t, s).set(n)
