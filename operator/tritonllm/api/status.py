"""The TritonLLMDeployment status: what the operator observed. Written only by the operator."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ApiModel


class Condition(ApiModel):
    """A metav1.Condition: the state of one aspect of the deployment."""

    type: str = Field(max_length=316)
    """EngineReady, RepositoryReady, Available, Progressing or Degraded."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str = Field(max_length=1024, min_length=1)
    """CamelCase machine-readable reason."""
    message: str = Field(default="", max_length=32768)
    """Human-readable details, naming the field and the fix for errors."""
    observedGeneration: int = Field(default=0, ge=0)
    """metadata.generation the condition was computed for."""
    lastTransitionTime: str
    """When status last changed (RFC 3339); unchanged when only the message changes."""


class EngineStatus(ApiModel):
    """The engine the deployment serves (or is building)."""

    key: str
    """Engine key: a hash of everything that changes the engine; names /engines/<key>."""
    path: str
    """Engine directory on the model store."""
    trtllmVersion: str | None = None
    """TensorRT-LLM version that built the engine."""
    tensorParallel: int | None = None
    """tp read back from the engine's config.json."""
    pipelineParallel: int | None = None
    """pp read back from the engine's config.json."""
    cached: bool = False
    """True when an existing engine was reused (no build Job ran for this deployment)."""
    buildJob: str | None = None
    """Name of the build Job, while one exists."""


class EngineAnchor(ApiModel):
    """The digests of the deployment's engine, kept where no pod and no user can write (this
    status): the serving pods check the store against them even if the TritonLLMEngine is
    deleted and recreated."""

    key: str
    """The engine key they belong to."""
    digest: str
    """The engine digest its build reported when the operator first recorded it (sha256 of
    artifact.json's files)."""
    fingerprintDigest: str | None = None
    """The files' fingerprint digest reported with it."""


class RepositoryStatus(ApiModel):
    """A model repository revision the operator wrote."""

    key: str
    """Repository key: a content hash of the rendered repository and launch plan."""
    path: str
    """Its directory on the model store."""
    claimName: str
    """The model-store claim it was written to."""


class PhaseTime(ApiModel):
    """One lifecycle phase of the current revision, timed from the cluster's own records."""

    name: str
    """EngineBuild (the build Job: download, conversion, trtllm-build), RepositoryWrite (the
    repository Job), Verification (a verified rollout: its verification pod started until the
    smoke set's verdict), WaitingForGpus (a serving pod created until scheduled), PodStart
    (scheduled until its serving container started: image pulls, the tools init container),
    ModelLoad (container started until Ready: the engine check, the group's login check,
    tritonserver loading the models)."""
    start: str
    """When it began (RFC 3339)."""
    end: str | None = None
    """When it ended; unset while it runs."""
    seconds: float | None = None
    """end - start."""
    source: str
    """Where the times come from (the Job's status, the pod's conditions, the container's
    state)."""


class RolloutStatus(ApiModel):
    """The verified rollout of the latest revision (spec.rollout; docs/rollout.md)."""

    revision: str
    """The revision verified (a hash of the serving pod template it renders)."""
    state: Literal["Verifying", "Verified", "Failed"]
    """Verifying: its verification pod starts or answers the smoke set; Verified: it passed and
    the serving workload rolls over to it; Failed: it did not, the serving pods stay on the
    revision they run, and this one is not tried again until the spec changes."""
    message: str | None = None
    """What was checked, or the request that failed with the answer it got."""
    started: str | None = None
    """When its verification began (RFC 3339)."""
    finished: str | None = None
    """When the verdict was reached."""


class ScalingStatus(ApiModel):
    """What the autoscaler asks for and what the GPU nodes can give (spec.autoscaling set)."""

    autoscaler: str
    """HPA or KEDA (the object that owns the replica count)."""
    desired: int
    """Replicas the autoscaler asks for (the workload's spec.replicas)."""
    ready: int
    """Replicas that passed their readiness probe."""
    capacity: int | None = None
    """Replicas (groups of nodes x gpu.perNode GPUs) the schedulable nodes labelled with
    spec.gpu.product can hold when nothing else runs on them; unset when the operator does not
    watch nodes."""
    possibleNow: int | None = None
    """How many more replicas than desired those nodes can hold now (capacity - desired, 0 when
    the scheduler reports a serving pod it cannot place: other workloads use the GPUs)."""
    limitedBy: str | None = None
    """Why the desired count is not, or cannot be, reached: maxReplicas above capacity, or the
    scheduler's message for a Pending serving pod."""


class FitRow(ApiModel):
    """One layout the fit planner computed, per GPU."""

    tensor: int
    """tp."""
    pipeline: int
    """pp."""
    nodes: int
    """Nodes of gpu.perNode GPUs it takes."""
    weightsGiB: float
    """Weights per GPU."""
    workspaceGiB: float
    """Activation workspace and runtime overhead per GPU (an estimate)."""
    kvBytesPerToken: int
    """KV cache per token per GPU."""
    kvTokens: int
    """Tokens the KV cache gets at serving.kvCache.freeGpuMemFraction."""
    fits: bool
    """Whether kvTokens covers requestedTokens."""


class FitStatus(ApiModel):
    """The fit planner's arithmetic for this spec (docs/fit.md)."""

    auto: bool
    """Whether engine.parallelism.auto chose the layout."""
    chosen: str
    """The layout served (tp and pp)."""
    gpuProduct: str
    """The product sized for."""
    gpuMemoryGiB: float
    """Its memory (NVIDIA's figure as the driver reports it)."""
    requestedTokens: int
    """KV tokens asked for: maxBatchSize x beams x maxSeqLen, or serving.kvCache.maxTokens."""
    fractionNeeded: float
    """The smallest serving.kvCache.freeGpuMemFraction that holds them with this layout."""
    table: list[FitRow] = Field(default_factory=list)
    """The layouts computed, in the order auto tries them, up to the one that fits."""


class OpenAIStatus(ApiModel):
    """The OpenAI-compatible API of the serving pods (spec.openai)."""

    served: bool
    """Whether the rendered serving pods run the OpenAI frontend."""
    url: str | None = None
    """Its in-cluster base URL (http://<service>.<namespace>.svc:9000/v1) when served."""
    model: str | None = None
    """The model name clients send (spec.openai.servedModelName or the deployment's name)."""
    message: str | None = None
    """Why it is not served, when it is not."""


class TritonLLMDeploymentStatus(ApiModel):
    """Observed state of a TritonLLMDeployment."""

    conditions: list[Condition] = Field(default_factory=list)
    """EngineReady, RepositoryReady, Available, Progressing, Degraded."""
    observedGeneration: int | None = None
    """The metadata.generation the operator last acted on."""
    engine: EngineStatus | None = None
    """The current engine."""
    repository: RepositoryStatus | None = None
    """The model repository revision last written (its Job completed). Trusted once that Job
    is gone (its ttlSecondsAfterFinished is one day), so a Ready deployment stays Ready; a
    spec change that renders another revision writes it again."""
    previousEngine: EngineStatus | None = None
    """The engine served before the last engine change (kept on the store for rollback)."""
    replicas: int | None = None
    """Serving replicas (pods for single node, groups for multi node)."""
    readyReplicas: int | None = None
    """Replicas that passed their readiness probe."""
    selector: str | None = None
    """Label selector of the serving pods, for the scale subresource (HPA)."""
    endpoint: str | None = None
    """In-cluster URL of the generate endpoint."""
    openai: OpenAIStatus | None = None
    """The OpenAI-compatible API: whether the pods serve it, and its base URL."""
    ready: str | None = None
    """ready/desired replicas, for `kubectl get`."""
    reason: str | None = None
    """Short reason of the current state (the reason of Degraded, Progressing or Available)."""
    parallelism: str | None = None
    """tp x pp, for `kubectl get`."""
    runtime: str | None = None
    """The runtime that serves it: engine or llmapi (spec.runtime, or for an empty
    spec.runtime the one the image's TensorRT-LLM version implies: llmapi after 1.2.1)."""
    fit: FitStatus | None = None
    """The fit planner's table: weights, workspace and KV cache per GPU for the layouts it
    computed and the one served (unset when it knows the model's architecture or the GPU
    product's memory not)."""
    phases: list[PhaseTime] | None = None
    """The current revision's lifecycle, phase by phase (docs/observability.md); unset for an
    engine found in the cache and a repository already written, whose phases did not run."""
    phase: str | None = None
    """The phase under way (`kubectl get tllm -o wide`), unset once serving."""
    phaseStarted: str | None = None
    """When it began (the printer column shows how long ago)."""
    rollout: RolloutStatus | None = None
    """The verification of the latest revision before traffic moves to it."""
    scaling: ScalingStatus | None = None
    """Autoscaling: desired and ready replicas, GPU capacity, and what limits scaling up."""
    mpiSecretUid: str | None = None
    """Multi node: UID of the MPI SSH key Secret the operator created (only that one is used)."""
    buildObjectUids: list[str] | None = None
    """UIDs of the engine build Job and plan the operator created, copied from the engine
    record: they stay trusted if the record is deleted while the build runs."""
    engineAnchor: EngineAnchor | None = None
    """The engine digest the operator recorded first for the current engine key, copied from
    the engine record: a record recreated with another digest is not served (Degraded,
    EngineDigestChanged) until the deployment's annotation tritonllm.io/accept-engine-digest
    names the new one."""
