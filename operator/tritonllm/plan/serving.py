"""The serving step: the Service, and the workload switched to the new repository only once it is
ready, so the old engine keeps serving during a rebuild (rolling update with maxUnavailable 0).

The first workload of a deployment (nothing serves yet, nothing to protect) is created as soon as
the repository Job's pod exists, not when the Job completes: its pods are scheduled, pull and
start while the Job writes, and `tritonllm launch` waits for the repository directory, which the
Job renames into place only once it is complete, so no pod reads half a repository. Not sooner:
under a tight pod quota, serving pods created first could take the places the Job's pod needs.

Until then, a replicas-only change scales what is running (never when an autoscaler owns the
count). (The multi-node MPI SSH Secret is created earlier, on the first pass: plan.reconcile.)
"""

from __future__ import annotations

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import Rendered

from .conditions import Cond
from .observed import Obj, Observed, WorkloadObs
from .rollout import Gate, remove_verification, rollout_gate
from .writes import Decision, want


def serving_step(
    p: Decision,
    dep: TritonLLMDeployment,
    rendered: Rendered,
    obs: Observed,
    *,
    repository_ready: bool,
    blocked: bool,
    rollout: Obj | None,
    repository_writing: bool = False,
) -> tuple[WorkloadObs, Gate]:
    """Service, NetworkPolicy, workload, HPA and PDB writes (or a scale); returns the live
    workload's counts and the rollout gate's decision (tritonllm.plan.rollout; `rollout` is
    status.rollout; `repository_writing`: the repository Job's pod exists). The NetworkPolicy
    goes first, so no serving pod runs without it."""
    if not blocked:
        # The activator first: the Service may switch to its pods (scale to zero).
        for part in rendered.activator:
            want(p, obs, part)
        want(p, obs, rendered.service)
        if rendered.network_policy is not None:
            want(p, obs, rendered.network_policy)
    gate = Gate(open=False)
    if repository_ready and not blocked:
        gate = rollout_gate(p, dep, rendered, obs, rollout)
    elif repository_writing and not blocked and obs.workload is None:
        gate = Gate(open=True)  # the first workload: its pods start while the Job writes
    else:
        remove_verification(p, dep, obs)
    if gate.open:
        want(p, obs, rendered.workload)
        extras = (rendered.autoscaler, rendered.scaled_object, rendered.disruption_budget,
                  rendered.pod_monitor)
        for extra in extras:
            if extra is not None:
                want(p, obs, extra)
    elif obs.workload is not None and dep.spec.autoscaling is None:
        desired = int((obs.workload.get("spec") or {}).get("replicas", 1))
        if desired != dep.spec.serving.replicas:
            wl = rendered.workload
            p.scale = (wl.ref, dep.spec.serving.replicas)
    return WorkloadObs.of(obs.workload), gate


def available(workload: WorkloadObs, endpoint: str) -> Cond:
    """Available: at least one replica passes its readiness probe."""
    if workload.ready > 0:
        message = f"{workload.ready} of {workload.desired} replicas ready at {endpoint}"
        return Cond(c.COND_AVAILABLE, "True", r.SERVING, message)
    if not workload.exists:
        message = "the serving workload is created once the repository Job's pod exists"
        return Cond(c.COND_AVAILABLE, "False", r.NOT_DEPLOYED, message)
    message = "no serving replica has passed its readiness probe yet"
    return Cond(c.COND_AVAILABLE, "False", r.NO_READY_REPLICAS, message)
