"""Names that the CRD, the operator, the renderers and users' tooling all depend on.

Everything here is part of the public contract: changing a value is a breaking change.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "tritonllm.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "TritonLLMDeployment"
PLURAL: Final = "tritonllmdeployments"
SINGULAR: Final = "tritonllmdeployment"
SHORT_NAMES: Final = ("tllm",)
CATEGORIES: Final = ("all", "tritonllm")
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

FIELD_MANAGER: Final = "tritonllm"

# Longest metadata.name we accept: children append suffixes such as "-build-<8 hex>" (15 chars)
# and Service names must stay DNS-1035 labels of at most 63 characters.
MAX_NAME_LENGTH: Final = 40

# --- labels -------------------------------------------------------------------------------
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_ENGINE_KEY: Final = f"{GROUP}/engine-key"
LABEL_REPO_KEY: Final = f"{GROUP}/repository-key"
# Reserved (see OPERATOR_POD_KEYS); also labels `tritonllm bench`'s results ConfigMap.
LABEL_DEPLOYMENT: Final = f"{GROUP}/deployment"

APP_NAME: Final = "tritonllm"

COMPONENT_SERVER: Final = "server"
COMPONENT_WORKER: Final = "worker"  # multi-node worker pods (the leader is a server)
# The verification pod (multi-node: its group's leader) of a revision under a verified rollout:
# not selected by the Service, so it takes no client traffic (docs/rollout.md).
COMPONENT_VERIFY: Final = "verify"
COMPONENT_BUILD: Final = "engine-build"
COMPONENT_REPOSITORY: Final = "model-repository"
COMPONENT_CLEANUP: Final = "engine-cleanup"  # removes an engine's files (engineRetention Delete)
COMPONENT_STORE: Final = "model-store"
# The operator's own pods, as the Helm chart labels them (with LABEL_NAME APP_NAME): the serving
# pods' NetworkPolicy admits its smoke requests from these pods alone.
COMPONENT_OPERATOR: Final = "operator"

# --- annotations --------------------------------------------------------------------------
ANNOTATION_SPEC_HASH: Final = f"{GROUP}/spec-hash"
ANNOTATION_TRTLLM_VERSION: Final = f"{GROUP}/trtllm-version"  # reserved (OPERATOR_POD_KEYS)
# On a serving pod template: the revision it renders (a hash of the template without this key).
ANNOTATION_REVISION: Final = f"{GROUP}/revision"
# On a TritonLLMDeployment, set by its owner: the engine digest to serve from now on, when the
# TritonLLMEngine records another than the one the deployment anchored (status.engineAnchor).
ANNOTATION_ACCEPT_ENGINE_DIGEST: Final = f"{GROUP}/accept-engine-digest"

# Pod label and annotation keys of the operator's own, which podTemplate.labels and
# podTemplate.annotations may not use (the CRD's CEL rule and the operator refuse them; render
# never copies them). The operator writes the engine and repository a pod runs (read back from
# the workload's pod template), the spec hash and the revision. LABEL_DEPLOYMENT and
# ANNOTATION_TRTLLM_VERSION are on no pod today and stay on purpose, as reserved keys: taking
# them out would accept specs that admission refuses now (a change of the CRD) and hand keys of
# the operator's domain to users, which a later release could then not take back without
# refusing their objects (tests/unit/test_sweep.py keeps them protected).
OPERATOR_POD_KEYS: Final = (
    LABEL_ENGINE_KEY,
    LABEL_REPO_KEY,
    LABEL_DEPLOYMENT,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_TRTLLM_VERSION,
    ANNOTATION_REVISION,
)

# --- well-known Kubernetes keys -----------------------------------------------------------
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"

# --- ports (Triton defaults; the Service exposes them under these names) -------------------
HTTP_PORT: Final = 8000
GRPC_PORT: Final = 8001
METRICS_PORT: Final = 8002
# The OpenAI-compatible frontend (`tritonllm openai`), a sidecar of every serving pod that takes
# client traffic: its container, and the port (also the Service's) under the name `openai`.
OPENAI_PORT: Final = 9000
OPENAI_PORT_NAME: Final = "openai"
OPENAI_CONTAINER: Final = "openai"

# --- paths inside pods --------------------------------------------------------------------
STORE_MOUNT: Final = "/store"  # the model-store PVC
TOOLS_MOUNT: Final = (
    "/opt/tritonllm"  # tritonllm's in-pod entry points (copied by an init container)
)
PLAN_MOUNT: Final = "/etc/tritonllm"  # rendered plans (ConfigMap)
SHM_MOUNT: Final = "/dev/shm"
SCRATCH_MOUNT: Final = "/tmp"  # writable emptyDir: TMPDIR, HOME, Open MPI's session directory
# The Hugging Face token (spec.model.credentials), mounted only into the pods that download.
HF_TOKEN_MOUNT: Final = "/var/run/secrets/tritonllm/hf"
HF_TOKEN_FILE: Final = f"{HF_TOKEN_MOUNT}/token"

# --- multi-node MPI over SSH (docs/in-pod.md) ---------------------------------------------
MPI_SSH_PORT: Final = 2222  # the workers' sshd
MPI_SSH_MOUNT: Final = "/etc/tritonllm-ssh"  # the <name>-mpi-ssh Secret (a sibling of PLAN_MOUNT)
# Files of that Secret: a client key pair and the group's host key pair (OpenSSH format).
MPI_SSH_CLIENT_KEY: Final = "id_ed25519"
MPI_SSH_CLIENT_PUB: Final = "id_ed25519.pub"
MPI_SSH_HOST_KEY: Final = "ssh_host_ed25519_key"
MPI_SSH_HOST_PUB: Final = "ssh_host_ed25519_key.pub"
MPI_SSH_KEYS: Final = (MPI_SSH_CLIENT_KEY, MPI_SSH_CLIENT_PUB, MPI_SSH_HOST_KEY, MPI_SSH_HOST_PUB)
# The leader's working directory: the client key (a private copy), the pinned host key and the
# hostfile mpirun reads. Its paths are in the rendered mpirun command line.
MPI_WORKDIR: Final = "/tmp/tritonllm-mpi"
MPI_HOSTFILE: Final = "hostfile"
MPI_KNOWN_HOSTS: Final = "known_hosts"

# --- condition types (metav1.Condition style; no "phase") --------------------------------
COND_ENGINE_READY: Final = "EngineReady"
COND_REPOSITORY_READY: Final = "RepositoryReady"
COND_AVAILABLE: Final = "Available"
COND_PROGRESSING: Final = "Progressing"
COND_DEGRADED: Final = "Degraded"
# The summary (kstatus, `kubectl wait --for=condition=Ready`): True when every replica runs the
# current engine and settings and nothing is degraded.
COND_READY: Final = "Ready"
CONDITION_TYPES: Final = (
    COND_ENGINE_READY,
    COND_REPOSITORY_READY,
    COND_AVAILABLE,
    COND_PROGRESSING,
    COND_DEGRADED,
    COND_READY,
)

# --- the engine cache record (a second, operator-written kind) ------------------------------
ENGINE_KIND: Final = "TritonLLMEngine"
ENGINE_PLURAL: Final = "tritonllmengines"
ENGINE_SINGULAR: Final = "tritonllmengine"
ENGINE_SHORT_NAMES: Final = ("tllme",)
ENGINE_CRD_NAME: Final = f"{ENGINE_PLURAL}.{GROUP}"
