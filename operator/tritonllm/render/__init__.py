"""Pure rendering: a TritonLLMDeployment (plus observed facts) to every Kubernetes object and every
model-repository file it needs. No I/O, no cluster: `tritonllm render` and the operator share it.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Any

from tritonllm.api.deployment import FieldError, TritonLLMDeployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.api.status import OpenAIStatus
from tritonllm.triton.repository import extra_parameter_problems, render_repository

from . import autoscaling, frontend, jobs, naming, plans, serving, store
from .manifest import Manifest, ObjectRef
from .pod import RenderOptions

__all__ = [
    "Manifest",
    "ObjectRef",
    "RenderOptions",
    "Rendered",
    "render_all",
    "rendered_problems",
    "validate",
]

# The API server refuses a ConfigMap whose data exceeds 1 MiB (and etcd any object above about
# 1.5 MiB): a rendered object above this is reported, never sent.
MAX_OBJECT_BYTES = 1 << 20


def validate(dep: TritonLLMDeployment, settings: OperatorSettings | None = None
             ) -> list[FieldError]:
    """Problems only the renderers can see (on top of parse_deployment's): fields whose values
    depend on the image's template set, such as serving.extraParameters; with the operator's
    settings, also what they forbid (a Prometheus not on their allow-list)."""
    problems = extra_parameter_problems(dep) + frontend.problems(dep)
    if settings is not None:
        problems += autoscaling.prometheus_url_problems(dep, settings)
    return problems


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
    autoscaler: Manifest | None  # HorizontalPodAutoscaler (autoscaling.autoscaler HPA)
    scaled_object: Manifest | None  # KEDA ScaledObject (autoscaling.autoscaler KEDA)
    # Scale to zero: the activator's ConfigMap, backend Service, NetworkPolicy (with
    # networkPolicy.enabled) and Deployment (else empty).
    activator: tuple[Manifest, ...]
    pod_monitor: Manifest | None  # when the cluster serves the Prometheus operator's PodMonitor
    disruption_budget: Manifest | None  # PodDisruptionBudget
    network_policy: Manifest | None  # NetworkPolicy of the serving pods
    # The verification workload of the rendered revision (spec.rollout Verified; else None): not
    # in `objects`, the planner applies it only while a change is verified.
    verify_workload: Manifest | None
    # The model repository: relative path -> file content.
    repository: dict[str, str]
    build_plan: dict[str, Any]
    launch_plan: dict[str, Any]
    endpoint: str
    selector: str
    # Whether the serving pods run the OpenAI frontend, its base URL, or why not (status.openai).
    openai: OpenAIStatus

    @property
    def objects(self) -> list[Manifest]:
        """Every object, in apply order."""
        ordered = (
            self.store,
            self.build_configmap,
            self.build_job,
            self.repository_configmap,
            self.repository_job,
            *self.activator,
            self.service,
            self.network_policy,
            self.workload,
            self.autoscaler,
            self.scaled_object,
            self.disruption_budget,
            self.pod_monitor,
        )
        return [o for o in ordered if o is not None]

    def by_kind(self, kind: str) -> list[Manifest]:
        return [o for o in self.objects if o.kind == kind]

    def one(self, kind: str) -> Manifest:
        found = self.by_kind(kind)
        if len(found) != 1:
            raise LookupError(f"expected one {kind}, found {len(found)}")
        return found[0]


def render_all(dep: TritonLLMDeployment, opts: RenderOptions | None = None) -> Rendered:
    opts = opts or RenderOptions()
    want = frontend.wanted(dep, opts)
    if want is not None:
        return _render(dep, opts, frontend.chosen(dep, want))
    # spec.openai.enabled empty and a live workload: the frontend is added only when the pods
    # roll anyway, so that upgrading the operator restarts no pods by itself.
    on = _render(dep, opts, frontend.chosen(dep, True))
    if serving.template_revision(on.workload.body) == opts.live_revision:
        return on
    off = _render(dep, opts, frontend.chosen(dep, False, deferred=True))
    return off if serving.template_revision(off.workload.body) == opts.live_revision else on


def _render(dep: TritonLLMDeployment, opts: RenderOptions, openai: frontend.Choice) -> Rendered:
    spec = dep.spec
    key = naming.engine_key(dep)
    e_dir = naming.engine_dir(key)
    bplan = plans.engine_plan(dep, key)
    # The build Job takes one serving pod's GPUs; a download (llmapi) needs none, ModelOpt's
    # calibration (llmapi with quantization) does.
    quantizes = naming.llmapi_quantized(dep)
    gpus = 0 if spec.runtime == "llmapi" and not quantizes else spec.topology.gpus_per_pod
    # llmapi's LLM loads the checkpoint itself: the downloaded one, or the quantized one in the
    # key's directory (which otherwise holds only the fetch Job's step markers).
    model_dir = naming.llmapi_model_dir(dep, key) if spec.runtime == "llmapi" else e_dir
    repo_files = repository_files(dep, model_dir, naming.tokenizer_dir(dep))
    digest = plans.EngineDigest.of(opts.engine_digest, opts.engine_fingerprints)
    served = openai.served
    config = frontend.config_files(dep) if served else None
    keyed = plans.keyed_plans(dep, key, repo_files, digest, config)
    repo_key = keyed.repository_key
    workload_fn = serving.leader_worker_set if spec.topology.multi_node else serving.deployment
    workload = workload_fn(dep, repo_key, key, opts, openai=served)
    verified = spec.rollout.strategy == "Verified"
    return Rendered(
        name=dep.name,
        namespace=dep.namespace,
        engine_key=key,
        repository_key=repo_key,
        repository_dir=keyed.repository_dir,
        engine_dir=e_dir,
        store=_manifest(store.pvc(dep)),
        build_configmap=Manifest.of(jobs.build_configmap(dep, key, bplan)),
        build_job=Manifest.of(jobs.build_job(dep, key, gpus, opts)),
        repository_configmap=Manifest.of(jobs.plan_configmap(dep, repo_key, keyed.files)),
        repository_job=Manifest.of(jobs.repository_job(dep, repo_key, sorted(repo_files), opts)),
        service=Manifest.of(serving.service(dep, openai=served)),
        workload=Manifest.of(workload),
        verify_workload=Manifest.of(serving.verify_workload(dep, workload)) if verified else None,
        autoscaler=_manifest(autoscaling.hpa(dep)),
        scaled_object=_manifest(autoscaling.scaled_object(dep, opts)),
        activator=tuple(
            Manifest.of(o) for o in autoscaling.activator_objects(dep, opts, openai=served)
        ),
        pod_monitor=_manifest(autoscaling.pod_monitor(dep, opts, openai=served)),
        disruption_budget=_manifest(serving.pod_disruption_budget(dep)),
        network_policy=_manifest(serving.network_policy(dep, opts, openai=served)),
        repository=repo_files,
        build_plan=bplan,
        launch_plan=keyed.launch_plan,
        endpoint=serving.endpoint(dep),
        selector=naming.selector_string(dep),
        openai=openai.status,
    )


# The model repository is the costly part of rendering (every config.pbtxt), and it depends only
# on the spec and two paths: deployments with equal specs, and every reconcile of an unchanged
# one, share it. A few recent specs are kept (each is some tens of KiB of text).
_REPOSITORIES: collections.OrderedDict[tuple[str, str, str], dict[str, str]] = (
    collections.OrderedDict()
)
REPOSITORY_MEMO_SIZE = 32


def repository_files(
    dep: TritonLLMDeployment, engine_dir: str, tokenizer_dir: str
) -> dict[str, str]:
    """render_repository, memoised on the spec and the paths (a fresh dict each call)."""
    key = (dep.spec.model_dump_json(), engine_dir, tokenizer_dir)
    files = _REPOSITORIES.get(key)
    if files is None:
        files = render_repository(dep, engine_dir=engine_dir, tokenizer_dir=tokenizer_dir)
        _REPOSITORIES[key] = files
        if len(_REPOSITORIES) > REPOSITORY_MEMO_SIZE:
            _REPOSITORIES.popitem(last=False)
    else:
        _REPOSITORIES.move_to_end(key)
    return dict(files)


def rendered_problems(r: Rendered) -> list[FieldError]:
    """Rendered objects the API server would refuse for their size (the model repository
    ConfigMap grows with serving.extraParameters and the tokenizer settings)."""
    out = []
    for obj in r.objects:
        size = len(json.dumps(obj.body, separators=(",", ":")))
        if size > MAX_OBJECT_BYTES:
            out.append(
                FieldError(
                    "spec.serving.extraParameters",
                    f"the rendered {obj.kind} {obj.name} would be {size} bytes, above the API "
                    f"server's limit of {MAX_OBJECT_BYTES} bytes; shorten the largest values",
                )
            )
    return out


def _manifest(body: dict[str, Any] | None) -> Manifest | None:
    return None if body is None else Manifest.of(body)
