"""Pure rendering: a TritonLLMDeployment (plus observed facts) to every Kubernetes object and every
model-repository file it needs. No I/O, no cluster: `tritonllm render` and the operator share it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import FieldError, TritonLLMDeployment
from tritonllm.triton.build import build_gpus, build_plan, download_plan, download_step
from tritonllm.triton.launch import LaunchSpec, mpirun_argv
from tritonllm.triton.repository import extra_parameter_problems, render_repository

from . import jobs, naming, serving, store
from .manifest import Manifest
from .pod import RenderOptions

__all__ = ["Manifest", "RenderOptions", "Rendered", "render_all", "validate"]


def validate(dep: TritonLLMDeployment) -> list[FieldError]:
    """Problems only the renderers can see (on top of parse_deployment's): fields whose values
    depend on the image's template set, such as serving.extraParameters."""
    return extra_parameter_problems(dep)


@dataclasses.dataclass(frozen=True)
class Rendered:
    """Everything one deployment produces."""

    name: str
    namespace: str
    engine_key: str
    repository_key: str
    repository_dir: str
    engine_dir: str
    # The Kubernetes objects, by role (`objects` lists them in apply order).
    store: Manifest | None  # the model-store claim, when the spec asks to create it
    build_configmap: Manifest  # the build (or, for llmapi, download) plan
    build_job: Manifest  # the engine-build (or download) Job, shared by its engine key
    repository_configmap: Manifest  # the repository files and the repository/launch plans
    repository_job: Manifest
    service: Manifest
    workload: Manifest  # Deployment or LeaderWorkerSet
    autoscaler: Manifest | None  # HorizontalPodAutoscaler
    disruption_budget: Manifest | None  # PodDisruptionBudget
    # The model repository: relative path -> file content.
    repository: dict[str, str]
    build_plan: dict[str, Any]
    launch_plan: dict[str, Any]
    endpoint: str
    selector: str

    @property
    def objects(self) -> list[Manifest]:
        """Every object, in apply order."""
        ordered = (
            self.store,
            self.build_configmap,
            self.build_job,
            self.repository_configmap,
            self.repository_job,
            self.service,
            self.workload,
            self.autoscaler,
            self.disruption_budget,
        )
        return [o for o in ordered if o is not None]

    def by_kind(self, kind: str) -> list[Manifest]:
        return [o for o in self.objects if o.kind == kind]

    def one(self, kind: str) -> Manifest:
        found = self.by_kind(kind)
        if len(found) != 1:
            raise LookupError(f"expected one {kind}, found {len(found)}")
        return found[0]


def launch_plan(dep: TritonLLMDeployment, key: str, repo_dir: str) -> dict[str, Any]:
    """What `tritonllm launch` executes: the checks to make and the exact command."""
    spec = dep.spec
    multi = serving.is_multi_node(dep)
    launch = LaunchSpec(
        world_size=spec.world_size,
        model_repository=repo_dir,
        single_process=spec.runtime == "llmapi",
    )
    return {
        "version": 1,
        "runtime": spec.runtime,
        "engineKey": key,
        "engineDir": naming.engine_dir(key),
        "modelRepository": repo_dir,
        "trtllmVersion": str(dep.trtllm_version),
        "tensorParallel": spec.engine.parallelism.tensor,
        "pipelineParallel": spec.engine.parallelism.pipeline,
        "worldSize": spec.world_size,
        "gpusPerPod": serving.gpus_per_pod(dep),
        "nodes": serving.nodes_per_replica(dep),
        "ports": {
            "http": launch.http_port,
            "grpc": launch.grpc_port,
            "metrics": launch.metrics_port,
        },
        # Single node: the full command. Multi node: the leader adds --host from its group.
        "argv": mpirun_argv(launch),
        "ssh": {"port": 2222, "keyDir": serving.MPI_SSH_MOUNT} if multi else None,
    }


def render_all(dep: TritonLLMDeployment, opts: RenderOptions | None = None) -> Rendered:
    opts = opts or RenderOptions()
    spec = dep.spec
    key = naming.engine_key(dep)
    e_dir = naming.engine_dir(key)
    weights = naming.weights_dir(dep)
    if spec.runtime == "llmapi":
        bplan = download_plan(spec, model_key=key, weights_dir=weights)
        gpus = 0
    else:
        bplan = build_plan(
            spec,
            dep.trtllm_version,
            engine_key=key,
            weights_dir=weights,
            checkpoint_dir=naming.checkpoint_dir(key),
            engine_dir=e_dir,
        )
        gpus = build_gpus(spec)
    tok = naming.tokenizer_dir(dep)
    if spec.model.tokenizer.source:
        bplan["steps"].insert(
            1,
            download_step(
                spec,
                weights_dir=tok,
                source=spec.model.tokenizer.source,
                revision="main",
                name="download-tokenizer",
            ),
        )

    repo_files = render_repository(dep, engine_dir=e_dir, tokenizer_dir=tok)
    # The repository key covers the files and what the launch plan depends on.
    repo_key = naming.repository_key(
        {**repo_files, "_launch": json.dumps(launch_plan(dep, key, "<repo>"), sort_keys=True)}
    )
    repo_dir = naming.repository_dir(dep, repo_key)
    lplan = launch_plan(dep, key, repo_dir)
    rplan = {
        "version": 1,
        "engineKey": key,
        "steps": [
            {
                "name": "repository",
                "from": f"{c.PLAN_MOUNT}/repo",
                "to": repo_dir,
                "engineDir": e_dir if spec.runtime == "engine" else None,
                "weightsDir": weights,
                "expect": {
                    "tensorParallel": spec.engine.parallelism.tensor,
                    "pipelineParallel": spec.engine.parallelism.pipeline,
                    "trtllmVersion": str(dep.trtllm_version),
                },
            }
        ],
    }
    cm_files = {
        **repo_files,
        jobs.LAUNCH_PLAN_KEY: json.dumps(lplan, indent=2, sort_keys=True),
        jobs.REPOSITORY_PLAN_KEY: json.dumps(rplan, indent=2, sort_keys=True),
    }

    workload = serving.leader_worker_set if serving.is_multi_node(dep) else serving.deployment
    return Rendered(
        name=dep.name,
        namespace=dep.namespace,
        engine_key=key,
        repository_key=repo_key,
        repository_dir=repo_dir,
        engine_dir=e_dir,
        store=_manifest(store.pvc(dep)),
        build_configmap=Manifest.of(jobs.build_configmap(dep, key, bplan)),
        build_job=Manifest.of(jobs.build_job(dep, key, gpus, opts)),
        repository_configmap=Manifest.of(jobs.plan_configmap(dep, repo_key, cm_files)),
        repository_job=Manifest.of(jobs.repository_job(dep, repo_key, sorted(repo_files), opts)),
        service=Manifest.of(serving.service(dep)),
        workload=Manifest.of(workload(dep, repo_key, key, opts)),
        autoscaler=_manifest(serving.hpa(dep)),
        disruption_budget=_manifest(serving.pod_disruption_budget(dep)),
        repository=repo_files,
        build_plan=bplan,
        launch_plan=lplan,
        endpoint=serving.endpoint(dep, opts),
        selector=naming.selector_string(dep),
    )


def _manifest(body: dict[str, Any] | None) -> Manifest | None:
    return None if body is None else Manifest.of(body)
