"""Carry out a Plan: the writes, in a fixed order, then the status and the Events.

Order: finalizers, the MPI SSH Secret, applies (in apply order), deletions, scale, the engine
record's status, the deployment's status, Events. Everything sent is a Manifest from
tritonllm.render; what the API server returns is remembered by the cache until the watches
deliver it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.k8s.client import Kube, KubeError
from tritonllm.plan.reconcile import Plan
from tritonllm.render import naming
from tritonllm.render.events import event
from tritonllm.render.mpi import mpi_secret, ssh_key_pairs
from tritonllm.render.status import status_object

from .cache import Cache
from .metrics import BUILDS

Logger = logging.LoggerAdapter[Any]


async def execute(
    kube: Kube,
    cache: Cache,
    body: Mapping[str, Any],
    dep: TritonLLMDeployment | None,
    p: Plan,
    logger: Logger,
    *,
    engine_key: str | None = None,
) -> None:
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    if p.finalizers is not None:
        await kube.set_finalizers(body, p.finalizers)
    if p.create_mpi_secret and dep is not None:
        await _create_mpi_secret(kube, dep, logger)
    await _apply(kube, cache, p, ns, logger)
    for api_version, kind, obj_name in p.delete:
        if await kube.delete(api_version, kind, ns, obj_name):
            logger.info("deleted %s/%s", kind, obj_name)
    if p.scale and dep is not None:
        api_version, kind, replicas = p.scale
        await kube.scale(api_version, kind, ns, naming.serving_name(dep), replicas)
        logger.info("scaled %s to %d", kind, replicas)
    if p.engine_status is not None and engine_key is not None:
        obj = status_object(c.ENGINE_KIND, ns, engine_key, p.engine_status)
        cache.remember(await kube.apply_status(obj))
    if p.build_result:
        BUILDS.labels(p.build_result).inc()
    if p.status is not None:
        cache.remember(await kube.apply_status(status_object(c.KIND, ns, name, p.status)))
    now = dt.datetime.now(dt.UTC)
    for type_, reason, message in p.events:
        await kube.post_event(event(body, type_=type_, reason=reason, message=message, now=now))
        logger.info("event %s %s: %s", type_, reason, message)


async def _apply(kube: Kube, cache: Cache, p: Plan, ns: str, logger: Logger) -> None:
    for obj in p.apply:
        try:
            cache.remember(await kube.apply(obj))
            logger.info("applied %s/%s", obj.kind, obj.name)
        except KubeError as exc:
            if exc.status == 422 and obj.kind == "Job":
                # A Job's pod template is immutable: replace it (it is keyed by content, so
                # this only happens after a tools-image or operator upgrade).
                await kube.delete("batch/v1", "Job", ns, obj.name)
                continue
            raise


async def _create_mpi_secret(kube: Kube, dep: TritonLLMDeployment, logger: Logger) -> None:
    """The per-deployment SSH keys of the multi-node MPI bootstrap (docs/in-pod.md)."""
    await kube.create(mpi_secret(dep, ssh_key_pairs(f"tritonllm-{dep.name}")))
    logger.info("created Secret/%s (MPI SSH keys)", naming.mpi_secret_name(dep))
