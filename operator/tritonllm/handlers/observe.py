"""Read the world of one deployment, from the watch caches: everything the planner's Observed
holds. No API request (tritonllm.handlers.cache)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.plan.observed import Observed, job_failed, unschedulable_message
from tritonllm.render import Rendered, naming

from .cache import Cache

Obj = dict[str, Any]


def observe(
    cache: Cache,
    settings: OperatorSettings,
    dep: TritonLLMDeployment,
    r: Rendered,
    *,
    engine: Obj | None,
    workload: Obj | None,
    now: dt.datetime,
) -> Observed:
    ns, spec = dep.namespace, dep.spec
    build_job = cache.get("Job", ns, r.build_job.name)
    repo_job = cache.get("Job", ns, r.repository_job.name)
    cred = spec.model.credentials
    keys = cache.secret_keys(ns, cred.secretName) if cred else None
    product = spec.gpu.product if settings.check_gpu_nodes else None
    multi = spec.topology.multi_node
    return Observed(
        now=now,
        store=cache.get("PersistentVolumeClaim", ns, spec.storage.claimName),
        secret_present=None if cred is None else keys is not None and cred.key in keys,
        gpu_nodes=cache.gpu_nodes(product) if product else None,
        engine=engine,
        build_job=build_job,
        build_pods=cache.failed_pods(ns, r.build_job.name) if job_failed(build_job) else [],
        repo_job=repo_job,
        repo_pods=cache.failed_pods(ns, r.repository_job.name) if job_failed(repo_job) else [],
        workload=workload,
        live=_live(cache, r, workload),
        repo_revisions=cache.repository_revisions(ns, dep.name),
        mpi_secret_present=cache.get("Secret", ns, naming.mpi_secret_name(dep)) is not None
        if multi
        else None,
        unschedulable=_unschedulable(cache, dep, workload),
    )


def _live(cache: Cache, r: Rendered, workload: Obj | None) -> dict[tuple[str, str], Obj]:
    """Live children by (kind, name): what is rendered, plus an HPA/PDB that should go."""
    refs = [o.ref for o in r.objects if o.kind not in ("Job", "PersistentVolumeClaim")]
    for kind, current in (
        ("HorizontalPodAutoscaler", r.autoscaler),
        ("PodDisruptionBudget", r.disruption_budget),
    ):
        if current is None:
            refs.append((kind, r.name))
    live: dict[tuple[str, str], Obj] = {}
    for kind, name in refs:
        found = workload if kind == r.workload.kind else cache.get(kind, r.namespace, name)
        if found is not None:
            live[(kind, name)] = found
    return live


def _unschedulable(cache: Cache, dep: TritonLLMDeployment, workload: Obj | None) -> str | None:
    if workload is None:
        return None
    desired = (workload.get("spec") or {}).get("replicas", 1)
    ready = (workload.get("status") or {}).get("readyReplicas", 0)
    if ready >= desired:
        return None
    return unschedulable_message(cache.unschedulable_pods(dep.namespace, dep.name))



