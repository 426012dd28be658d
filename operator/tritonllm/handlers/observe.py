"""Read the world of one deployment: everything the planner's Observed holds."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.k8s.client import Kube
from tritonllm.plan.observed import Observed, job_failed, unschedulable_message
from tritonllm.render import Rendered, naming

Obj = dict[str, Any]


async def observe(
    kube: Kube,
    settings: OperatorSettings,
    dep: TritonLLMDeployment,
    r: Rendered,
    *,
    engine: Obj | None,
    workload: Obj | None,
    now: dt.datetime,
) -> Observed:
    ns, spec = dep.namespace, dep.spec
    build_job = await kube.get("batch/v1", "Job", ns, r.build_job.name)
    repo_job = await kube.get("batch/v1", "Job", ns, r.repository_job.name)
    return Observed(
        now=now,
        store=await kube.get("v1", "PersistentVolumeClaim", ns, spec.storage.claimName),
        secret_present=await _secret_present(kube, dep),
        gpu_nodes=await _gpu_nodes(kube, settings, dep),
        engine=engine,
        build_job=build_job,
        build_pods=await _failed_pods(kube, ns, build_job),
        repo_job=repo_job,
        repo_pods=await _failed_pods(kube, ns, repo_job),
        workload=workload,
        live=await _live(kube, r, workload),
        repo_revisions=await _revisions(kube, dep),
        mpi_secret_present=await _mpi_secret_present(kube, dep, r),
        unschedulable=await _unschedulable(kube, dep, workload),
    )


async def _secret_present(kube: Kube, dep: TritonLLMDeployment) -> bool | None:
    cred = dep.spec.model.credentials
    if not cred:
        return None
    secret = await kube.get("v1", "Secret", dep.namespace, cred.secretName)
    return secret is not None and cred.key in (secret.get("data") or {})


async def _gpu_nodes(
    kube: Kube, settings: OperatorSettings, dep: TritonLLMDeployment
) -> int | None:
    product = dep.spec.gpu.product
    if not (product and settings.check_gpu_nodes):
        return None
    return len(await kube.list("v1", "Node", None, labels={c.GPU_PRODUCT_LABEL: product}))


async def _live(kube: Kube, r: Rendered, workload: Obj | None) -> dict[tuple[str, str], Obj]:
    """Live children by (kind, name): what is rendered, plus an HPA/PDB that should go."""
    live: dict[tuple[str, str], Obj] = {}
    wanted = [
        (o.api_version, o.kind, o.name)
        for o in r.objects
        if o.kind not in ("Job", "PersistentVolumeClaim")
    ]
    for api_version, kind, absent in (
        ("autoscaling/v2", "HorizontalPodAutoscaler", r.autoscaler),
        ("policy/v1", "PodDisruptionBudget", r.disruption_budget),
    ):
        if absent is None:
            wanted.append((api_version, kind, r.name))
    for api_version, kind, name in wanted:
        if kind == r.workload.kind:
            found = workload
        else:
            found = await kube.get(api_version, kind, r.namespace, name)
        if found is not None:
            live[(kind, name)] = found
    return live


async def _revisions(kube: Kube, dep: TritonLLMDeployment) -> list[str]:
    labels = {c.LABEL_INSTANCE: dep.name, c.LABEL_COMPONENT: c.COMPONENT_REPOSITORY}
    configmaps = await kube.list("v1", "ConfigMap", dep.namespace, labels=labels)
    return sorted({cm["metadata"]["labels"].get(c.LABEL_REPO_KEY, "") for cm in configmaps} - {""})


async def _failed_pods(kube: Kube, ns: str, job: Obj | None) -> list[Obj]:
    """The pods of a failed Job (their termination messages say why)."""
    if job is None or not job_failed(job):
        return []
    return await kube.list("v1", "Pod", ns, labels={"job-name": job["metadata"]["name"]})


async def _unschedulable(kube: Kube, dep: TritonLLMDeployment, workload: Obj | None) -> str | None:
    if workload is None:
        return None
    desired = (workload.get("spec") or {}).get("replicas", 1)
    ready = (workload.get("status") or {}).get("readyReplicas", 0)
    if ready >= desired:
        return None
    pods = await kube.list("v1", "Pod", dep.namespace, labels={c.LABEL_INSTANCE: dep.name})
    return unschedulable_message(pods)


async def _mpi_secret_present(kube: Kube, dep: TritonLLMDeployment, r: Rendered) -> bool | None:
    if r.workload.kind != "LeaderWorkerSet":
        return None
    return await kube.get("v1", "Secret", dep.namespace, naming.mpi_secret_name(dep)) is not None
