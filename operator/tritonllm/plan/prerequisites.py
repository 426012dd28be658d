"""The store and the prerequisites the schema cannot see (the token Secret, GPU nodes).

The model-store claim is created when the spec asks for it (once: never updated or deleted by the
operator afterwards). A missing claim, Secret or GPU product blocks every later step: the planner
reports it as Degraded, names the field and the fix, and touches nothing already serving.
"""

from __future__ import annotations

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import Rendered, autoscaling

from .conditions import Cond
from .observed import Observed
from .writes import Decision


def prerequisites_step(
    p: Decision, dep: TritonLLMDeployment, rendered: Rendered, obs: Observed
) -> Cond | None:
    """Create the store if asked; the Degraded condition of the first missing prerequisite."""
    spec = dep.spec
    blocked: Cond | None = None
    if rendered.store is not None and obs.store is None:
        p.apply.append(rendered.store)  # created once; never updated or deleted by us
    elif obs.store is None:
        blocked = Cond(
            c.COND_DEGRADED,
            "True",
            r.STORE_MISSING,
            f"PersistentVolumeClaim {spec.storage.claimName} (spec.storage.claimName) does not "
            f"exist in namespace {dep.namespace}: create it, or set spec.storage.create to have "
            "the operator create it",
        )
    cred = spec.model.credentials
    if obs.secret_present is False and cred:
        blocked = blocked or Cond(
            c.COND_DEGRADED,
            "True",
            r.SECRET_MISSING,
            f"Secret {cred.secretName} with key {cred.key} (spec.model.credentials) is missing in "
            f"namespace {dep.namespace}: create it with the Hugging Face token",
        )
    blocked = blocked or autoscaler_missing(dep, rendered, obs)
    if obs.gpu_nodes == 0:
        blocked = blocked or Cond(
            c.COND_DEGRADED,
            "True",
            r.NO_MATCHING_NODES,
            f"no node has {c.GPU_PRODUCT_LABEL}={spec.gpu.product} (spec.gpu.product): check the "
            f"value against `kubectl get nodes -L {c.GPU_PRODUCT_LABEL}`",
        )
    return blocked


def autoscaler_missing(dep: TritonLLMDeployment, rendered: Rendered, obs: Observed) -> Cond | None:
    """autoscaler KEDA needs KEDA's API and a Prometheus to query."""
    scaled = rendered.scaled_object
    if scaled is None:
        return None
    if not obs.keda_served:
        return Cond(
            c.COND_DEGRADED, "True", r.AUTOSCALER_MISSING,
            "spec.autoscaling.autoscaler is KEDA but the cluster has no ScaledObject kind "
            "(CRD scaledobjects.keda.sh): install KEDA (docs/autoscaling.md), or set "
            "autoscaler: HPA",
        )
    if autoscaling.lacks_prometheus(scaled):
        return Cond(
            c.COND_DEGRADED, "True", r.AUTOSCALER_MISSING,
            "spec.autoscaling.prometheusUrl is unset and the operator has no default "
            "(TRITONLLM_PROMETHEUS_URL, chart value settings.prometheusUrl): KEDA needs the URL "
            "of the Prometheus that scrapes the serving pods",
        )
    return None
