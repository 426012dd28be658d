"""Keys, names, labels and paths: the identities every rendered object is built from.

The engine key is a stable hash of everything that changes the engine bytes (model source and
revision, runtime, image and TensorRT-LLM version, dtype, quantization, parallelism, build limits,
plugins, GPU product). It names the engine directory (/store/engines/<key>) and the build Job, so
deployments with equal keys share one build and one engine, and a deployment deleted and applied
again finds its engine. Serving-only fields (replicas, batching, KV cache, ...) are not in it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment, resolve_trtllm_version

KEY_LENGTH = 16
ENGINE_KEY_SCHEMA = 1  # bump when the key's inputs change meaning (forces rebuilds)


def stable_hash(data: Any, length: int = KEY_LENGTH) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def engine_key_inputs(dep: TritonLLMDeployment) -> dict[str, Any]:
    """Exactly the fields that make an engine (or, for llmapi, a downloaded checkpoint)."""
    spec = dep.spec
    model = {"source": spec.model.source, "revision": spec.model.revision}
    if spec.runtime == "llmapi":
        return {"schema": ENGINE_KEY_SCHEMA, "runtime": "llmapi", "model": model}
    return {
        "schema": ENGINE_KEY_SCHEMA,
        "runtime": spec.runtime,
        "model": {**model, "architecture": spec.model.architecture},
        "image": spec.image,
        "trtllmVersion": str(resolve_trtllm_version(spec)),
        "engine": spec.engine.to_wire(),
        "gpuProduct": spec.gpu.product,
    }


def engine_key(dep: TritonLLMDeployment) -> str:
    return stable_hash(engine_key_inputs(dep))


def repository_key(files: dict[str, str]) -> str:
    """Content address of a rendered model repository (plus its launch plan)."""
    return stable_hash(sorted(files.items()), length=10)


# --- names --------------------------------------------------------------------------------


def build_job_name(key: str, runtime: str = "engine") -> str:
    prefix = "tritonllm-download" if runtime == "llmapi" else "tritonllm-build"
    return f"{prefix}-{key}"


def repository_job_name(dep: TritonLLMDeployment, repo_key: str) -> str:
    return f"{dep.name}-repo-{repo_key}"


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


def engine_dir(key: str) -> str:
    return f"{c.STORE_MOUNT}/engines/{key}"


def checkpoint_dir(key: str) -> str:
    return f"{c.STORE_MOUNT}/checkpoints/{key}"


SOURCE_MOUNT = "/source"
# A tokenizer on a third claim (neither the store nor the model's) is mounted here.
TOKENIZER_SOURCE_MOUNT = "/source-tokenizer"


def source_dir(dep: TritonLLMDeployment, source: str, revision: str) -> str:
    """Where a model/tokenizer source is found inside pods.

    hf:// sources are downloaded under /store/models/hf/<org>/<name>/<revision>; pvc:// sources on
    the store claim are read in place, and those on another claim are mounted at /source.
    """
    if source.startswith("hf://"):
        org, name = source.removeprefix("hf://").split("/", 1)
        return f"{c.STORE_MOUNT}/models/hf/{_safe(org)}/{_safe(name)}/{_safe(revision)}"
    claim, path = source.removeprefix("pvc://").split("/", 1)
    root = c.STORE_MOUNT if claim == dep.spec.storage.claimName else source_claims(dep)[claim]
    return f"{root}/{path.strip('/')}"


def weights_dir(dep: TritonLLMDeployment) -> str:
    return source_dir(dep, dep.spec.model.source, dep.spec.model.revision)


def tokenizer_dir(dep: TritonLLMDeployment) -> str:
    tok = dep.spec.model.tokenizer.source
    return source_dir(dep, tok, "main") if tok else weights_dir(dep)


def repository_dir(dep: TritonLLMDeployment, repo_key: str) -> str:
    return f"{c.STORE_MOUNT}/repos/{dep.namespace}/{dep.name}/{repo_key}"


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
