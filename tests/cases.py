"""Shared test data: a minimal valid CR and a table of invalid ones.

The same table drives the unit tests (pydantic + rules, `tritonllm render` exit code 2) and the
cluster tests (the API server's schema and CEL rules reject the same objects), so both layers are
held to one list of mistakes and the field each must name.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# Examples reconciled on the simulated (kwok) GPU nodes; the others run real containers on the
# real node (tests/cluster/test_real_flow.py).
SIMULATED_EXAMPLES = [p for p in EXAMPLES if "tritonllm.io/real-node" not in p.read_text()]

BASE: dict[str, Any] = {
    "apiVersion": "tritonllm.io/v1alpha1",
    "kind": "TritonLLMDeployment",
    "metadata": {"name": "demo", "namespace": "default"},
    "spec": {
        "image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
        "model": {"source": "hf://meta-llama/Llama-2-7b-hf"},
    },
}


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `patch` into a copy of `base`; a None value deletes the key."""
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def cr(spec_patch: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """BASE with a patch applied to spec (and optional top-level patches, e.g. metadata)."""
    obj = merge(BASE, {"spec": spec_patch or {}})
    return merge(obj, top)


@dataclass(frozen=True)
class Invalid:
    id: str
    obj: dict[str, Any]
    # The field the error must name (a substring of the reported path).
    field: str
    # Whether the API server rejects it at admission (schema or CEL). False: only the operator
    # can tell (it needs the image version table or GPU knowledge).
    admission: bool = True
    # A substring of the message the user must see (CEL message or ours).
    says: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


INVALID: list[Invalid] = [
    Invalid("tp-zero", cr({"engine": {"parallelism": {"tensor": 0}}}), "engine.parallelism.tensor"),
    Invalid(
        "pp-negative",
        cr({"engine": {"parallelism": {"pipeline": -1}}}),
        "engine.parallelism.pipeline",
    ),
    Invalid(
        "tp-wrong-type",
        cr({"engine": {"parallelism": {"tensor": "four"}}}),
        "engine.parallelism.tensor",
    ),
    Invalid(
        "world-fits-no-node",
        cr({"engine": {"parallelism": {"tensor": 4, "pipeline": 3}}, "gpu": {"perNode": 8}}),
        "engine.parallelism",
        says="world size",
    ),
    Invalid(
        "tp-straddles-nodes",
        cr({"engine": {"parallelism": {"tensor": 3, "pipeline": 8}}, "gpu": {"perNode": 8}}),
        "engine.parallelism.tensor",
        says="straddle",
    ),
    Invalid(
        "multi-node-as-root",
        cr({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}, "gpu": {"perNode": 8},
            "podTemplate": {"runAsUser": 0}}),
        "podTemplate.runAsUser",
        says="cannot run as root",
    ),
    Invalid(
        "llmapi-multi-node-as-root",  # an llmapi group starts its ranks over the same sshd
        cr({"runtime": "llmapi", "image": "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3",
            "engine": {"parallelism": {"tensor": 2, "pipeline": 1}}, "gpu": {"perNode": 1},
            "podTemplate": {"runAsUser": 0}}),
        "podTemplate.runAsUser",
        says="cannot run as root",
    ),
    Invalid(
        "unknown-quantization",
        cr({"engine": {"quantization": {"format": "int3_magic"}}}),
        "engine.quantization.format",
    ),
    Invalid(
        "awq-with-float32",
        cr({"engine": {"dtype": "float32", "quantization": {"format": "int4_awq"}}}),
        "engine.quantization.format",
        says="float16 or bfloat16",
    ),
    Invalid("no-model-source", cr({"model": {"source": None, "revision": "main"}}), "model.source"),
    Invalid(
        "bad-model-source",
        cr({"model": {"source": "s3://bucket/llama"}}),
        "model.source",
        says="hf://",
    ),
    Invalid("no-spec", merge(BASE, {"spec": None}), "spec"),
    Invalid(
        "seq-not-above-input",
        cr({"engine": {"limits": {"maxInputLen": 2048, "maxSeqLen": 1024}}}),
        "engine.limits.maxSeqLen",
        says="greater than",
    ),
    Invalid(
        "negative-batch",
        cr({"engine": {"limits": {"maxBatchSize": -4}}}),
        "engine.limits.maxBatchSize",
    ),
    Invalid(
        "kv-fraction-above-one",
        cr({"serving": {"kvCache": {"freeGpuMemFraction": 1.5}}}),
        "serving.kvCache.freeGpuMemFraction",
    ),
    Invalid(
        "kv-tokens-below-seq",
        cr({"serving": {"kvCache": {"maxTokens": 100}}}),
        "serving.kvCache.maxTokens",
        says="full sequence",
    ),
    Invalid("malformed-image", cr({"image": "NVCR.io/Nvidia/Triton Server:latest"}), "image"),
    Invalid(
        "streaming-with-v1",
        cr({"serving": {"streaming": True, "batching": "V1"}}),
        "serving.streaming",
        says="in-flight batching",
    ),
    Invalid(
        "autoscaling-min-above-max",
        cr({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}),
        "autoscaling.minReplicas",
        says="must not exceed",
    ),
    Invalid(
        "scale-to-zero-with-hpa",
        cr({"autoscaling": {"minReplicas": 0, "maxReplicas": 2}}),
        "autoscaling.minReplicas",
        says="needs autoscaler: KEDA",
    ),
    Invalid(
        "keda-on-cpu",
        cr({"autoscaling": {"autoscaler": "KEDA", "maxReplicas": 2, "metric": "cpu",
                            "target": "80"}}),
        "autoscaling.metric",
        says="HPA only",
    ),
    Invalid(
        "keda-prometheus-url-not-http",
        cr({"autoscaling": {"autoscaler": "KEDA", "maxReplicas": 2,
                            "prometheusUrl": "prometheus:9090"}}),
        "autoscaling.prometheusUrl",
    ),
    Invalid("negative-replicas", cr({"serving": {"replicas": -1}}), "serving.replicas"),
    Invalid("unknown-field", cr({"engine": {"tensorParallel": 2}}), "engine.tensorParallel"),
    Invalid(
        "kv-reuse-without-paged-fmha",
        cr(
            {
                "serving": {"kvCache": {"enableReuse": True}},
                "engine": {"plugins": {"pagedContextFmha": False}},
            }
        ),
        "serving.kvCache.enableReuse",
        says="pagedContextFmha",
    ),
    Invalid(
        "llmapi-with-engine-only-quantization",
        cr(
            {
                "runtime": "llmapi",
                "image": "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3",
                "engine": {"quantization": {"format": "int8_sq"}},
            }
        ),
        "engine.quantization.format",
        says="fp8, int4_awq, w4a8_awq, nvfp4",
    ),
    Invalid(
        "llmapi-with-int8-kv-cache",
        cr(
            {
                "runtime": "llmapi",
                "image": "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3",
                "engine": {"quantization": {"format": "fp8", "kvCacheDtype": "int8"}},
            }
        ),
        "engine.quantization.format",
        says="int8 KV cache need runtime engine",
    ),
    Invalid(
        "bls-instances-without-bls",
        cr({"serving": {"instances": {"bls": 8}}}),
        "serving.instances.bls",
    ),
    Invalid(
        "llmapi-autoscaling-on-tritons-queue",
        cr(
            {
                "runtime": "llmapi",
                "image": "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3",
                "autoscaling": {"maxReplicas": 2, "metric": "pendingRequests"},
            }
        ),
        "autoscaling.metric",
        says="backendWaitingRequests",
    ),
    Invalid(
        "llmapi-backend-metrics-before-iteration-statistics",
        cr(
            {
                "runtime": "llmapi",
                "image": "nvcr.io/nvidia/tritonserver:25.07-trtllm-python-py3",
                "autoscaling": {"maxReplicas": 2},
            }
        ),
        "spec.autoscaling.metric",
        admission=False,
        says="0.21",
    ),
    Invalid(
        "llmapi-with-bls",
        cr(
            {
                "runtime": "llmapi",
                "image": "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3",
                "serving": {"bls": True},
            }
        ),
        "serving.bls",
        says="runtime engine",
    ),
    Invalid(
        "bls-instances-above-batch",
        cr(
            {
                "serving": {"bls": True, "instances": {"bls": 128}},
                "engine": {"limits": {"maxBatchSize": 8}},
            }
        ),
        "serving.instances.bls",
        says="maxBatchSize",
    ),
    # Options of another quantization format than the chosen one.
    Invalid(
        "awq-block-without-awq",
        cr({"engine": {"quantization": {"format": "int8_wo", "awqBlockSize": 64}}}),
        "engine.quantization.awqBlockSize",
        says="applies to the AWQ formats",
    ),
    Invalid(
        "awq-block-with-int8-sq",
        cr({"engine": {"quantization": {"format": "int8_sq", "awqBlockSize": 64}}}),
        "engine.quantization.awqBlockSize",
        says="applies to the AWQ formats",
    ),
    Invalid(
        "calibration-size-without-calibration",
        cr({"engine": {"quantization": {"format": "int4_wo", "calibrationSize": 64}}}),
        "engine.quantization.calibrationSize",
        says="applies to the calibrated formats",
    ),
    Invalid(
        "calibration-dataset-without-calibration",
        cr({"engine": {"quantization": {"format": "none",
                                        "calibrationDataset": "cnn_dailymail"}}}),
        "engine.quantization.calibrationDataset",
        says="applies to the calibrated formats",
    ),
    Invalid(
        "int8-sq-with-fp8-kv",
        cr({"engine": {"quantization": {"format": "int8_sq", "kvCacheDtype": "fp8"}}}),
        "engine.quantization.kvCacheDtype",
        says="int8",
    ),
    Invalid("bad-shm-quantity", cr({"podTemplate": {"shmSize": "lots"}}), "podTemplate.shmSize"),
    # --- hardening: quantities, paths, label syntax, sizes, autoscaling targets ---------------
    Invalid(
        "hpa-cpu-millicores",
        cr({"autoscaling": {"maxReplicas": 3, "metric": "cpu", "target": "500m"}}),
        "autoscaling.target",
        says="utilization percentage",
    ),
    Invalid(
        "hpa-cpu-fraction",
        cr({"autoscaling": {"maxReplicas": 3, "metric": "cpu", "target": "0.5"}}),
        "autoscaling.target",
        says="utilization percentage",
    ),
    Invalid(
        "hpa-cpu-zero",
        cr({"autoscaling": {"maxReplicas": 3, "metric": "cpu", "target": "0"}}),
        "autoscaling.target",
        says="utilization percentage",
    ),
    Invalid(
        "hpa-pods-zero",
        cr({"autoscaling": {"maxReplicas": 3, "metric": "pendingRequests", "target": "0"}}),
        "autoscaling.target",
        says="above 0",
    ),
    Invalid(
        "cpu-junk-quantity",
        cr({"podTemplate": {"resources": {"cpu": "8 cores"}}}),
        "podTemplate.resources.cpu",
    ),
    Invalid(
        "memory-negative",
        cr({"podTemplate": {"resources": {"memory": "-64Gi"}}}),
        "podTemplate.resources.memory",
    ),
    Invalid(
        "pvc-path-escapes-claim",
        cr({"model": {"source": "pvc://models/llama/../../etc"}}),
        "model.source",
        says="inside its claim",
    ),
    Invalid(
        "tokenizer-path-escapes-claim",
        cr({"model": {"tokenizer": {"source": "pvc://models/.."}}}),
        "model.tokenizer.source",
        says="inside its claim",
    ),
    # Path-bearing fields become directories and subPaths on the model store: no '.', '..' or
    # empty segments, no segment starting with '-' (tests/unit/test_store_paths.py).
    Invalid(
        "revision-dot",  # /store/models/hf/<org>/<name>/. : every revision of the model
        cr({"model": {"revision": "."}}),
        "model.revision",
        says="a revision is a branch, tag or commit",
    ),
    Invalid("revision-dotdot-segment", cr({"model": {"revision": "main/../.."}}),
            "model.revision", says="'..'"),
    Invalid("revision-empty-segment", cr({"model": {"revision": "refs//pr"}}),
            "model.revision", says="empty path segments"),
    Invalid("revision-leading-dash", cr({"model": {"revision": "-rf"}}),
            "model.revision", says="starting with '-'"),
    Invalid("pvc-path-dot-segment", cr({"model": {"source": "pvc://models/."}}),
            "model.source", says="inside its claim"),
    Invalid("pvc-path-empty-segment", cr({"model": {"source": "pvc://models//engines"}}),
            "model.source", says="empty path segments"),
    Invalid("pvc-path-leading-dash", cr({"model": {"source": "pvc://models/llama/-x"}}),
            "model.source", says="starting with '-'"),
    Invalid("tokenizer-path-dot-segment",
            cr({"model": {"tokenizer": {"source": "pvc://models/tok/./x"}}}),
            "model.tokenizer.source", says="inside its claim"),
    Invalid(
        "calibration-dataset-option",
        cr({"engine": {"quantization": {"format": "int4_awq",
                                        "calibrationDataset": "--output_dir=/store/engines"}}}),
        "engine.quantization.calibrationDataset",
        says="starting with '-'",
    ),
    Invalid(
        "calibration-dataset-dotdot",
        cr({"engine": {"quantization": {"format": "int4_awq",
                                        "calibrationDataset": "/store/../etc"}}}),
        "engine.quantization.calibrationDataset",
        says="'..'",
    ),
    Invalid(
        "label-key-with-space",
        cr({"podTemplate": {"labels": {"my team": "a"}}}),
        "podTemplate.labels",
        says="label keys",
    ),
    Invalid(
        "label-value-too-long",
        cr({"podTemplate": {"labels": {"team": "x" * 64}}}),
        "podTemplate.labels",
    ),
    Invalid(
        "node-selector-bad-key",
        cr({"podTemplate": {"nodeSelector": {"-gpu": "yes"}}}),
        "podTemplate.nodeSelector",
        says="label keys",
    ),
    Invalid(
        "toleration-value-not-a-label-value",
        cr({"podTemplate": {"tolerations": [{"key": "gpu", "value": "a b"}]}}),
        "podTemplate.tolerations[0].value",
    ),
    Invalid(
        "toleration-exists-with-value",
        cr({"podTemplate": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "a"}]}}),
        "podTemplate.tolerations",
        says="must not set value",
    ),
    Invalid(
        "pod-label-the-operator-writes",
        cr({"podTemplate": {"labels": {"tritonllm.io/engine-key": "0123456789abcdef"}}}),
        "podTemplate.labels",
        says="set by the operator",
    ),
    Invalid(
        "pod-annotation-the-operator-writes",
        cr({"podTemplate": {"annotations": {"tritonllm.io/spec-hash": "x"}}}),
        "podTemplate.annotations",
        says="set by the operator",
    ),
    Invalid(
        "annotation-of-one-megabyte",
        cr({"podTemplate": {"annotations": {"note": "x" * (1 << 20)}}}),
        "podTemplate.annotations.note",
    ),
    Invalid(
        "too-many-annotations",
        cr({"podTemplate": {"annotations": {f"a{i}": "x" for i in range(33)}}}),
        "podTemplate.annotations",
    ),
    Invalid(
        "storage-class-not-a-name",
        cr({"storage": {"create": {"size": "10Gi", "storageClassName": "Fast_SSD"}}}),
        "storage.create.storageClassName",
    ),
    Invalid(
        "extra-parameter-bad-key",
        cr({"serving": {"extraParameters": {"max-tokens": "3"}}}),
        "serving.extraParameters",
        says="parameter names",
    ),
    Invalid(
        "network-policy-cidr-without-prefix",
        cr({"networkPolicy": {"fromCidrs": ["10.0.0.1"]}}),
        "networkPolicy.fromCidrs[0]",
    ),
    Invalid(
        "network-policy-namespace-not-a-name",
        cr({"networkPolicy": {"fromNamespaces": ["Ingress_NS"]}}),
        "networkPolicy.fromNamespaces[0]",
    ),
    Invalid(
        "tp-quoted-number",
        cr({"engine": {"parallelism": {"tensor": "2"}}}),
        "engine.parallelism.tensor",
    ),
    Invalid("name-too-long", cr(metadata={"name": "a" * 45}), "metadata.name"),
    Invalid("name-starts-with-digit", cr(metadata={"name": "7b-llama"}), "metadata.name"),
    # --- second round: what used to be admitted and failed later (docs/hardening.md) --------
    # Zero quantities where something must be stored or run.
    Invalid("cpu-zero", cr({"podTemplate": {"resources": {"cpu": "0"}}}),
            "podTemplate.resources.cpu", extra={"class": "zero quantity"}),
    Invalid("memory-zero-as-a-number", cr({"podTemplate": {"resources": {"memory": 0}}}),
            "podTemplate.resources.memory", extra={"class": "zero quantity"}),
    Invalid("memory-zero-point-zero", cr({"podTemplate": {"resources": {"memory": "0.0Gi"}}}),
            "podTemplate.resources.memory", extra={"class": "zero quantity"}),
    Invalid("shm-zero", cr({"podTemplate": {"shmSize": "0Gi"}}), "podTemplate.shmSize",
            extra={"class": "zero quantity"}),
    Invalid("claim-size-zero", cr({"storage": {"create": {"size": "0"}}}),
            "storage.create.size", extra={"class": "zero quantity"}),
    # Integers beyond int64 or beyond what the field downstream holds.
    Invalid("run-as-user-beyond-int32", cr({"podTemplate": {"runAsUser": 2**31}}),
            "podTemplate.runAsUser", extra={"class": "integer range"}),
    Invalid("host-memory-beyond-int64", cr({"serving": {"kvCache": {"hostMemoryBytes": 2**63}}}),
            "serving.kvCache.hostMemoryBytes", extra={"class": "integer range"}),
    Invalid("kv-tokens-beyond-int32", cr({"serving": {"kvCache": {"maxTokens": 2**31}}}),
            "serving.kvCache.maxTokens", extra={"class": "integer range"}),
    Invalid("attention-window-beyond-int32",
            cr({"serving": {"kvCache": {"maxAttentionWindowSize": 2**31}}}),
            "serving.kvCache.maxAttentionWindowSize", extra={"class": "integer range"}),
    Invalid("toleration-seconds-beyond-int64",
            cr({"podTemplate": {"tolerations": [{"key": "gpu", "effect": "NoExecute",
                                                 "tolerationSeconds": 2**63}]}}),
            "podTemplate.tolerations[0].tolerationSeconds", extra={"class": "integer range"}),
    Invalid("toleration-seconds-negative",
            cr({"podTemplate": {"tolerations": [{"key": "gpu", "effect": "NoExecute",
                                                 "tolerationSeconds": -1}]}}),
            "podTemplate.tolerations[0].tolerationSeconds", extra={"class": "integer range"}),
    Invalid("memory-exponent-overflow", cr({"podTemplate": {"resources": {"memory": "1e30"}}}),
            "podTemplate.resources.memory", extra={"class": "integer range"}),
    Invalid("memory-of-65-digits", cr({"podTemplate": {"resources": {"memory": "1" * 65}}}),
            "podTemplate.resources.memory", extra={"class": "integer range"}),
    # Strings that become keys, files, arguments or environments.
    Invalid("secret-key-with-a-slash",
            cr({"model": {"credentials": {"secretName": "hf", "key": "hf/token"}}}),
            "model.credentials.key", says="Secret key", extra={"class": "string"}),
    Invalid("secret-key-dotdot",
            cr({"model": {"credentials": {"secretName": "hf", "key": ".."}}}),
            "model.credentials.key", extra={"class": "string"}),
    Invalid("secret-key-starting-with-dotdot",  # the kubelet's own ..data link of a volume
            cr({"model": {"credentials": {"secretName": "hf", "key": "..data"}}}),
            "model.credentials.key", extra={"class": "string"}),
    Invalid("env-value-with-nul",
            cr({"podTemplate": {"env": [{"name": "MODE", "value": "a\x00b"}]}}),
            "podTemplate.env[0].value", extra={"class": "string"}),
    Invalid("annotation-value-with-nul",
            cr({"podTemplate": {"annotations": {"note": "a\x00b"}}}),
            "podTemplate.annotations.note", extra={"class": "string"}),
    Invalid("extra-parameter-with-a-newline",  # a second line of config.pbtxt
            cr({"serving": {"extraParameters": {"gpu_device_ids": "0\nparameters {}"}}}),
            "serving.extraParameters", extra={"class": "string"}),
    Invalid("extra-parameter-with-an-escape",
            cr({"serving": {"extraParameters": {"gpu_device_ids": "\x1b[2J"}}}),
            "serving.extraParameters", extra={"class": "string"}),
    Invalid("hf-name-longer-than-the-hub-allows",
            cr({"model": {"source": "hf://meta-llama/" + "a" * 97}}),
            "model.source", extra={"class": "string"}),
    Invalid("pvc-path-with-nul", cr({"model": {"source": "pvc://models/llama\x00x"}}),
            "model.source", extra={"class": "string"}),
    Invalid("pvc-claim-longer-than-a-name", cr({"model": {"source": "pvc://" + "a" * 254 + "/x"}}),
            "model.source", extra={"class": "string"}),
    Invalid("gpu-product-leading-dash", cr({"gpu": {"product": "-H100"}}), "gpu.product",
            extra={"class": "string"}),
    Invalid("gpu-product-longer-than-a-label-value", cr({"gpu": {"product": "A" * 64}}),
            "gpu.product", extra={"class": "string"}),
    Invalid("prometheus-url-with-nul",
            cr({"autoscaling": {"autoscaler": "KEDA", "maxReplicas": 2,
                                "prometheusUrl": "http://prometheus\x00:9090"}}),
            "autoscaling.prometheusUrl", extra={"class": "string"}),
    Invalid("trtllm-version-of-65-characters", cr({"trtllmVersion": "1.2" + "a" * 62}),
            "trtllmVersion", extra={"class": "string"}),
    # Pod settings that collide with what the operator, mpirun, LWS or the device plugin set.
    Invalid("env-home", cr({"podTemplate": {"env": [{"name": "HOME", "value": "/"}]}}),
            "podTemplate.env", says="must not set", extra={"class": "collision"}),
    Invalid("env-all-gpus-of-the-node",
            cr({"podTemplate": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}}),
            "podTemplate.env", says="must not set", extra={"class": "collision"}),
    Invalid("env-token-in-plain-text",
            cr({"podTemplate": {"env": [{"name": "HF_TOKEN", "value": "hf_x"}]}}),
            "podTemplate.env", says="model.credentials", extra={"class": "collision"}),
    Invalid("env-mpi-rank",
            cr({"podTemplate": {"env": [{"name": "OMPI_COMM_WORLD_RANK", "value": "0"}]}}),
            "podTemplate.env", says="must not set", extra={"class": "collision"}),
    Invalid("env-lws-leader",
            cr({"podTemplate": {"env": [{"name": "LWS_LEADER_ADDRESS", "value": "x"}]}}),
            "podTemplate.env", says="must not set", extra={"class": "collision"}),
    Invalid("node-selector-on-the-gpu-product",
            cr({"podTemplate": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100"}}}),
            "podTemplate.nodeSelector", says="set gpu.product", extra={"class": "collision"}),
    Invalid("env-twice",
            cr({"podTemplate": {"env": [{"name": "NCCL_DEBUG", "value": "INFO"},
                                        {"name": "NCCL_DEBUG", "value": "WARN"}]}}),
            "podTemplate.env", says="twice", extra={"class": "collision"}),
    # Only the operator can tell these (no version table or GPU knowledge in the API server):
    Invalid(
        "unknown-image-version",
        cr({"image": "registry.local/triton:custom"}),
        "spec.trtllmVersion",
        admission=False,
        says="set spec.trtllmVersion",
    ),
    Invalid(
        "llmapi-on-old-image",
        cr({"runtime": "llmapi"}),
        "spec.runtime",
        admission=False,
        says="0.19",
    ),
    Invalid(
        "engine-on-image-without-engine-path",
        cr({"runtime": "engine", "trtllmVersion": "1.3.0", "image": "registry.local/triton:next"}),
        "spec.runtime",
        says="PR #15907",
    ),
    Invalid(
        "engine-on-ngc-tag-after-the-engine-path",
        cr({"runtime": "engine", "image": "nvcr.io/nvidia/tritonserver:26.08-trtllm-python-py3"}),
        "spec.runtime",
        says="runtime llmapi",
    ),
    Invalid(
        "fp8-on-ampere",
        cr(
            {
                "engine": {"quantization": {"format": "fp8"}},
                "gpu": {"product": "NVIDIA-A100-SXM4-80GB"},
            }
        ),
        "spec.engine.quantization.format",
        admission=False,
        says="Ada",
    ),
    Invalid(
        "awq-on-turing",
        cr({"engine": {"quantization": {"format": "int4_awq"}}, "gpu": {"product": "Tesla-T4"}}),
        "spec.engine.quantization.format",
        admission=False,
        says="Ampere",
    ),
    Invalid(
        "int8-sq-on-volta",
        cr({"engine": {"quantization": {"format": "int8_sq"}}, "gpu": {"product": "Tesla-V100"}}),
        "spec.engine.quantization.format",
        admission=False,
        says="Ampere",
    ),
    Invalid(
        "bf16-on-turing",
        cr({"engine": {"dtype": "bfloat16"}, "gpu": {"product": "Tesla-T4"}}),
        "spec.engine.dtype",
        admission=False,
        says="Ampere",
    ),
    Invalid(
        "nvfp4-on-hopper",
        cr(
            {
                "image": "nvcr.io/nvidia/tritonserver:25.03-trtllm-python-py3",
                "engine": {"quantization": {"format": "nvfp4"}},
                "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
            }
        ),
        "spec.engine.quantization.format",
        admission=False,
        says="Blackwell",
    ),
    # What a version's build tools lack (tritonllm.api.toolflags, from the upstream tables).
    Invalid(
        "gemma-with-pipeline-parallelism",
        cr(
            {
                "model": {"source": "hf://google/gemma-7b", "architecture": "gemma"},
                "engine": {"parallelism": {"tensor": 2, "pipeline": 2}},
                "gpu": {"perNode": 4},
            }
        ),
        "spec.engine.parallelism.pipeline",
        admission=False,
        says="gemma/convert_checkpoint.py of TensorRT-LLM 0.13.0",
    ),
    Invalid(
        "phi-tensor-parallel-on-0.10",
        cr(
            {
                "image": "nvcr.io/nvidia/tritonserver:24.06-trtllm-python-py3",
                "model": {"source": "hf://microsoft/phi-3-mini", "architecture": "phi3"},
                "engine": {"parallelism": {"tensor": 2}},
                "gpu": {"perNode": 2},
            }
        ),
        "spec.engine.parallelism",
        admission=False,
        says="TensorRT-LLM 0.10.0 has no tensor or pipeline parallelism options",
    ),
    Invalid(
        "fp8-kv-cache-with-the-gpt-converter",
        cr(
            {
                "model": {"architecture": "gpt2", "source": "hf://openai-community/gpt2"},
                "engine": {"quantization": {"kvCacheDtype": "fp8"}},
                "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
            }
        ),
        "spec.engine.quantization.kvCacheDtype",
        admission=False,
        says="has no --fp8_kv_cache",
    ),
    Invalid(
        "architecture-auto-that-no-converter-of-0.9-can-convert",
        cr(
            {
                "image": "nvcr.io/nvidia/tritonserver:24.05-trtllm-python-py3",
                "engine": {
                    "parallelism": {"tensor": 1, "pipeline": 2},
                    "quantization": {"kvCacheDtype": "fp8"},
                },
                "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "perNode": 2},
            }
        ),
        "spec.engine.quantization.kvCacheDtype",
        admission=False,
        says="llama/convert_checkpoint.py of TensorRT-LLM 0.9.0 has no --fp8_kv_cache",
    ),
    Invalid(
        "calibration-dataset-on-0.9",
        cr(
            {
                "image": "nvcr.io/nvidia/tritonserver:24.05-trtllm-python-py3",
                "engine": {
                    "quantization": {"format": "int4_awq", "calibrationDataset": "cnn_dailymail"}
                },
                "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
            }
        ),
        "spec.engine.quantization.calibrationDataset",
        admission=False,
        says="TensorRT-LLM 0.9.0 has no --calib_dataset",
    ),
    Invalid(
        "version-contradicts-image-tag",
        cr({"trtllmVersion": "0.9.0"}),
        "spec.trtllmVersion",
        admission=False,
        says="carries TensorRT-LLM",
    ),
    Invalid(
        "tp-does-not-divide-heads",
        cr({"engine": {"parallelism": {"tensor": 3}}}),
        "spec.engine.parallelism.tensor",
        admission=False,
        says="attention heads",
    ),
    Invalid(
        "pp-does-not-divide-layers",
        cr({"engine": {"parallelism": {"pipeline": 5}}}),
        "spec.engine.parallelism.pipeline",
        admission=False,
        says="layers",
    ),
    Invalid(
        "pp-above-layers",
        cr({"engine": {"parallelism": {"pipeline": 64}}}),
        "spec.engine.parallelism.pipeline",
        admission=False,
        says="more than the 32 layers",
    ),
    Invalid(
        "does-not-fit",  # Llama-2-7B float16, 64 x 4096 tokens of 512 KiB on one 22.5 GiB L4
        cr({"engine": {"limits": {"maxSeqLen": 4096}}, "gpu": {"product": "NVIDIA-L4"}}),
        "spec.engine.parallelism",
        admission=False,
        says="tp=1 pp=1 does not fit: weights 12.6 GiB",
    ),
    Invalid(
        "auto-with-tensor",
        cr({"engine": {"parallelism": {"auto": True, "tensor": 2}},
            "gpu": {"product": "NVIDIA-L4"}}),
        "spec.engine.parallelism.auto",
        says="remove them, or remove auto",
    ),
    Invalid(
        "auto-without-product",
        cr({"engine": {"parallelism": {"auto": True}}}),
        "spec.engine.parallelism.auto",
        says="set gpu.product",
    ),
    Invalid(
        "auto-unknown-model",
        cr({"model": {"source": "pvc://models/mine"}, "engine": {"parallelism": {"auto": True}},
            "gpu": {"product": "NVIDIA-L4"}}),
        "spec.engine.parallelism.auto",
        admission=False,
        says="knows no architecture",
    ),
    Invalid(
        "shm-above-memory",
        cr({"podTemplate": {"shmSize": "128Gi", "resources": {"memory": "64Gi"}}}),
        "spec.podTemplate.shmSize",
        admission=False,
        says="memory",
    ),
]


# Text that `tritonllm render` must refuse as the API server does (exit 2, one line naming the
# problem, never a traceback): (id, YAML text, a substring of the error).
_GOOD = (
    "apiVersion: tritonllm.io/v1alpha1\nkind: TritonLLMDeployment\nmetadata: {name: demo}\n"
    "spec:\n  image: nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3\n"
    "  model: {source: hf://meta-llama/Llama-2-7b-hf}\n"
)
_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6)
)
BAD_YAML: list[tuple[str, str, str]] = [
    ("duplicate-key", _GOOD + "  image: other\n", "duplicate key 'image'"),
    ("no-kind", _GOOD.replace("kind: TritonLLMDeployment\n", ""), "kind: is required"),
    ("no-api-version", _GOOD.replace("apiVersion: tritonllm.io/v1alpha1\n", ""),
     "apiVersion: is required"),
    ("metadata-not-a-mapping", _GOOD.replace("metadata: {name: demo}", "metadata: [demo]"),
     "metadata: must be a mapping"),
    ("metadata-a-string", _GOOD.replace("metadata: {name: demo}", "metadata: demo"),
     "metadata: must be a mapping"),
    ("spec-a-list", _GOOD.split("spec:")[0] + "spec: [1, 2]\n", "spec: must be a mapping"),
    ("quoted-number", _GOOD + "  engine: {parallelism: {tensor: '2'}}\n",
     "spec.engine.parallelism.tensor"),
    ("alias-bomb", _GOOD + "  podTemplate: {annotations: {x: y}}\n" + "---\n" + _BOMB,
     "alias bomb"),
    ("not-yaml", _GOOD + "  : : [\n", "not valid YAML"),
    ("unknown-top-level-field", _GOOD.replace("spec:", "specs: {}\nspec:"),
     "specs: is not a field"),
    ("unknown-metadata-field", _GOOD.replace("{name: demo}", "{name: demo, nmespace: x}"),
     "metadata.nmespace: is not a field"),
]


# What `kubectl apply` accepts and the API server stores, written the ways YAML allows: `tritonllm
# render` must read each as kubectl does (go-yaml v2 through sigs.k8s.io/yaml, then the API
# server's pruning of nulls) and agree on the values. (id, the spec's YAML lines, dotted paths
# under spec -> the value stored; a quantity as its string).
_HEAD = ("apiVersion: tritonllm.io/v1alpha1\nkind: TritonLLMDeployment\nmetadata: {name: demo}\n"
         "spec:\n")
_IMAGE = "  image: nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3\n"
_MODEL = "  model: {source: hf://meta-llama/Llama-2-7b-hf}\n"


@dataclass(frozen=True)
class Accepted:
    id: str
    spec: str
    expect: dict[str, Any]

    @property
    def text(self) -> str:
        model = "" if "  model:" in self.spec else _MODEL
        doc = _HEAD + _IMAGE + model + self.spec
        if self.id != "a-v1-list":
            return doc
        return "apiVersion: v1\nkind: List\nitems:\n- " + doc.replace("\n", "\n  ").rstrip() + "\n"


ACCEPTED: list[Accepted] = [
    Accepted("yaml11-bool-y", "  serving: {streaming: y}\n", {"serving.streaming": True}),
    Accepted("yaml11-bool-capital-n", "  engine: {plugins: {pagedContextFmha: N}}\n",
             {"engine.plugins.pagedContextFmha": False}),
    Accepted("integral-float-for-an-integer", "  engine: {parallelism: {tensor: 2.0}}\n",
             {"engine.parallelism.tensor": 2}),
    Accepted("integer-with-an-exponent", "  engine: {limits: {maxBatchSize: 1e2}}\n",
             {"engine.limits.maxBatchSize": 100}),
    Accepted("float-without-a-dot", "  serving: {kvCache: {freeGpuMemFraction: 5e-1}}\n",
             {"serving.kvCache.freeGpuMemFraction": 0.5}),
    Accepted("octal-with-0o", "  podTemplate: {runAsUser: 0o1750}\n",
             {"podTemplate.runAsUser": 1000}),
    Accepted("colon-number-is-text", "  podTemplate: {env: [{name: WINDOW, value: 10:30}]}\n",
             {"podTemplate.env": [{"name": "WINDOW", "value": "10:30"}]}),
    Accepted("date-is-text",
             "  model: {source: hf://meta-llama/Llama-2-7b-hf, revision: 2024-01-01}\n",
             {"model.revision": "2024-01-01"}),
    Accepted("timestamp-is-text",
             "  podTemplate: {annotations: {built: 2024-01-01T10:00:00Z}}\n",
             {"podTemplate.annotations": {"built": "2024-01-01T10:00:00Z"}}),
    Accepted("equals-sign-is-text", "  podTemplate: {env: [{name: SEP, value: =}]}\n",
             {"podTemplate.env": [{"name": "SEP", "value": "="}]}),
    Accepted("nulls-are-pruned",
             "  model: {source: hf://meta-llama/Llama-2-7b-hf, revision: null, credentials: ~}\n"
             "  engine: null\n  autoscaling: ~\n",
             {"model.revision": "main", "engine.parallelism.tensor": 1}),
    Accepted("empty-values-are-null", "  gpu:\n  networkPolicy:\n",
             {"gpu.perNode": 8, "networkPolicy.enabled": True}),
    Accepted("quantities-as-numbers",
             "  podTemplate: {resources: {cpu: 1, memory: 4e9}, shmSize: 1e9}\n",
             {"podTemplate.resources.cpu": "1", "podTemplate.resources.memory": "4000000000",
              "podTemplate.shmSize": "1000000000"}),
    Accepted("keys-that-are-not-strings", "  podTemplate: {labels: {yes: a, 7: b}}\n",
             {"podTemplate.labels": {"true": "a", "7": "b"}}),
    # `kubectl get -o yaml` of several objects, applied back as it is.
    Accepted("a-v1-list", "  serving: {replicas: 2}\n", {"serving.replicas": 2}),
    Accepted("merge-key",
             "  podTemplate:\n    labels: &l {team: a}\n    annotations: {<<: *l, note: b}\n",
             {"podTemplate.annotations": {"team": "a", "note": "b"}}),
]


def stored_otherwise(spec: dict[str, Any], case: Accepted) -> dict[str, Any]:
    """The paths of `case.expect` whose value in `spec` differs (a quantity compared as its
    string: the API server keeps `cpu: 1` a number), with the value found."""
    out = {}
    for dotted, expected in case.expect.items():
        value: Any = spec
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        same = (str(value) == expected if isinstance(expected, str)
                and isinstance(value, int | float) else value == expected)
        if not same:
            out[dotted] = value
    return out
