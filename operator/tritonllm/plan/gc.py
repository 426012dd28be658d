"""Garbage: children that no longer belong to the spec.

Kubernetes collects the children of a deleted deployment (owner references); this step removes
the ones a live deployment stopped needing: an HPA, PDB or NetworkPolicy switched off, and
repository revisions other than the target and the one the workload still serves (kept for the
rollout).
"""

from __future__ import annotations

from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import ObjectRef, Rendered, autoscaling, naming

from .observed import Observed
from .writes import Decision


def optional_refs(dep: TritonLLMDeployment) -> list[ObjectRef]:
    """Every child a spec may switch off: HPA, ScaledObject, PDB,
    NetworkPolicy, PodMonitor, and the scale-to-zero activator's ConfigMap, backend Service,
    NetworkPolicy and Deployment."""
    ns, name = dep.namespace, naming.serving_name(dep)
    activator, backend = autoscaling.activator_name(dep), autoscaling.backend_service_name(dep)
    return [
        ObjectRef("autoscaling/v2", "HorizontalPodAutoscaler", ns, name),
        ObjectRef(autoscaling.KEDA_API_VERSION, "ScaledObject", ns, name),
        ObjectRef("policy/v1", "PodDisruptionBudget", ns, name),
        ObjectRef("networking.k8s.io/v1", "NetworkPolicy", ns, name),
        ObjectRef(autoscaling.POD_MONITOR_API_VERSION, "PodMonitor", ns, name),
        ObjectRef("v1", "ConfigMap", ns, activator),
        ObjectRef("v1", "Service", ns, backend),
        ObjectRef("networking.k8s.io/v1", "NetworkPolicy", ns, activator),
        ObjectRef("apps/v1", "Deployment", ns, activator),
    ]


def collect_garbage(
    p: Decision,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    obs: Observed,
    served_repo: str | None,
) -> None:
    wanted = {o.ref for o in rendered.objects}
    for ref in optional_refs(dep):
        if ref in obs.live and ref not in wanted:
            p.delete.append(ref)
    ns, keep = dep.namespace, {rendered.repository_key, served_repo}
    for rev in obs.repo_revisions:
        if rev not in keep:
            p.delete.append(ObjectRef("v1", "ConfigMap", ns, naming.plan_configmap_name(dep, rev)))
            # The content key's Job: deleted by the deployment that created it (another
            # deployment still waiting for it creates it again), left alone by the others.
            job = ObjectRef("batch/v1", "Job", ns, naming.repository_job_name(dep, rev))
            p.delete_own.append(job)
