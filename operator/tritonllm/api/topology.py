"""The parallel topology of a deployment: derived once from the spec, used everywhere.

World size = tensor x pipeline parallelism: one MPI rank per GPU. A world that fits one node
(world size <= gpu.perNode) runs in one pod with world-size GPUs, under a Deployment. A larger one
fills whole nodes: a LeaderWorkerSet whose groups have world/perNode pods of perNode GPUs each, one
pod per node; the leader's mpirun starts perNode ranks on every pod of its group. Both runtimes
share this layout: on one node the llmapi runtime runs one tritonserver (the LLM API spawns its
own ranks), in a group every rank runs under `trtllm-llmapi-launch` (tritonllm.triton.launch).

`TritonLLMDeploymentSpec.topology` derives it; the renderers, the planner and the handlers read it
from there, and the launch plan carries it into the pod (`to_wire`/`from_wire`), which never
derives it again. Standard library only: the in-pod entry points import this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

DEPLOYMENT = "Deployment"
LEADER_WORKER_SET = "LeaderWorkerSet"
# apiVersion of each serving workload kind.
WORKLOAD_API_VERSIONS = {DEPLOYMENT: "apps/v1", LEADER_WORKER_SET: "leaderworkerset.x-k8s.io/v1"}

# Wire names (camelCase, as in the plans) of the fields.
_WIRE = {
    "tensor": "tensorParallel",
    "pipeline": "pipelineParallel",
    "world_size": "worldSize",
    "gpus_per_pod": "gpusPerPod",
    "pods_per_group": "podsPerGroup",
    "ranks_per_node": "ranksPerNode",
    "workload_kind": "workloadKind",
}


def world_size(tensor: int, pipeline: int) -> int:
    """MPI ranks (GPUs) of one replica: tensor x pipeline parallelism (the only place it is
    computed: the spec, the topology, the fit planner and the in-pod engine check call this)."""
    return tensor * pipeline


@dataclasses.dataclass(frozen=True)
class Topology:
    """How one replica of a deployment is laid out on GPUs, pods and nodes."""

    tensor: int  # tp
    pipeline: int  # pp
    world_size: int  # tp x pp: MPI ranks (GPUs) per replica
    gpus_per_pod: int  # nvidia.com/gpu of each serving pod (and of the build Job)
    pods_per_group: int  # pods (= nodes) per replica: 1, or the LeaderWorkerSet group size
    ranks_per_node: int  # MPI slots of each pod (mpirun's hostfile)
    workload_kind: str  # Deployment or LeaderWorkerSet

    @classmethod
    def derive(cls, *, tensor: int, pipeline: int, gpus_per_node: int) -> Topology:
        world = world_size(tensor, pipeline)
        multi = world > gpus_per_node
        pods = world // gpus_per_node if multi else 1
        gpus = gpus_per_node if multi else world
        kind = LEADER_WORKER_SET if multi else DEPLOYMENT
        return cls(tensor, pipeline, world, gpus, pods, gpus, kind)

    @property
    def multi_node(self) -> bool:
        return self.pods_per_group > 1

    @property
    def workload_api_version(self) -> str:
        return WORKLOAD_API_VERSIONS[self.workload_kind]

    def to_wire(self) -> dict[str, Any]:
        return {wire: getattr(self, field) for field, wire in _WIRE.items()}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Topology:
        """The topology a plan carries (its other fields are ignored)."""
        counts = {f: int(data[w]) for f, w in _WIRE.items() if f != "workload_kind"}
        kind = str(data[_WIRE["workload_kind"]])
        if kind not in WORKLOAD_API_VERSIONS:
            raise ValueError(f"unknown workload kind {kind!r}")
        return cls(workload_kind=kind, **counts)
