"""Keys, names, labels and paths: the identities every rendered object is built from.

The engine key is a stable hash of every input of the build Job: what changes the engine bytes
(model source and revision, runtime, image and TensorRT-LLM version, dtype, quantization,
parallelism, build limits, plugins, GPU product) and what the build pod could fetch or write
differently with (its environment, such as HF_ENDPOINT or PYTHONPATH; its service account and
image pull secrets; the Hugging Face token Secret; a separate tokenizer it downloads; the model
store claim). It names the engine directory (/store/engines/<key>), the build Job and the
TritonLLMEngine record, so deployments with equal keys share one build and one engine, a
deployment deleted and applied again finds its engine, and a deployment whose build pod differs
in any way (or that keeps its store on another claim) builds its own. Serving-only fields
(replicas, batching, KV cache, ...) are not in it.

For runtime llmapi the key's Job downloads the checkpoint; with engine.quantization it also
quantizes it with ModelOpt into the key's directory, so the key adds exactly that Job's inputs
(the quantization fields, the image's TensorRT-LLM version, trustRemoteCode) and nothing it does
not read (tp/pp, dtype, serving). Without quantization the key is what it always was.

A download key does the same for one Hugging Face download (source, revision, image and the build
pod's inputs): it names the download directory, which the build Jobs of several engine keys may
share (the same weights quantized two ways) but no Job with other download inputs writes.

Every path these functions return is checked segment by segment (no '.', '..', empty segments or
a leading '-'), so a value that slipped past admission cannot turn into a writable subPath over
someone else's directory.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import (
    FieldError,
    InvalidDeployment,
    TritonLLMDeployment,
    resolve_trtllm_version,
)
from tritonllm.api.engine import ENGINE_KEY_LENGTH, is_engine_key

KEY_LENGTH = ENGINE_KEY_LENGTH
# Bump when the key's inputs change meaning (forces rebuilds). 2: the build pod's inputs and the
# store claim joined the key, and downloads moved to directories of their own download key.
ENGINE_KEY_SCHEMA = 2


def stable_hash(data: Any, length: int = KEY_LENGTH) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def build_pod_inputs(dep: TritonLLMDeployment) -> dict[str, Any]:
    """What the build (or download) pod runs with beyond the image and its plan: each can change
    what it fetches or writes (HF_ENDPOINT, a PYTHONPATH, the identity a mirror or a webhook sees,
    the token), and the claim it writes to."""
    pt = dep.spec.podTemplate
    creds = dep.spec.model.credentials
    return {
        "env": [e.to_wire() for e in pt.env],
        "serviceAccountName": pt.serviceAccountName,
        "imagePullSecrets": list(pt.imagePullSecrets),
        "credentials": creds.to_wire() if creds else None,
        "claimName": dep.spec.storage.claimName,
    }


def engine_key_inputs(dep: TritonLLMDeployment) -> dict[str, Any]:
    """Exactly the inputs of the Job that makes an engine (for llmapi: downloads a checkpoint)."""
    spec = dep.spec
    model = {
        "source": spec.model.source,
        "revision": spec.model.revision,
        # A separate tokenizer is downloaded by the same Job.
        "tokenizer": spec.model.tokenizer.source,
    }
    common = {"schema": ENGINE_KEY_SCHEMA, "image": spec.image, "buildPod": build_pod_inputs(dep)}
    if spec.runtime == "llmapi":
        q = spec.engine.quantization
        if q.format == "none":
            # Unchanged since before llmapi quantized: such a key must not move on upgrade.
            return {**common, "runtime": "llmapi", "model": model}
        return {**common, "runtime": "llmapi", "model": model, "quantization": {
            # What hf_ptq.py is given (llmapi_quantize_argv) and which ModelOpt the image has.
            **q.to_wire(), "trtllmVersion": str(resolve_trtllm_version(spec)),
            "trustRemoteCode": spec.model.trustRemoteCode,
        }}
    return {
        **common,
        "runtime": spec.runtime,
        "model": {**model, "architecture": spec.model.architecture},
        "trtllmVersion": str(resolve_trtllm_version(spec)),
        "engine": spec.engine.to_wire(),
        "gpuProduct": spec.gpu.product,
    }


def engine_key(dep: TritonLLMDeployment) -> str:
    return stable_hash(engine_key_inputs(dep))


def download_key(dep: TritonLLMDeployment, source: str, revision: str) -> str:
    """Names the directory one Hugging Face download goes to (see the module docstring)."""
    return stable_hash({
        "schema": ENGINE_KEY_SCHEMA,
        "source": source,
        "revision": revision,
        "image": dep.spec.image,
        "buildPod": build_pod_inputs(dep),
    })


# Where a key's repository lives is part of what the key addresses: the plans name the directory,
# and the plan ConfigMap of a key is immutable, so a new layout must be a new key (2: one
# directory per content key and namespace, `_shared`; 1, unnamed: one per deployment).
REPOSITORY_LAYOUT = "2"


def repository_key(files: dict[str, str]) -> str:
    """Content address of a rendered model repository (plus its launch plan) in the store's
    layout of repositories."""
    return stable_hash([REPOSITORY_LAYOUT, *sorted(files.items())], length=10)


# --- names --------------------------------------------------------------------------------


def build_job_name(key: str, runtime: str = "engine", quantized: bool = False) -> str:
    """The build Job of a key: a build (engine), a download (llmapi), or a download and a
    ModelOpt quantization (llmapi with engine.quantization)."""
    if runtime == "llmapi":
        return f"tritonllm-{'quantize' if quantized else 'download'}-{key}"
    return f"tritonllm-build-{key}"


def job_name_of(dep: TritonLLMDeployment, key: str) -> str:
    """build_job_name for a deployment."""
    return build_job_name(key, dep.spec.runtime, llmapi_quantized(dep))


def llmapi_quantized(dep: TritonLLMDeployment) -> bool:
    """Runtime llmapi with a ModelOpt pre-quantization step: its key's directory holds the
    quantized checkpoint (with artifact.json, as an engine), which model.yaml loads."""
    return dep.spec.runtime == "llmapi" and dep.spec.engine.quantization.format != "none"


def llmapi_model_dir(dep: TritonLLMDeployment, key: str) -> str:
    """What llmapi's model.yaml `model` names: the quantized checkpoint, else the weights."""
    return engine_dir(key) if llmapi_quantized(dep) else weights_dir(dep)


def repository_job_name(dep: TritonLLMDeployment, repo_key: str) -> str:
    """The repository Job of a content key: one per namespace, shared by every deployment that
    renders this repository (the key covers the engine key, and so the claim). Its controller
    is the deployment that created it; the others read it (tritonllm.plan.repository)."""
    del dep  # one Job per content, whoever needs it
    return f"tritonllm-repo-{repo_key}"


def plan_configmap_name(dep: TritonLLMDeployment, repo_key: str) -> str:
    return f"{dep.name}-{repo_key}"


def serving_name(dep: TritonLLMDeployment) -> str:
    return dep.name


def mpi_secret_name(dep: TritonLLMDeployment) -> str:
    return f"{dep.name}-mpi-ssh"


# --- labels -------------------------------------------------------------------------------


def base_labels(dep: TritonLLMDeployment, component: str) -> dict[str, str]:
    return {
        c.LABEL_NAME: c.APP_NAME,
        c.LABEL_INSTANCE: dep.name,
        c.LABEL_COMPONENT: component,
        c.LABEL_MANAGED_BY: c.APP_NAME,
    }


def selector_labels(dep: TritonLLMDeployment) -> dict[str, str]:
    """Immutable selector of the serving pods (Deployment/LWS selectors cannot change)."""
    return {
        c.LABEL_NAME: c.APP_NAME,
        c.LABEL_INSTANCE: dep.name,
        c.LABEL_COMPONENT: c.COMPONENT_SERVER,
    }


def selector_string(dep: TritonLLMDeployment) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(dep).items()))


def shared_labels(key: str, component: str) -> dict[str, str]:
    """Labels of objects shared by every deployment with one engine key (build Job, plan)."""
    return {
        c.LABEL_NAME: c.APP_NAME,
        c.LABEL_COMPONENT: component,
        c.LABEL_MANAGED_BY: c.APP_NAME,
        c.LABEL_ENGINE_KEY: key,
    }


# --- paths on the model store -------------------------------------------------------------


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", part)


def plain_path_problem(path: str) -> str | None:
    """Why `path` (absolute, or relative to a claim) is not a plain path, or None: every segment
    is a name, never empty, '.' or '..', and never starts with '-'."""
    for seg in path.removeprefix("/").split("/"):
        if seg in ("", ".", ".."):
            return f"{path!r} has an empty, '.' or '..' segment"
        if seg.startswith("-"):
            return f"{path!r} has a segment starting with '-'"
    return None


def _plain(path: str, field: str) -> str:
    """`path`, or InvalidDeployment naming `field` (what admission and parsing refuse already;
    this holds for objects admitted under an older CRD)."""
    problem = plain_path_problem(path)
    if problem:
        raise InvalidDeployment([FieldError(field, f"{problem}: paths on the model store must "
                                                   "be plain directory names")])
    return path


def engine_dir(key: str) -> str:
    _check_key(key)
    return f"{c.STORE_MOUNT}/engines/{key}"


def checkpoint_dir(key: str) -> str:
    _check_key(key)
    return f"{c.STORE_MOUNT}/checkpoints/{key}"


def _check_key(key: str) -> None:
    if not is_engine_key(key):
        raise ValueError(f"{key!r} is not an engine key ({KEY_LENGTH} lowercase hex digits)")


SOURCE_MOUNT = "/source"
# A tokenizer on a third claim (neither the store nor the model's) is mounted here.
TOKENIZER_SOURCE_MOUNT = "/source-tokenizer"


def source_dir(
    dep: TritonLLMDeployment, source: str, revision: str, field: str = "spec.model.source"
) -> str:
    """Where a model/tokenizer source is found inside pods.

    hf:// sources are downloaded under /store/models/hf/<org>/<name>/<revision>/<download key>;
    pvc:// sources on the store claim are read in place, and those on another claim are mounted
    at /source.
    """
    if source.startswith("hf://"):
        org, name = source.removeprefix("hf://").split("/", 1)
        # The revision is the one segment a user may choose freely ("refs/pr/1" is one).
        _plain(revision, field.removesuffix(".source") + ".revision")
        where = f"{_safe(org)}/{_safe(name)}/{_safe(revision)}"
        dkey = download_key(dep, source, revision)
        return _plain(f"{c.STORE_MOUNT}/models/hf/{where}/{dkey}", field)
    claim, path = source.removeprefix("pvc://").split("/", 1)
    root = c.STORE_MOUNT if claim == dep.spec.storage.claimName else source_claims(dep)[claim]
    return _plain(f"{root}/{_plain(path.removesuffix('/'), field)}", field)


def weights_dir(dep: TritonLLMDeployment) -> str:
    return source_dir(dep, dep.spec.model.source, dep.spec.model.revision)


def tokenizer_dir(dep: TritonLLMDeployment) -> str:
    tok = dep.spec.model.tokenizer.source
    if not tok:
        return weights_dir(dep)
    return source_dir(dep, tok, "main", field="spec.model.tokenizer.source")


# The directory of the namespace's repositories by content key. "_" is not a character of a
# Kubernetes name, so no directory of the earlier layout (repos/<ns>/<deployment>/<key>, one
# per deployment) can be it.
SHARED_REPOSITORIES = "_shared"


def repository_dir(dep: TritonLLMDeployment, repo_key: str) -> str:
    """Where a repository revision is served from: one directory per content key and
    namespace, whichever deployment's Job wrote it. The Job may write only its key's directory
    (`repository_key_dir`), where it builds the copy beside this one and renames it into
    place."""
    return f"{repository_key_dir(dep, repo_key)}/repository"


def repository_key_dir(dep: TritonLLMDeployment, repo_key: str) -> str:
    return f"{c.STORE_MOUNT}/repos/{dep.namespace}/{SHARED_REPOSITORIES}/{repo_key}"


def _claim_of(source: str | None) -> str | None:
    if not source or not source.startswith("pvc://"):
        return None
    return source.removeprefix("pvc://").split("/", 1)[0]


def source_claim(dep: TritonLLMDeployment) -> str | None:
    """A claim other than the store that holds the model (pvc:// source), if any."""
    claim = _claim_of(dep.spec.model.source)
    return None if claim == dep.spec.storage.claimName else claim


def source_claims(dep: TritonLLMDeployment) -> dict[str, str]:
    """Claims other than the store that pods read sources from -> where they are mounted: the
    model's at /source, a tokenizer's on yet another claim at /source-tokenizer."""
    out: dict[str, str] = {}
    model = source_claim(dep)
    if model:
        out[model] = SOURCE_MOUNT
    tok = _claim_of(dep.spec.model.tokenizer.source)
    if tok and tok != dep.spec.storage.claimName and tok not in out:
        out[tok] = TOKENIZER_SOURCE_MOUNT
    return out
