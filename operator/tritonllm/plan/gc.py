"""Garbage: children that no longer belong to the spec.

Kubernetes collects the children of a deleted deployment (owner references); this step removes
the ones a live deployment stopped needing: an HPA, PDB or NetworkPolicy switched off, and
repository revisions other than the target and the one the workload still serves (kept for the
rollout).
"""

from __future__ import annotations

from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import Rendered, autoscaling, naming

from .observed import Observed
from .writes import Decision


def optional_refs(dep: TritonLLMDeployment) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every child a spec may switch off: HPA, ScaledObject, PDB,
    NetworkPolicy, PodMonitor, and the scale-to-zero activator's ConfigMap, backend Service and
    Deployment."""
    name = naming.serving_name(dep)
    activator, backend = autoscaling.activator_name(dep), autoscaling.backend_service_name(dep)
    return [
        ("autoscaling/v2", "HorizontalPodAutoscaler", name),
        (autoscaling.KEDA_API_VERSION, "ScaledObject", name),
        ("policy/v1", "PodDisruptionBudget", name),
        ("networking.k8s.io/v1", "NetworkPolicy", name),
        (autoscaling.POD_MONITOR_API_VERSION, "PodMonitor", name),
        ("v1", "ConfigMap", activator),
        ("v1", "Service", backend),
        ("apps/v1", "Deployment", activator),
    ]


def collect_garbage(
    p: Decision,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    obs: Observed,
    served_repo: str | None,
) -> None:
    wanted = {o.ref for o in rendered.objects}
    for api_version, kind, name in optional_refs(dep):
        if (kind, name) in obs.live and (kind, name) not in wanted:
            p.delete.append((api_version, kind, name))
    keep = {rendered.repository_key, served_repo}
    for rev in obs.repo_revisions:
        if rev not in keep:
            p.delete.append(("v1", "ConfigMap", naming.plan_configmap_name(dep, rev)))
            p.delete.append(("batch/v1", "Job", naming.repository_job_name(dep, rev)))
