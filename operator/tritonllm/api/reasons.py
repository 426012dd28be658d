"""Condition reasons: why a condition of a TritonLLMDeployment has the status it has.

Every reason the operator writes into `status.conditions` (and into the Events posted when a
condition flips) is named here, once, grouped by the condition that uses it. They are part of the
public contract (alerts and dashboards match on them): changing a value is a breaking change.
docs/operator.md lists them per condition.
"""

from __future__ import annotations

from typing import Final

# --- EngineReady ----------------------------------------------------------------------------
ENGINE_BUILT: Final = "EngineBuilt"
"""True: this deployment's reconcile built the engine."""
ENGINE_CACHED: Final = "EngineCached"
"""True: the engine was already Ready in the cache (TritonLLMEngine); no build ran."""
BUILDING: Final = "Building"
"""False: the build Job is running (engine runtime)."""
DOWNLOADING: Final = "Downloading"
"""False: the download Job is running (llmapi runtime)."""
BUILD_FAILED: Final = "BuildFailed"
"""False (and Degraded): the build Job failed; the message carries the log tail."""
BLOCKED: Final = "Blocked"
"""Unknown: a prerequisite is missing (see Degraded), so nothing is built."""
IMAGE_PULL_FAILED: Final = "ImagePullFailed"
"""False: the build (or repository) Job's pod cannot pull its image (ErrImagePull,
ImagePullBackOff, InvalidImageName); the kubelet's message and the fix are quoted. Also used by
RepositoryReady; Unschedulable, QuotaExceeded and AdmissionRefused likewise name a Job's pod that
does not start."""
POD_NOT_STARTING: Final = "PodNotStarting"
"""False: the build (or repository) Job's pod cannot start a container
(CreateContainerConfigError, CreateContainerError: a missing Secret, ConfigMap or volume)."""

# --- RepositoryReady ------------------------------------------------------------------------
REPOSITORY_WRITTEN: Final = "RepositoryWritten"
"""True: the model repository for the current spec is on the store."""
WAITING_FOR_ENGINE: Final = "WaitingForEngine"
"""False: the repository is written once the engine is ready."""
WRITING: Final = "Writing"
"""False: the repository Job is running."""
REPOSITORY_FAILED: Final = "RepositoryFailed"
"""False (and Degraded): the repository Job failed."""

# --- Available ------------------------------------------------------------------------------
SERVING: Final = "Serving"
"""True: at least one replica passes its readiness probe."""
NOT_DEPLOYED: Final = "NotDeployed"
"""False: the serving workload does not exist yet."""
NO_READY_REPLICAS: Final = "NoReadyReplicas"
"""False: the workload exists but no replica is ready."""

# --- Progressing ----------------------------------------------------------------------------
WRITING_REPOSITORY: Final = "WritingRepository"
"""True: the engine is ready and the repository is being written."""
ROLLING_OUT: Final = "RollingOut"
"""True: the workload is starting or rolling to the current engine and settings."""
VERIFYING: Final = "Verifying"
"""True: a verified rollout (spec.rollout) runs the new revision on its verification pod, with no
client traffic, and sends it the smoke set; the serving pods are unchanged until it passes."""
VERIFIED: Final = "Verified"
"""Event: the new revision answered the smoke set; the serving workload rolls over to it."""
VERIFICATION_FAILED: Final = "VerificationFailed"
"""Degraded True (Progressing False): the new revision failed its verification (a smoke request
answered wrongly, too slowly or not at all, its pod crashed, or it was not Ready in time). The
serving pods stay on the revision they run; this one is not tried again until the spec changes
(or rollout.strategy is Immediate)."""
UNSCHEDULABLE: Final = "Unschedulable"
"""True: rolling out, but the scheduler cannot place a serving pod (its message is quoted). Also
EngineReady/RepositoryReady False (and Progressing True): the scheduler cannot place the build or
repository Job's pod (no node with the GPU product, an unbound claim, a taint)."""
SERVING_POD_FAILED: Final = "ServingPodFailed"
"""True (Degraded True too): rolling out, and a serving container exited with an error since
(its termination message is quoted: a leader that reached no worker names the worker and the
port; mpirun names the rank that died). Its workload restarts it (a multi-node group is
recreated whole), so this clears itself once every replica is ready."""
ENGINE_TAMPERED: Final = "EngineTampered"
"""True (Degraded True too): a serving pod refused the engine on the store because its
artifact.json is not the one the build reported to the operator (TritonLLMEngine
status.digest): the store was changed after the build. Delete the TritonLLMEngine and the
engine directory to have it built again (then EngineDigestChanged names the new digest to
accept)."""
RETRYING_BUILD: Final = "RetryingBuild"
"""True: a failed build will be retried after its backoff."""
DEPLOYED: Final = "Deployed"
"""False: done; every replica runs the current engine and settings."""

# --- Ready (the summary) ---------------------------------------------------------------------
# True: Deployed. False: the reason of Degraded when it is True, else the reason of Progressing.
RECONCILING: Final = "Reconciling"
"""Unknown: the operator has not summed the deployment up yet."""

# --- Degraded -------------------------------------------------------------------------------
AS_EXPECTED: Final = "AsExpected"
"""False: nothing needs a human."""
INVALID_SPEC: Final = "InvalidSpec"
"""True: the object passed the schema but not the operator's checks (the field is named)."""
DOES_NOT_FIT: Final = "DoesNotFit"
"""True: the fit planner computed that the model, at the requested batch and context, does not
fit the GPUs of spec.gpu.product with this parallelism (the message has the arithmetic and a
layout that fits); nothing was built."""
STORE_MISSING: Final = "StoreMissing"
"""True: the model-store PersistentVolumeClaim does not exist."""
SECRET_MISSING: Final = "SecretMissing"
"""True: the Secret of spec.model.credentials (or its key) is missing."""
NO_MATCHING_NODES: Final = "NoMatchingNodes"
"""True: no node carries spec.gpu.product."""
AUTOSCALER_MISSING: Final = "AutoscalerMissing"
"""True: autoscaler KEDA is asked for but the cluster has no KEDA, or no Prometheus URL is set."""
ENGINE_DIGEST_CHANGED: Final = "EngineDigestChanged"
"""True: the TritonLLMEngine records another engine digest than the one the deployment anchored
(status.engineAnchor) for the same engine key: the record was deleted and recreated, and the
build that re-read the store reported what is on it now. Nothing new is rolled out; the serving
pods keep checking the store against the anchored digest (a changed store is refused:
EngineTampered). To serve the recorded engine, set the deployment's annotation
tritonllm.io/accept-engine-digest to its digest."""
NAME_CONFLICT: Final = "NameConflict"
"""True: an object the deployment needs exists and was not created by it (the object is named);
the operator neither adopts, changes nor deletes it, and writes nothing else."""
APPLY_REFUSED: Final = "ApplyRefused"
"""True: the API server refused a rendered object as invalid (HTTP 422); the object and the
server's message, which names the field, are quoted."""
FORBIDDEN: Final = "Forbidden"
"""True: the operator may not make a write it needs (RBAC, HTTP 403); the object is named."""
QUOTA_EXCEEDED: Final = "QuotaExceeded"
"""True: a ResourceQuota of the namespace refused an object (the quota's message is quoted)."""
LIMIT_RANGE_EXCEEDED: Final = "LimitRangeExceeded"
"""True: a LimitRange of the namespace refused a pod (its per-container or per-pod minimum,
maximum or limit/request ratio; the LimitRanger's message is quoted)."""
ADMISSION_REFUSED: Final = "AdmissionRefused"
"""True: an admission webhook or policy refused an object (its message is quoted)."""
API_ERROR: Final = "ApiError"
"""True: another API error ended the reconcile (conflict, timeout, server error); it is retried
with a growing delay."""
RENDER_FAILED: Final = "RenderFailed"
"""True: rendering the deployment's objects failed (an operator bug: the message says where)."""

# --- status.reason only (the `kubectl get tllm` column) -------------------------------------
READY: Final = "Ready"
"""Deployed with at least one ready replica."""
SCALED_TO_ZERO: Final = "ScaledToZero"
"""Deployed with zero replicas."""

# Why a build or repository Job's pod does not start (tritonllm.plan.stalls): a reason change
# into one of these posts a Warning Event even though the condition's status stays False.
POD_STALLS: Final = (UNSCHEDULABLE, IMAGE_PULL_FAILED, POD_NOT_STARTING, QUOTA_EXCEEDED,
                     LIMIT_RANGE_EXCEEDED, ADMISSION_REFUSED)

# Degraded=True reasons that block every step (Progressing=False with the same reason).
PREREQUISITES: Final = (STORE_MISSING, SECRET_MISSING, NO_MATCHING_NODES, AUTOSCALER_MISSING)
