"""status.scaling: what the autoscaler asks for, and whether the GPU nodes can give it.

A replica is `nodes` pods of `gpu.perNode` GPUs each (one pod when single node). The capacity is
counted from the schedulable nodes labelled with spec.gpu.product (their allocatable GPUs, from
the node watch the operator already has), as if nothing else ran on them; what other workloads
take shows up as the scheduler's message for a Pending serving pod, which is quoted. Both are
said before the autoscaler hits them: maxReplicas above the capacity is reported at once, not
when a replica stays Pending.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.status import ScalingStatus

from .observed import Observed, WorkloadObs


def replica_capacity(gpus_per_node: Sequence[int], gpus_per_pod: int, pods_per_group: int) -> int:
    """Whole replicas that nodes with these allocatable GPU counts hold when empty."""
    pods = sum(gpus // gpus_per_pod for gpus in gpus_per_node) if gpus_per_pod else 0
    return pods // pods_per_group


def scaling_status(
    dep: TritonLLMDeployment, workload: WorkloadObs, obs: Observed
) -> ScalingStatus | None:
    a = dep.spec.autoscaling
    if a is None:
        return None
    topology = dep.spec.topology
    pending = f"a serving pod cannot be scheduled: {obs.unschedulable}" if obs.unschedulable \
        else None
    if obs.gpu_capacity is None:
        return ScalingStatus(autoscaler=a.autoscaler, desired=workload.desired,
                             ready=workload.ready, limitedBy=pending)
    capacity = replica_capacity(obs.gpu_capacity, topology.gpus_per_pod, topology.pods_per_group)
    limited = pending
    if limited is None and a.maxReplicas > capacity:
        per_replica = topology.gpus_per_pod * topology.pods_per_group
        limited = (
            f"autoscaling.maxReplicas {a.maxReplicas} > {capacity} replica(s) of "
            f"{per_replica} GPU(s) that the {len(obs.gpu_capacity)} schedulable node(s) "
            f"labelled {dep.spec.gpu.product} hold ({sum(obs.gpu_capacity)} GPUs): replicas "
            f"above {capacity} stay Pending until GPU nodes are added"
        )
    return ScalingStatus(
        autoscaler=a.autoscaler,
        desired=workload.desired,
        ready=workload.ready,
        capacity=capacity,
        possibleNow=0 if pending else max(capacity - workload.desired, 0),
        limitedBy=limited,
    )
