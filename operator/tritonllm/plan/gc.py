"""Garbage: children that no longer belong to the spec.

Kubernetes collects the children of a deleted deployment (owner references); this step removes
the ones a live deployment stopped needing: an HPA, PDB or NetworkPolicy switched off, and
repository revisions other than the target and the one the workload still serves (kept for the
rollout).
"""

from __future__ import annotations

from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import Rendered, naming

from .observed import Observed
from .writes import Plan


def collect_garbage(
    p: Plan, dep: TritonLLMDeployment, rendered: Rendered, obs: Observed, served_repo: str | None
) -> None:
    name = naming.serving_name(dep)
    for kind, api_version, current in (
        ("HorizontalPodAutoscaler", "autoscaling/v2", rendered.autoscaler),
        ("PodDisruptionBudget", "policy/v1", rendered.disruption_budget),
        ("NetworkPolicy", "networking.k8s.io/v1", rendered.network_policy),
    ):
        if (kind, name) in obs.live and current is None:
            p.delete.append((api_version, kind, name))
    keep = {rendered.repository_key, served_repo}
    for rev in obs.repo_revisions:
        if rev not in keep:
            p.delete.append(("v1", "ConfigMap", naming.plan_configmap_name(dep, rev)))
            p.delete.append(("batch/v1", "Job", naming.repository_job_name(dep, rev)))
