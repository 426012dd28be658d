"""The TritonLLMEngine record of an engine key (spec only; the operator writes its status)."""

from __future__ import annotations

from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment

from . import naming
from .manifest import Manifest


def engine_record(dep: TritonLLMDeployment, key: str) -> Manifest:
    spec = dep.spec
    body: dict[str, Any] = {
        "apiVersion": c.API_VERSION,
        "kind": c.ENGINE_KIND,
        "metadata": {
            "name": key,
            "namespace": dep.namespace,
            # No owner: the record (and the engine it names) outlives the deployments using it.
            "labels": naming.shared_labels(key, c.COMPONENT_BUILD),
        },
        "spec": {
            "key": key,
            "runtime": spec.runtime,
            "image": spec.image,
            "trtllmVersion": str(dep.trtllm_version),
            "model": {"source": spec.model.source, "revision": spec.model.revision},
            "dtype": spec.engine.dtype,
            "quantization": spec.engine.quantization.format,
            "tensorParallel": spec.topology.tensor,
            "pipelineParallel": spec.topology.pipeline,
            **({"gpuProduct": spec.gpu.product} if spec.gpu.product else {}),
            "claimName": spec.storage.claimName,
            "path": naming.engine_dir(key),
        },
    }
    return Manifest.of(body)
