"""The engine-build Job, the model-repository Job, and the ConfigMaps holding their plans.

The build Job runs in the *serving* image on the *serving* GPU product (an engine only loads under
the TensorRT-LLM version and GPU architecture that built it). It is named by the engine key and
shared by every deployment with that key; its owners are those deployments (none is the
controller), so it is garbage-collected with the last of them, while the engine on the store stays.

The engine-cleanup Job removes an engine's files from the store when the last deployment using
it goes and its storage.engineRetention is Delete. It has no owner (its deployment is being
deleted) and goes by itself after it finishes.

The model-repository Job copies the rendered repository from its ConfigMap to
/store/repos/<ns>/_shared/<repository key>/repository/ and checks it against the engine (tp x pp
against the world size, TensorRT-LLM version) before any serving pod loads it. The repository key
is a content hash, so the deployments of a namespace that render the same repository share the
directory and one Job (named by the key, controlled by the deployment that created it).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.engine import is_engine_key
from tritonllm.api.spec import quantity_bytes

from . import naming
from .plans import BUILD_PLAN_KEY, REPOSITORY_PLAN_KEY
from .pod import (
    NO_API_TOKEN,
    PLAN_VOLUME,
    PYZ,
    SHM_VOLUME,
    STORE_VOLUME,
    TOOLS_VOLUME,
    RenderOptions,
    container_security,
    env,
    gpu_resources,
    metadata,
    pod_annotations,
    pod_labels,
    pod_spec_common,
    scratch_mount,
    scratch_volume,
    shm_volume,
    store_mounts,
    store_placement,
    store_volumes,
    token_mounts,
    token_volume,
    tools_init_container,
)

BUILD_BACKOFF_LIMIT = 2
# tritonllm.runtime.report exit codes that mean "retrying cannot help" (docs/in-pod.md).
PERMANENT_EXIT_CODES = (2, 10, 11, 12, 13, 14, 15, 16)
BUILD_DEADLINE_SECONDS = 6 * 3600
# The build pod's private Hugging Face home (tools may cache there), on its scratch emptyDir.
HF_HOME_MOUNT = f"{c.SCRATCH_MOUNT}/huggingface"


def configmap_key(path: str) -> str:
    """A repository path as a ConfigMap key ('/' is not allowed in keys)."""
    return path.replace("/", "__")


def build_configmap(dep: TritonLLMDeployment, key: str, plan: dict[str, Any]) -> dict[str, Any]:
    name = naming.job_name_of(dep, key)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            dep, name, naming.shared_labels(key, c.COMPONENT_BUILD), controller=False
        ),
        "immutable": True,
        "data": {BUILD_PLAN_KEY: json.dumps(plan, indent=2, sort_keys=True)},
    }


def build_writable_dirs(dep: TritonLLMDeployment, key: str) -> list[str]:
    """What the build Job of engine `key` writes on the store, and nothing else: directories
    named by its own keys. Its engine and checkpoint directories (for llmapi the engine directory
    holds the step markers, and the ModelOpt-quantized checkpoint when there is one), and the
    download directories of its hf:// sources, each named
    by its download key. A pvc:// source (on the store or another claim) is only read."""
    dirs = [naming.engine_dir(key)]
    if dep.spec.runtime != "llmapi":
        dirs.append(naming.checkpoint_dir(key))
    if dep.spec.model.source.startswith("hf://"):
        dirs.append(naming.weights_dir(dep))
    tokenizer = dep.spec.model.tokenizer.source
    if tokenizer and tokenizer.startswith("hf://"):
        dirs.append(naming.tokenizer_dir(dep))
    return sorted(set(dirs))


def _build_env(dep: TritonLLMDeployment) -> list[dict[str, Any]]:
    """The pods' environment, with HF_HOME on the build pod's own scratch volume (the store's
    shared cache is not writable by a build)."""
    return [
        {"name": "HF_HOME", "value": HF_HOME_MOUNT} if e["name"] == "HF_HOME" else e
        for e in env(dep)
    ]


def download_resources(dep: TritonLLMDeployment) -> dict[str, Any]:
    """A GPU-less download: one CPU and 4 GiB requested, or the pod template's own figures
    where smaller (a request above the memory limit is refused by the API server; the serving
    pod's CPU is all a small node may have for it)."""
    r = dep.spec.podTemplate.resources
    cpu = r.cpu if quantity_bytes(r.cpu) < 1 else "1"
    memory = r.memory if quantity_bytes(r.memory) < quantity_bytes("4Gi") else "4Gi"
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": r.memory}}


def _build_pod_spec(
    dep: TritonLLMDeployment, key: str, gpus: int, opts: RenderOptions
) -> dict[str, Any]:
    """The build pod: `tritonllm build` in the serving image, on the serving GPUs (no GPU and
    no GPU placement for a download). Of the store it may write only build_writable_dirs."""
    name = naming.job_name_of(dep, key)
    container: dict[str, Any] = {
        "name": "build",
        "image": dep.spec.image,
        "command": ["python3", PYZ, "build", "--plan", f"{c.PLAN_MOUNT}/{BUILD_PLAN_KEY}"],
        "env": _build_env(dep),
        "volumeMounts": [
            *store_mounts(dep, read_only=True, writable=build_writable_dirs(dep, key)),
            {"name": TOOLS_VOLUME, "mountPath": c.TOOLS_MOUNT, "readOnly": True},
            {"name": PLAN_VOLUME, "mountPath": c.PLAN_MOUNT, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": c.SHM_MOUNT},
            scratch_mount(),
            # The download step reads the Hugging Face token from this file (no env var).
            *token_mounts(dep),
        ],
        "securityContext": container_security(dep),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if gpus:
        container["resources"] = gpu_resources(dep, gpus)
    else:
        container["resources"] = download_resources(dep)
    common = pod_spec_common(dep)
    # A download has no GPU placement but must reach a node-local store claim where it is.
    cpu_only = {"securityContext": common["securityContext"], **store_placement(dep)}
    return {
        **(common if gpus else cpu_only),
        **NO_API_TOKEN,
        "restartPolicy": "Never",
        "initContainers": [tools_init_container(dep, opts)],
        "containers": [container],
        "volumes": [
            *store_volumes(dep),
            {"name": TOOLS_VOLUME, "emptyDir": {}},
            {"name": PLAN_VOLUME, "configMap": {"name": name}},
            shm_volume(dep),
            scratch_volume(),
            *token_volume(dep),
        ],
    }


def build_job(dep: TritonLLMDeployment, key: str, gpus: int, opts: RenderOptions) -> dict[str, Any]:
    """The Job that downloads, converts/quantizes and builds one engine (or, for llmapi, only
    downloads the checkpoint: then it needs no GPU)."""
    name = naming.job_name_of(dep, key)
    labels = naming.shared_labels(key, c.COMPONENT_BUILD)
    pod_spec = _build_pod_spec(dep, key, gpus, opts)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(dep, name, labels, controller=False),
        "spec": {
            "backoffLimit": BUILD_BACKOFF_LIMIT,
            "activeDeadlineSeconds": BUILD_DEADLINE_SECONDS,
            # Exit codes of `tritonllm build` that no retry can fix (bad plan, no disk, auth,
            # too few GPUs, no converter, tp/pp or version mismatch, something missing) fail the
            # Job at once; the operator reports them and retries only after a spec change.
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": "build",
                            "operator": "In",
                            "values": list(PERMANENT_EXIT_CODES),
                        },
                    },
                    # An evicted or preempted pod (a drain, a lost node) is replaced without
                    # counting against backoffLimit: the build resumes from its step markers.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
            "template": {
                "metadata": {
                    "labels": pod_labels(dep, labels),
                    **(
                        {"annotations": pod_annotations(dep)}
                        if pod_annotations(dep)
                        else {}
                    ),
                },
                "spec": pod_spec,
            },
        },
    }


def plan_configmap(
    dep: TritonLLMDeployment, repo_key: str, files: dict[str, str]
) -> dict[str, Any]:
    """The rendered repository plus the repository and launch plans, immutable and keyed by
    content: a change makes a new ConfigMap and so a rollout."""
    labels = {
        **naming.base_labels(dep, c.COMPONENT_REPOSITORY),
        c.LABEL_REPO_KEY: repo_key,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(dep, naming.plan_configmap_name(dep, repo_key), labels),
        "immutable": True,
        "data": {configmap_key(p): body for p, body in sorted(files.items())},
    }


def _repository_mounts(dep: TritonLLMDeployment, repo_key: str) -> list[dict[str, Any]]:
    """The store read-only but the directory of this repository's content key (the copy is
    made beside the repository there and renamed into place), and the plan."""
    own = naming.repository_key_dir(dep, repo_key)
    return [
        *store_mounts(dep, read_only=True, writable=[own]),
        {"name": PLAN_VOLUME, "mountPath": c.PLAN_MOUNT, "readOnly": True},
    ]


# The repository Job's pod copies files: small, fixed requests (named when a quota refuses it).
REPOSITORY_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "256Mi"},
}


def repository_job(
    dep: TritonLLMDeployment, repo_key: str, repo_paths: list[str], opts: RenderOptions
) -> dict[str, Any]:
    name = naming.repository_job_name(dep, repo_key)
    labels = {**naming.base_labels(dep, c.COMPONENT_REPOSITORY), c.LABEL_REPO_KEY: repo_key}
    cm = naming.plan_configmap_name(dep, repo_key)
    items = [{"key": configmap_key(p), "path": p} for p in repo_paths]
    container = {
        "name": "repository",
        "image": opts.settings.tools_image,
        "command": ["tritonllm", "build", "--plan", f"{c.PLAN_MOUNT}/{REPOSITORY_PLAN_KEY}"],
        "volumeMounts": _repository_mounts(dep, repo_key),
        "resources": copy.deepcopy(REPOSITORY_RESOURCES),
        "securityContext": {**container_security(dep), "readOnlyRootFilesystem": True},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(dep, name, labels),
        "spec": {
            "backoffLimit": 3,
            "activeDeadlineSeconds": 1800,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": pod_labels(dep, labels)},
                "spec": {
                    "securityContext": pod_spec_common(dep)["securityContext"],
                    **NO_API_TOKEN,
                    # Placed like the pods that share the store: a node-local claim
                    # (ReadWriteOnce, local-path) is reachable only where they run.
                    **store_placement(dep),
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [
                        *store_volumes(dep),
                        {
                            "name": PLAN_VOLUME,
                            "configMap": {
                                "name": cm,
                                "items": [
                                    {
                                        "key": configmap_key(REPOSITORY_PLAN_KEY),
                                        "path": REPOSITORY_PLAN_KEY,
                                    },
                                    *[{**i, "path": f"repo/{i['path']}"} for i in items],
                                ],
                            },
                        },
                    ],
                },
            },
        },
    }


CLEANUP_TTL_SECONDS = 600
# The cleanup container's own check of its argument, before any delete: the key must be exactly
# what an engine key is (the operator checks it too; this holds whatever reaches the Job).
CLEANUP_SCRIPT = f"""set -eu
key="$1"
case "$key" in
  ""|*[!0-9a-f]*) echo "refusing to delete: engine key '$key' is not lowercase hex" >&2; exit 2;;
esac
if [ "${{#key}}" -ne {naming.KEY_LENGTH} ]; then
  echo "refusing to delete: engine key '$key' is not {naming.KEY_LENGTH} characters" >&2; exit 2
fi
rm -rf -- "{c.STORE_MOUNT}/engines/$key" "{c.STORE_MOUNT}/checkpoints/$key"
"""


def engine_cleanup_job(dep: TritonLLMDeployment, key: str, opts: RenderOptions) -> dict[str, Any]:
    """`rm -rf` of the engine's and its converted checkpoint's directories on the store, in the
    tools image, placed like the repository Job (a node-local claim is reachable only there).

    Refuses (ValueError) a key that is not an engine key, and the container checks it again
    before deleting; of the store only engines/ and checkpoints/ are writable to it."""
    if not is_engine_key(key):
        raise ValueError(
            f"refusing to render the cleanup of {key!r}: not an engine key "
            f"({naming.KEY_LENGTH} lowercase hex digits)"
        )
    labels = naming.shared_labels(key, c.COMPONENT_CLEANUP)
    writable = [f"{c.STORE_MOUNT}/engines", f"{c.STORE_MOUNT}/checkpoints"]
    container = {
        "name": "cleanup",
        "image": opts.settings.tools_image,
        "command": ["sh", "-c", CLEANUP_SCRIPT, "engine-cleanup", key],
        "volumeMounts": [m for m in store_mounts(dep, read_only=True, writable=writable)
                         if m["name"] == STORE_VOLUME],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {**container_security(dep), "readOnlyRootFilesystem": True},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"tritonllm-clean-{key}", "namespace": dep.namespace,
                     "labels": labels},
        "spec": {
            "backoffLimit": 3,
            "activeDeadlineSeconds": 600,
            "ttlSecondsAfterFinished": CLEANUP_TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "securityContext": pod_spec_common(dep)["securityContext"],
                    **NO_API_TOKEN,
                    **store_placement(dep),
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": store_volumes(dep)[:1],
                },
            },
        },
    }
