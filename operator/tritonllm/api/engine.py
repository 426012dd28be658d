"""TritonLLMEngine: the operator's record of one engine on a model store (the engine cache).

One object per engine key and namespace, written by the operator (never by users) and not owned
by any TritonLLMDeployment: it outlives them, so a deployment deleted and applied again, or a second
deployment with the same key, finds the engine Ready and starts no build. `kubectl get tllme`
lists the cache; deleting an object forgets the engine (its files stay unless a deployment with
storage.engineRetention Delete removed them).
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import Field

from .base import ApiModel

# An engine key: the first 16 hex digits of a SHA-256 (tritonllm.render.naming.engine_key). It
# names directories that the engine-cleanup Job deletes, so it is checked wherever it is read
# back from the cluster (a status, a label) before it is used in a path.
ENGINE_KEY_LENGTH: Final = 16
ENGINE_KEY_PATTERN: Final = f"^[0-9a-f]{{{ENGINE_KEY_LENGTH}}}$"


# The build's report of what it wrote (tritonllm.runtime.verified): "sha256:" and 64 hex digits.
DIGEST_PATTERN: Final = "^sha256:[0-9a-f]{64}$"


def is_digest(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(DIGEST_PATTERN, value) is not None


def is_engine_key(value: object) -> bool:
    """Whether `value` has the exact shape of an engine key (lowercase hex, fixed length)."""
    return isinstance(value, str) and re.fullmatch(ENGINE_KEY_PATTERN, value) is not None


class EngineModel(ApiModel):
    """The checkpoint the engine was built from."""

    source: str
    """hf://org/name or pvc://claim/path."""
    revision: str
    """Hub revision."""


class TritonLLMEngineSpec(ApiModel):
    """What the engine is (every field is an input of its key)."""

    key: str = Field(pattern=ENGINE_KEY_PATTERN)
    """Engine key; also the object's name and the engine directory's name."""
    runtime: Literal["engine", "llmapi"]
    """engine: a TensorRT engine; llmapi: a downloaded checkpoint."""
    image: str
    """Image that builds it (and must serve it)."""
    trtllmVersion: str
    """TensorRT-LLM version of that image."""
    model: EngineModel
    """Source checkpoint."""
    dtype: str
    """Weights dtype."""
    quantization: str
    """Quantization format."""
    tensorParallel: int = Field(ge=1)
    """tp."""
    pipelineParallel: int = Field(ge=1)
    """pp."""
    gpuProduct: str | None = None
    """GPU product it was built on."""
    claimName: str
    """Model-store claim holding it."""
    path: str
    """Directory on the claim."""


class EngineFailure(ApiModel):
    """The last failed build attempt."""

    reason: str
    """Job or container failure reason."""
    message: str = ""
    """The tail of the build log (container termination message)."""
    time: str
    """When the failure was observed (RFC 3339)."""
    job: str = ""
    """UID of the failed Job (each failure is counted once)."""


class TritonLLMEngineStatus(ApiModel):
    """Build state of the engine."""

    state: Literal["Pending", "Building", "Ready", "Failed"] = "Pending"
    """Pending, Building, Ready or Failed (Failed after the last retry)."""
    attempts: int = 0
    """Build attempts that failed so far."""
    buildJob: str | None = None
    """Name of the build Job."""
    buildJobUid: str | None = None
    """UID of the build Job the operator created (only that Job's result is trusted)."""
    buildPlanUid: str | None = None
    """UID of the build plan ConfigMap the operator created (only that plan is trusted)."""
    lastFailure: EngineFailure | None = None
    """The last failed attempt."""
    builtAt: str | None = None
    """When the build finished (RFC 3339)."""
    builtFor: str | None = None
    """UID of the deployment whose reconcile started the build (others reuse it: cache hits)."""
    digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    """Engine digest the build Job reported in its termination message (the name, size and
    sha256 of every engine file); serving pods refuse an engine on the store whose artifact.json
    gives another. None: an engine built before builds reported it."""
    fingerprintDigest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    """Digest of the engine files' size, mtime, ctime and inode when the build hashed them:
    serving pods that find the same skip hashing the engine again."""
    message: str | None = None
    """Human-readable state."""
