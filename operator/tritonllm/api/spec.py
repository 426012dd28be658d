"""The TritonLLMDeployment spec: what a user writes.

Field docstrings are user documentation: they become the CRD's descriptions and `kubectl explain`.
Defaults here become schema defaults, so `kubectl get -o yaml` shows them and GitOps tools see no
drift. Rules that tie several fields together are :class:`~tritonllm.api.base.Rule` objects,
enforced by CEL at admission and by the same check in Python.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    model_validator,
)

from . import constants as c
from .base import ApiModel, Rule
from .topology import Topology, world_size
from .versions import (
    ENGINE_PATH_REMOVED,
    NEWER_THAN_ENGINE_PATH_RE,
    NEWEST_ENGINE_RELEASE,
    NGC_TAG_AFTER_ENGINE_PATH_RE,
    default_runtime,
    has_engine_path,
)

# --- reusable field types -------------------------------------------------------------------

# An OCI image reference: [registry[:port]/]path[:tag][@sha256:digest], lower-case path.
IMAGE_PATTERN = (
    r"^(([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
# hf://<org>/<name> (Hugging Face Hub) or pvc://<claim>/<path> (a directory on a PVC).
# Each becomes a directory or a claim name: a Hub org or name of at most 96 characters (the Hub's
# own limit), a claim name of at most 253, a path without control characters (NUL included).
SOURCE_PATTERN = (
    r"^(hf://[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
    r"|pvc://[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?/[^\s\x00-\x1f\x7f]+)$"
)
# A non-negative Kubernetes resource quantity: 8Gi, 500M, 1.5Ti, 500m, 1e3 (the API server's
# grammar: a decimal number, then a binary suffix, a decimal suffix or a decimal exponent).
QUANTITY_PATTERN = (
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
# The same grammar above zero: every quantity of the spec sizes something that must exist (CPU
# and memory of a pod, /dev/shm, a claim); a zero limit reads as "no limit" to the kubelet, a
# zero /dev/shm as unbounded, and a claim of 0 is refused only when created. The exponent is at
# most 18 (1e18 is an exabyte; 1e30 bytes is nothing the kubelet can hold in an int64).
POSITIVE_QUANTITY_PATTERN = (
    r"^\+?([0-9]*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?(1[0-8]|0?[0-9]))?$"
)
# Label and annotation keys: an optional DNS-subdomain prefix and '/', then a name of at most 63
# characters (alphanumeric at both ends; '-', '_', '.' inside).
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# A label value: empty, or at most 63 characters, alphanumeric at both ends.
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
VERSION_PATTERN = r"^[0-9]+\.[0-9]+(\.[0-9]+)?([.a-z0-9]*)?$"


def _quantity_to_str(v: Any) -> Any:
    # YAML turns `cpu: 8` into an int; Kubernetes quantities accept both.
    return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


Quantity = Annotated[
    str,
    StringConstraints(pattern=POSITIVE_QUANTITY_PATTERN, max_length=64),
    BeforeValidator(_quantity_to_str),
    # x-quantity: integer or string in the CRD; a number written as such must be at least 1.
    Field(json_schema_extra={"x-quantity": True, "minimum": 1}),
]
# Integers that end up in the pod spec or in TensorRT-LLM's executor config: Kubernetes user ids
# are 0..2^31-1, TensorRT-LLM's token counts 32-bit signed (SizeType32); byte counts and seconds
# stop at 2^53-1, the largest integer every JSON reader keeps exact (the API server reads a
# schema's `maximum` as a float64, so int64's own bound cannot even be written there).
INT32_MAX = 2**31 - 1
JSON_INT_MAX = 2**53 - 1
# Text that reaches a file, a command line or a process environment: no NUL (no C string or
# environment can hold one) and, for one-line values, no control characters at all.
NO_NUL_PATTERN = r"^[^\x00]*$"
ONE_LINE_PATTERN = r"^[^\x00-\x1f\x7f]*$"
DnsLabel = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
DnsSubdomain = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, min_length=1, max_length=253)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]


def cel_check(cel: str, message: str, check: Any) -> tuple[Any, Any]:
    """A rule on one field, enforced twice with one message: `cel` in the CRD (as
    x-kubernetes-validations on the field's schema) and `check` in Python (False: invalid)."""

    def validate(v: Any) -> Any:
        if not check(v):
            raise ValueError(message)
        return v

    rule: Any = {"rule": cel, "message": message}
    return Field(json_schema_extra={"x-kubernetes-validations": [rule]}), AfterValidator(validate)


def _keys_match(pattern: str, most: int) -> Any:
    return lambda d: all(len(k) <= most and re.fullmatch(pattern, k) for k in d)


# Bounds that keep one object far below etcd's object size limit (about 1.5 MiB) and every pod
# below the API server's 256 KiB limit on all annotations together.
MAX_MAP_ENTRIES = 32
MAX_ANNOTATION_VALUE = 4096
LABEL_KEY_MESSAGE = (
    "keys must be label keys: an optional DNS prefix and '/', then at most 63 letters, digits, "
    "'-', '_' or '.', starting and ending with a letter or digit (for example example.com/team)"
)
LabelMap = Annotated[
    dict[str, LabelValue],
    Field(max_length=MAX_MAP_ENTRIES),
    *cel_check(
        f"self.all(k, k.size() <= 317 && k.matches('{LABEL_KEY_PATTERN}'))",
        LABEL_KEY_MESSAGE,
        _keys_match(LABEL_KEY_PATTERN, 317),
    ),
]
AnnotationMap = Annotated[
    dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE, pattern=NO_NUL_PATTERN)]],
    Field(max_length=MAX_MAP_ENTRIES),
    *cel_check(
        f"self.all(k, k.size() <= 317 && k.matches('{LABEL_KEY_PATTERN}'))",
        LABEL_KEY_MESSAGE.replace("label keys", "annotation keys"),
        _keys_match(LABEL_KEY_PATTERN, 317),
    ),
]

Dtype = Literal["float16", "bfloat16", "float32"]
QuantFormat = Literal[
    "none", "int8_wo", "int4_wo", "int4_awq", "w4a8_awq", "int8_sq", "fp8", "nvfp4"
]
PluginDtype = Literal["auto", "float16", "bfloat16", "float32", "disable"]

# Quantization formats that need weights in a 16-bit float type.
FORMATS_NEEDING_16BIT = ("int4_awq", "w4a8_awq", "int8_wo", "int4_wo", "fp8", "nvfp4")
# Formats produced by ModelOpt's quantize.py (the others go through convert_checkpoint.py).
MODELOPT_FORMATS = ("int4_awq", "w4a8_awq", "int8_sq", "fp8", "nvfp4")
# Formats whose quantize.py run takes --awq_block_size.
AWQ_FORMATS = ("int4_awq", "w4a8_awq")
# What runtime llmapi quantizes (ModelOpt's hf_ptq.py, unified Hugging Face export) and
# TensorRT-LLM's PyTorch backend then loads (docs/source/features/quantization.md of
# NVIDIA/TensorRT-LLM at 09d4c79b: FP8 per tensor, W4A16 AWQ, W4A8 AWQ, NVFP4; FP8 the only
# KV-cache one).
LLMAPI_FORMATS = ("none", "fp8", "int4_awq", "w4a8_awq", "nvfp4")
LLMAPI_KV_DTYPES = ("none", "fp8")
# Before 1.0 the PyTorch backend loaded FP8 and NVFP4 checkpoints only (docs/source/torch.md of
# 0.19.0 to 0.21.0: "supports FP8 and NVFP4 quantization"); 1.0.0's features/quantization.md
# adds W4A16 and W4A8 AWQ.
LLMAPI_FORMAT_SINCE: Final = {"int4_awq": "1.0.0", "w4a8_awq": "1.0.0"}
# The calibration datasets hf_ptq.py --dataset knows (SUPPORTED_DATASET_CONFIG of
# modelopt/torch/utils/dataset_utils.py, ModelOpt 0.37.0, which TensorRT-LLM 1.1 and 1.2 pin; it
# refuses any other name, and takes no path).
MODELOPT_CALIB_DATASETS: Final = (
    "open_code_reasoning", "open_math_reasoning", "llama-nemotron-post-training-dataset",
    "magpie", "cnn_dailymail", "pile", "pg19", "wikipedia", "c4",
)
AWQ_BLOCK_DEFAULT: Final = 128
CALIBRATION_SIZE_DEFAULT: Final = 512


def quantity_bytes(q: str) -> float:
    """The value of a Kubernetes quantity (bytes for memory; only what QUANTITY_PATTERN admits)."""
    m = re.fullmatch(QUANTITY_PATTERN, q)
    if not m:
        raise ValueError(f"not a quantity: {q!r}")
    suffix = m.group(3)
    if suffix and suffix[0] in "eE":
        return float(m.group(1)) * 10.0 ** int(suffix[1:])
    scale = {
        None: 1,
        "n": 1e-9,
        "u": 1e-6,
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "P": 1e15,
        "E": 1e18,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "Ei": 2**60,
    }[m.group(3)]
    return float(m.group(1)) * scale


# --- model source ---------------------------------------------------------------------------

# Path-bearing fields (a pvc:// path, a revision, a calibration dataset path) become directories
# and subPaths on the model store: every '/'-separated segment must be a plain name, neither
# empty, '.' nor '..' (a subPath over a parent, or over every revision of a model), nor starting
# with '-' (an option to the tools that receive it). The regexes are RE2 and Python alike (no
# backslashes, which CEL strings would read as escapes).
_PLAIN_SEGMENT = "([^/.-]|[.][^/.]|[.][.][^/])[^/]*"
_PVC_PLAIN_RE = f"^pvc://[^/]+(/{_PLAIN_SEGMENT})+/?$"
_NAME_SEGMENT = "([A-Za-z0-9_]|[.][A-Za-z0-9_-]|[.][.][A-Za-z0-9._-])[A-Za-z0-9._-]*"
REVISION_RE = f"^{_NAME_SEGMENT}(/{_NAME_SEGMENT})*$"
PATH_RE = f"^/?{_PLAIN_SEGMENT}(/{_PLAIN_SEGMENT})*$"
PATH_SEGMENT_MESSAGE = (
    "no '.', '..' or empty path segments and no segment starting with '-'"
)


def plain_pvc_path(source: str | None) -> bool:
    """A pvc:// source whose path is plain segments (True for hf:// and for no source)."""
    if not source or not source.startswith("pvc://"):
        return True
    return re.fullmatch(_PVC_PLAIN_RE, source) is not None


def _source_rule(optional: bool) -> Rule:
    has = "!has(self.source) || " if optional else ""
    return Rule(
        cel=f"{has}!self.source.startsWith('pvc://') || self.source.matches('{_PVC_PLAIN_RE}')",
        message=f"a pvc:// path must stay inside its claim and name one directory plainly: "
        f"{PATH_SEGMENT_MESSAGE}",
        check=lambda s: plain_pvc_path(s.source),
        field="source",
    )


Revision = Annotated[
    str,
    Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._/-]+$"),
    *cel_check(
        f"self.matches('{REVISION_RE}')",
        f"a revision is a branch, tag or commit: {PATH_SEGMENT_MESSAGE}",
        lambda v: bool(re.fullmatch(REVISION_RE, v)),
    ),
]
DatasetPath = Annotated[
    str,
    Field(max_length=512),
    *cel_check(
        f"self.matches('{PATH_RE}')",
        f"a Hub dataset id or a path: {PATH_SEGMENT_MESSAGE}",
        lambda v: bool(re.fullmatch(PATH_RE, v)),
    ),
]


# A Secret (or ConfigMap) key as the API server validates it: [-._a-zA-Z0-9]+, not '.' or '..' and
# not starting with '..'. A key outside it is refused only when the pod that mounts it is created.
SECRET_KEY_PATTERN = r"^([-_a-zA-Z0-9]|[.][-_a-zA-Z0-9])[-._a-zA-Z0-9]*$"
SecretKey = Annotated[
    str,
    Field(min_length=1, max_length=253),
    *cel_check(
        f"self.matches('{SECRET_KEY_PATTERN}')",
        "must be a Secret key: letters, digits, '-', '_' and '.', not '.' or '..' and not "
        "starting with '..'",
        lambda v: bool(re.fullmatch(SECRET_KEY_PATTERN, v)),
    ),
]


class Credentials(ApiModel):
    """Where the Hugging Face token lives."""

    secretName: DnsSubdomain
    """Name of a Secret in the deployment's namespace holding the token."""
    key: SecretKey = "HF_TOKEN"
    """Key in that Secret whose value is the token (a Secret key: letters, digits, '-', '_' and
    '.', not '.' or '..' nor starting with '..')."""


class Tokenizer(ApiModel):
    """The tokenizer used by the preprocessing and postprocessing models."""

    source: str | None = Field(default=None, pattern=SOURCE_PATTERN)
    """hf://org/name or pvc://claim/path of the tokenizer; empty means the model's own files."""
    type: Literal["auto", "llama", "t5"] = "auto"
    """Tokenizer family. `auto` loads it with transformers' AutoTokenizer, which suits almost every
    model; `llama` and `t5` exist for old guides that set tokenizer_type."""
    addSpecialTokens: bool = True
    """Add special tokens (such as BOS) when tokenizing prompts."""
    skipSpecialTokens: bool = True
    """Drop special tokens when detokenizing outputs."""

    rules: ClassVar[tuple[Rule, ...]] = (_source_rule(optional=True),)


ModelArchitecture = Literal[
    "auto", "gpt2", "llama", "mistral", "mixtral", "qwen2", "gemma", "phi3", "falcon"
]


class ModelSource(ApiModel):
    """The model to serve and where its weights come from."""

    source: str = Field(pattern=SOURCE_PATTERN, max_length=512)
    """hf://<org>/<name> to download from the Hugging Face Hub, or pvc://<claim>/<path> for a
    checkpoint already on a PersistentVolumeClaim in the same namespace."""
    revision: Revision = "main"
    """Hub revision (branch, tag or commit). Part of the engine key: pin a commit for
    reproducible engines."""
    architecture: ModelArchitecture = "auto"
    """Model family, which picks the checkpoint converter. `auto` reads it from the checkpoint's
    config.json (`architectures[0]`) at build time."""
    tokenizer: Tokenizer = Field(default_factory=Tokenizer)
    """Tokenizer settings; defaults to the model's own tokenizer."""
    credentials: Credentials | None = None
    """Secret holding a Hugging Face token, for gated or private models."""
    trustRemoteCode: bool = False
    """Allow the tokenizer/model to run code shipped with the checkpoint (needed by some
    custom tokenizers)."""

    rules: ClassVar[tuple[Rule, ...]] = (_source_rule(optional=False),)


# --- engine ---------------------------------------------------------------------------------


class Quantization(ApiModel):
    """Weight and KV-cache quantization applied while building the engine (runtime engine), or
    by a ModelOpt Job into a pre-quantized checkpoint that the LLM API loads (runtime llmapi)."""

    format: QuantFormat = "none"
    """none (weights in engine.dtype); int8_wo/int4_wo (weight-only, convert_checkpoint);
    int4_awq/w4a8_awq/int8_sq/fp8/nvfp4 (ModelOpt quantize.py with calibration). fp8 and
    w4a8_awq need Ada/Hopper or newer, nvfp4 needs Blackwell. Runtime llmapi: fp8, int4_awq,
    w4a8_awq or nvfp4 (the AWQ ones from TensorRT-LLM 1.0), which a GPU Job quantizes with
    ModelOpt's hf_ptq.py into a Hugging Face checkpoint on the store (cached by its inputs like
    an engine) that model.yaml then loads."""
    awqBlockSize: Literal[64, 128] = AWQ_BLOCK_DEFAULT
    """Group size for AWQ formats (quantize.py --awq_block_size)."""
    kvCacheDtype: Literal["none", "int8", "fp8"] = "none"
    """KV-cache quantization; none keeps the model dtype. With format none, int8_wo or int4_wo
    the model's convert_checkpoint.py does it, and not every one can (fp8: llama since 0.12;
    int8: gpt, llama, qwen, and gemma from 0.13; neither for phi and falcon): the operator refuses
    what the image's version lacks. The ModelOpt formats quantize the KV cache in any version.
    Runtime llmapi: fp8 or none (hf_ptq.py --kv_cache_qformat)."""
    calibrationSize: int = Field(default=CALIBRATION_SIZE_DEFAULT, ge=1, le=65536)
    """Number of calibration samples for the ModelOpt formats (--calib_size)."""
    calibrationDataset: DatasetPath | None = None
    """Calibration dataset (Hub id or a path under the model store); empty uses the tool's
    default (cnn_dailymail), which needs Hub access from the build Job. Runtime llmapi: one of
    ModelOpt's dataset names (hf_ptq.py --dataset: cnn_dailymail, pile, pg19, wikipedia, c4,
    magpie, ...)."""

    # Options of one family of formats are refused with another (they would be ignored, or
    # passed to a tool that has no such flag). Their defaults are in the schema, so only a value
    # other than the default counts as set.
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=f"self.format in {list(AWQ_FORMATS)} || self.awqBlockSize == {AWQ_BLOCK_DEFAULT}",
            message="quantization.awqBlockSize applies to the AWQ formats (int4_awq, w4a8_awq) "
            "only: remove it, or choose one of those formats",
            check=lambda q: q.format in AWQ_FORMATS or q.awqBlockSize == AWQ_BLOCK_DEFAULT,
            field="awqBlockSize",
        ),
        Rule(
            cel=f"self.format in {list(MODELOPT_FORMATS)} || "
            f"self.calibrationSize == {CALIBRATION_SIZE_DEFAULT}",
            message="quantization.calibrationSize applies to the calibrated formats (int4_awq, "
            "w4a8_awq, int8_sq, fp8, nvfp4) only: remove it, or choose one of those formats",
            check=lambda q: q.format in MODELOPT_FORMATS
            or q.calibrationSize == CALIBRATION_SIZE_DEFAULT,
            field="calibrationSize",
        ),
        Rule(
            cel=f"self.format in {list(MODELOPT_FORMATS)} || !has(self.calibrationDataset)",
            message="quantization.calibrationDataset applies to the calibrated formats "
            "(int4_awq, w4a8_awq, int8_sq, fp8, nvfp4) only: remove it, or choose one of those "
            "formats",
            check=lambda q: q.format in MODELOPT_FORMATS or q.calibrationDataset is None,
            field="calibrationDataset",
        ),
    )


class Parallelism(ApiModel):
    """How the model is split across GPUs. world size = tensor x pipeline = MPI ranks = GPUs."""

    tensor: int = Field(default=1, ge=1, le=64)
    """Tensor parallelism (tp): GPUs that share every layer. Keep a tp group within one node."""
    pipeline: int = Field(default=1, ge=1, le=64)
    """Pipeline parallelism (pp): consecutive groups of layers on different GPUs or nodes."""
    auto: bool = False
    """Let the fit planner choose tensor and pipeline (leave both unset): the smallest tp, then
    pp, then number of nodes whose GPUs (gpu.product, needed) hold the weights, the workspace and
    the KV cache of engine.limits.maxBatchSize x maxSeqLen tokens (or serving.kvCache.maxTokens).
    The choice and its arithmetic are in status.fit; `tritonllm fit` prints them without a
    cluster. Needs a model whose architecture the planner knows (docs/fit.md)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!self.auto || (self.tensor == 1 && self.pipeline == 1)",
            message="parallelism.auto chooses tensor and pipeline: remove them, or remove auto",
            check=lambda s: not s.auto or (s.tensor == 1 and s.pipeline == 1),
            field="auto",
        ),
    )

    @property
    def world_size(self) -> int:
        return world_size(self.tensor, self.pipeline)


class BuildLimits(ApiModel):
    """Limits compiled into the engine (trtllm-build). Requests beyond them are rejected."""

    maxBatchSize: int = Field(default=64, ge=1, le=4096)
    """Most sequences in flight at once (--max_batch_size); also Triton's max_batch_size."""
    maxInputLen: int = Field(default=1024, ge=1, le=1048576)
    """Longest prompt in tokens (--max_input_len)."""
    maxSeqLen: int = Field(default=2048, ge=2, le=1048576)
    """Longest prompt plus output in tokens (--max_seq_len); must exceed maxInputLen."""
    maxNumTokens: int = Field(default=8192, ge=1, le=1048576)
    """Most tokens in one forward pass across the batch (--max_num_tokens)."""
    maxBeamWidth: int = Field(default=1, ge=1, le=32)
    """Largest beam for beam search (--max_beam_width); 1 disables beam search."""


class Plugins(ApiModel):
    """TensorRT-LLM plugin choices for trtllm-build."""

    gemm: PluginDtype = "auto"
    """--gemm_plugin: auto uses the model dtype; disable uses TensorRT's own GEMMs."""
    gptAttention: PluginDtype = "auto"
    """--gpt_attention_plugin."""
    pagedContextFmha: bool = True
    """--use_paged_context_fmha; needed for KV-cache reuse and chunked context."""
    multipleProfiles: bool = False
    """--multiple_profiles: more TensorRT profiles; slower build, often faster serving."""


class EngineSpec(ApiModel):
    """How the TensorRT-LLM engine is built (engine runtime only). Every field is part of the
    engine key: changing one builds a new engine while the old one keeps serving."""

    dtype: Dtype = "float16"
    """Weights and activations type (--dtype)."""
    quantization: Quantization = Field(default_factory=Quantization)
    """Quantization applied before the build."""
    parallelism: Parallelism = Field(default_factory=Parallelism)
    """Tensor and pipeline parallelism."""
    limits: BuildLimits = Field(default_factory=BuildLimits)
    """Build-time limits."""
    plugins: Plugins = Field(default_factory=Plugins)
    """Plugin flags."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="self.limits.maxSeqLen > self.limits.maxInputLen",
            message="limits.maxSeqLen must be greater than limits.maxInputLen (it counts the "
            "prompt and the output); raise maxSeqLen or lower maxInputLen",
            check=lambda s: s.limits.maxSeqLen > s.limits.maxInputLen,
            field="limits.maxSeqLen",
        ),
        Rule(
            cel="!(self.quantization.format in ['int4_awq', 'w4a8_awq', 'int8_wo', 'int4_wo', "
            "'fp8', 'nvfp4'] && self.dtype == 'float32')",
            message="quantization.format needs dtype float16 or bfloat16; set engine.dtype "
            "accordingly or use quantization.format none",
            check=lambda s: (
                not (s.quantization.format in FORMATS_NEEDING_16BIT and s.dtype == "float32")
            ),
            field="quantization.format",
        ),
        Rule(
            cel="self.quantization.format != 'int8_sq' || self.quantization.kvCacheDtype != 'fp8'",
            message="quantization.kvCacheDtype fp8 cannot be combined with int8_sq; use int8",
            check=lambda s: (
                not (s.quantization.format == "int8_sq" and s.quantization.kvCacheDtype == "fp8")
            ),
            field="quantization.kvCacheDtype",
        ),
    )


# --- serving --------------------------------------------------------------------------------


class KvCache(ApiModel):
    """Paged KV-cache settings of the tensorrt_llm model."""

    freeGpuMemFraction: float = Field(default=0.9, gt=0, le=1)
    """Fraction of GPU memory left free after the engine loads that the KV cache may take
    (kv_cache_free_gpu_mem_fraction). Lower it when other things share the GPU."""
    maxTokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Cap on tokens in the paged KV cache (max_tokens_in_paged_kv_cache); empty means only the
    fraction applies."""
    maxAttentionWindowSize: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Tokens attended to per generated token (max_attention_window_size); empty means the
    engine's max sequence length. Smaller values enable sliding-window attention."""
    enableReuse: bool = False
    """Reuse KV blocks across requests that share a prefix (enable_kv_cache_reuse); needs
    engine.plugins.pagedContextFmha."""
    hostMemoryBytes: int = Field(default=0, ge=0, le=JSON_INT_MAX)
    """Host memory for KV-cache offload (kv_cache_host_memory_bytes); 0 disables offload."""


class Instances(ApiModel):
    """Python model instances (Triton instance_group counts)."""

    preprocessing: int = Field(default=1, ge=1, le=64)
    """Tokenizer instances."""
    postprocessing: int = Field(default=1, ge=1, le=64)
    """Detokenizer instances."""
    bls: int = Field(default=1, ge=1, le=1024)
    """tensorrt_llm_bls instances when serving.bls is on; each serves one request at a time,
    so set it near engine.limits.maxBatchSize."""


class ServingSpec(ApiModel):
    """How Triton serves the model. Changing these rolls the pods; the engine is not rebuilt."""

    replicas: int = Field(default=1, ge=0, le=1000)
    """Serving replicas (each = world size GPUs). Ignored when autoscaling is set: the
    HorizontalPodAutoscaler owns the count."""
    batching: Literal["inflight_fused_batching", "inflight_batching", "V1"] = (
        "inflight_fused_batching"
    )
    """Batching strategy (gpt_model_type). V1 is static batching, deprecated upstream."""
    schedulerPolicy: Literal["guaranteed_no_evict", "max_utilization"] = "guaranteed_no_evict"
    """batch_scheduler_policy: guaranteed_no_evict never pauses a started request;
    max_utilization packs more requests and may pause some."""
    kvCache: KvCache = Field(default_factory=KvCache)
    """KV-cache settings."""
    streaming: bool = False
    """Decoupled mode: tokens are streamed through generate_stream or gRPC streaming. Plain
    /infer then no longer works for the ensemble."""
    maxQueueDelayMicroseconds: int = Field(default=0, ge=0, le=10_000_000)
    """Triton dynamic batcher delay (max_queue_delay_microseconds)."""
    maxQueueSize: int = Field(default=0, ge=0, le=1_000_000)
    """Triton queue cap; 0 means unlimited."""
    excludeInputInOutput: bool = True
    """Return only generated text, not the prompt (exclude_input_in_output)."""
    instances: Instances = Field(default_factory=Instances)
    """Python model instance counts."""
    bls: bool = False
    """Also deploy tensorrt_llm_bls (a Python alternative to the ensemble)."""
    logitsDatatype: Literal["TYPE_FP32", "TYPE_FP16", "TYPE_BF16"] = "TYPE_FP32"
    """Type of the logits outputs (logits_datatype); should match the engine's logits dtype."""
    extraParameters: Annotated[
        dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE,
                                       pattern=ONE_LINE_PATTERN)]],
        Field(max_length=MAX_MAP_ENTRIES),
        *cel_check(
            "self.all(k, k.size() <= 128 && k.matches('^[A-Za-z_][A-Za-z0-9_]*$'))",
            "keys must be tensorrt_llm parameter names (letters, digits and '_', at most 128)",
            _keys_match(r"^[A-Za-z_][A-Za-z0-9_]*$", 128),
        ),
    ] = Field(default_factory=dict)
    """Extra tensorrt_llm parameters (key: value), for backend options this API does not name.
    Keys must exist in the image's template."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!(self.streaming && self.batching == 'V1')",
            message="serving.streaming needs in-flight batching: V1 static batching cannot run "
            "in decoupled mode; set serving.batching to inflight_fused_batching or streaming "
            "to false",
            check=lambda s: not (s.streaming and s.batching == "V1"),
            field="streaming",
        ),
        Rule(
            cel="self.bls || self.instances.bls == 1",
            message="serving.instances.bls is set but serving.bls is false; enable serving.bls "
            "or remove instances.bls",
            check=lambda s: s.bls or s.instances.bls == 1,
            field="instances.bls",
        ),
    )


# --- placement, storage, scaling -----------------------------------------------------------


# A non-empty label value: it is matched against the node label in a node affinity, which the API
# server refuses (when it creates the build Job, long after admission) for anything else.
GPU_PRODUCT_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


class GpuSpec(ApiModel):
    """The GPUs the engine is built on and served by (they must be the same product)."""

    product: str | None = Field(default=None, max_length=63, pattern=GPU_PRODUCT_PATTERN)
    """Value of the node label nvidia.com/gpu.product (for example NVIDIA-H100-80GB-HBM3).
    Engines only load on the GPU architecture that built them, so set it in any cluster with
    more than one GPU type. Part of the engine key."""
    perNode: int = Field(default=8, ge=1, le=16)
    """GPUs per node. World sizes above it are spread over world/perNode nodes."""


AccessMode = Literal["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"]


def _default_access_modes() -> list[AccessMode]:
    return ["ReadWriteMany"]


class PvcCreate(ApiModel):
    """A PersistentVolumeClaim the operator creates when it does not exist."""

    size: Quantity
    """Requested size, for example 200Gi."""
    storageClassName: DnsSubdomain | None = None
    """Storage class; empty uses the cluster default."""
    accessModes: list[AccessMode] = Field(default_factory=_default_access_modes, min_length=1)
    """Access modes. ReadWriteMany lets several pods and nodes share engines."""


class StorageSpec(ApiModel):
    """The model store: a PVC holding weights, engines (/engines/<key>) and model repositories."""

    claimName: DnsSubdomain = "tritonllm-model-store"
    """PersistentVolumeClaim to use. Deployments sharing a claim share its engine cache."""
    create: PvcCreate | None = None
    """Create the claim if it is missing. The operator never deletes a claim."""
    engineRetention: Literal["Retain", "Delete"] = "Retain"
    """What happens to this deployment's engines when it is deleted: Retain keeps them as a cache
    for later deployments; Delete removes engines no other deployment uses."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="self.claimName == oldSelf.claimName",
            message="storage.claimName is immutable: engines and repositories live on it; create a "
            "new deployment to move to another claim",
            check=lambda s: True,
            field="claimName",
            transition=True,
        ),
    )


AutoscalingMetric = Literal[
    "queueComputeRatio", "pendingRequests", "backendWaitingRequests", "kvCacheUtilization", "cpu"
]


Autoscaler = Literal["HPA", "KEDA"]
METRIC_VALUE_PATTERN = r"^[0-9]+(\.[0-9]+)?m?$"
# http(s)://host[:port][/path], no whitespace or control characters (NUL included).
PROMETHEUS_URL_PATTERN = r"^https?://[^\s/?#\x00-\x1f\x7f]+(/[^\s?#\x00-\x1f\x7f]*)?$"


# The default of fields a model validator fills in before validation (Any: never read as is).
_FILLED_BY_VALIDATOR: Any = None


class AutoscalingSpec(ApiModel):
    """Autoscaling of the serving workload through its scale subresource (a multi-node group
    scales as a unit): a HorizontalPodAutoscaler on metrics served by prometheus-adapter, or a
    KEDA ScaledObject with a Prometheus trigger, which can also scale to zero. docs/autoscaling.md
    says which signal suits which workload."""

    autoscaler: Autoscaler = "HPA"
    """HPA: a HorizontalPodAutoscaler reading Pods metrics from custom.metrics.k8s.io (the
    chart's prometheus-adapter rules), or CPU. KEDA: a ScaledObject with a Prometheus trigger
    (KEDA creates and owns the HPA, named keda-hpa-NAME); the only choice that can scale to
    zero."""
    minReplicas: int = Field(default=1, ge=0, le=1000)
    """Fewest replicas; 0 (KEDA only) scales to zero when idle and puts an activator (HAProxy)
    in front of the serving pods that holds requests while the first replica starts."""
    maxReplicas: int = Field(ge=1, le=1000)
    """Most replicas."""
    # Filled by TritonLLMDeploymentSpec's validator: the default depends on the runtime.
    metric: AutoscalingMetric = Field(default=_FILLED_BY_VALIDATOR, validate_default=False)
    """Empty: queueComputeRatio on runtime engine, backendWaitingRequests on llmapi (whose
    model hands every request to the LLM at once, so Triton's own queue and compute times and
    its pending count say nothing there; both are refused on llmapi).
    queueComputeRatio: Triton queue time / compute time of the tensorrt_llm model;
    pendingRequests: Triton's nv_inference_pending_request_count (requests queue in Triton only
    when the backend stops taking them); backendWaitingRequests: requests the TensorRT-LLM
    backend holds but has not scheduled (nv_trt_llm_request_metrics waiting); kvCacheUtilization:
    used/max KV-cache blocks; cpu: CPU utilization (needs no adapter). All but cpu are per-pod
    series of the chart's recording rules (docs/autoscaling.md)."""
    target: str = Field(default="1", pattern=METRIC_VALUE_PATTERN, max_length=32)
    """Target average value per pod for the metric (a quantity; for cpu, a whole percentage
    such as 80)."""
    activationTarget: str = Field(default="0", pattern=METRIC_VALUE_PATTERN, max_length=32)
    """KEDA: the deployment is active (scaled from zero) while requests held by the activator
    plus the metric exceed this value."""
    scaleUpWindowSeconds: int = Field(default=60, ge=0, le=3600)
    """Stabilisation window for scaling up (the highest recommendation over it is used)."""
    scaleDownWindowSeconds: int = Field(default=600, ge=0, le=3600)
    """Stabilisation window for scaling down: replicas are removed only after the metric has
    stayed low this long (GPU replicas are slow to bring back)."""
    pollingIntervalSeconds: int = Field(default=15, ge=1, le=3600)
    """KEDA: how often it queries Prometheus (also how fast it notices the first request at
    zero)."""
    cooldownSeconds: int = Field(default=300, ge=0, le=86400)
    """KEDA: idle time before scaling from 1 to 0."""
    prometheusUrl: str | None = Field(
        default=None, pattern=PROMETHEUS_URL_PATTERN, max_length=2048
    )
    """KEDA: the Prometheus that scrapes the serving pods (such as
    http://prometheus.monitoring:9090); defaults to the operator's TRITONLLM_PROMETHEUS_URL."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="self.minReplicas >= 1 || self.autoscaler == 'KEDA'",
            message="autoscaling.minReplicas 0 (scale to zero) needs autoscaler: KEDA; an HPA "
            "keeps at least one replica",
            check=lambda s: s.minReplicas >= 1 or s.autoscaler == "KEDA",
            field="minReplicas",
        ),
        Rule(
            cel="!has(self.metric) || self.metric != 'cpu' || self.autoscaler == 'HPA'",
            message="autoscaling.metric cpu works with autoscaler: HPA only; with KEDA pick a "
            "Triton metric (pendingRequests, queueComputeRatio, kvCacheUtilization)",
            check=lambda s: s.metric != "cpu" or s.autoscaler == "HPA",
            field="metric",
        ),
        Rule(
            cel="!has(self.metric) || self.metric != 'cpu' || "
            "self.target.matches('^[1-9][0-9]{0,3}$')",
            message="autoscaling.target for metric cpu is a utilization percentage: a whole "
            "number from 1 to 9999 such as 80 (not 500m, 0.5 or 0)",
            check=lambda s: s.metric != "cpu" or bool(re.fullmatch(r"[1-9][0-9]{0,3}", s.target)),
            field="target",
        ),
        Rule(
            cel="(has(self.metric) && self.metric == 'cpu') || "
            "!self.target.matches('^[0.]*m?$')",
            message="autoscaling.target must be above 0 (the average per pod to keep)",
            check=lambda s: s.metric == "cpu" or not re.fullmatch(r"[0.]*m?", s.target),
            field="target",
        ),
        Rule(
            cel="self.minReplicas <= self.maxReplicas",
            message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
            check=lambda s: s.minReplicas <= s.maxReplicas,
            field="minReplicas",
        ),
    )


# An IPv4 or IPv6 CIDR such as 10.0.0.0/8 or fd00::/8.
CIDR_PATTERN = r"^([0-9]{1,3}([.][0-9]{1,3}){3}/[0-9]{1,2}|[0-9a-fA-F:]+/[0-9]{1,3})$"


class NetworkPolicySpec(ApiModel):
    """The NetworkPolicy of the serving pods (ingress only; it takes effect where the cluster's
    network plugin enforces NetworkPolicy)."""

    enabled: bool = True
    """Render a NetworkPolicy over every serving pod (multi-node: the leaders and the
    workers): the serving ports (HTTP, gRPC, metrics) are reachable from pods of the
    deployment's namespace and from the sources below only; multi-node, every other port (sshd,
    MPI, NCCL) is open only between the deployment's own leader and worker pods; with scale to
    zero, a second one admits the same sources to the activator's pods. Set false when another
    tool manages the namespace's policies."""
    fromNamespaces: list[DnsLabel] = Field(default_factory=list, max_length=MAX_MAP_ENTRIES)
    """Other namespaces whose pods may reach the serving ports (an ingress gateway's,
    Prometheus')."""
    fromCidrs: list[Annotated[str, Field(pattern=CIDR_PATTERN, max_length=43)]] = Field(
        default_factory=list, max_length=MAX_MAP_ENTRIES
    )
    """IP ranges (CIDR, such as 10.0.0.0/8) that may reach the serving ports (a load
    balancer's, clients outside the cluster)."""


# A model id as clients write it in `model` and as `/v1/models/{id}` carries it in a URL path:
# letters, digits, '.', '_', '-' and ':', in segments joined by single '/' (a Hugging Face id
# such as meta-llama/Llama-3.1-8B-Instruct), at most 128 characters.
SERVED_MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*(/[A-Za-z0-9][A-Za-z0-9._:-]*)*$"
# A chat template is a Jinja text the frontend compiles in a sandbox: bounded like a large value.
MAX_CHAT_TEMPLATE = 65536


class OpenAIResources(ApiModel):
    """CPU and memory of the OpenAI frontend's container (the `openai` sidecar)."""

    cpu: Quantity = "100m"
    """CPU request (no CPU limit: the frontend may use idle CPU of the node)."""
    memory: Quantity = "128Mi"
    """Memory request."""
    memoryLimit: Quantity = "1Gi"
    """Memory limit, at least the request (the operator refuses a smaller one); the tokenizer
    and the requests in flight live in it."""


class OpenAISpec(ApiModel):
    """The OpenAI-compatible API (`/v1/chat/completions`, `/v1/completions`, `/v1/models`) on
    port 9000 of every serving pod that takes traffic, served by a frontend beside Triton that
    renders chat prompts with the model's own chat template and calls Triton over gRPC
    (docs/openai.md)."""

    enabled: bool | None = None
    """true: serve it (adding it to running pods rolls them); false: do not. Empty: served by
    every new deployment; a deployment whose running pods predate the frontend gets it at its
    next rollout, so that upgrading the operator restarts no pods by itself (status.openai
    says so meanwhile)."""
    servedModelName: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=SERVED_MODEL_NAME_PATTERN
    )
    """The model name clients send and `/v1/models` lists; empty: the deployment's name.
    Letters, digits, '.', '_', '-' and ':', in segments joined by '/', at most 128."""
    chatTemplate: str | None = Field(
        default=None, min_length=1, max_length=MAX_CHAT_TEMPLATE, pattern=NO_NUL_PATTERN
    )
    """A Jinja chat template (Hugging Face semantics: `messages`, `add_generation_prompt`,
    `bos_token`, `eos_token`) that replaces the model's own (tokenizer_config.json's
    chat_template, or chat_template.jinja). Without either, chat requests are refused and
    completions still work."""
    maxConcurrentRequests: int = Field(default=256, ge=1, le=100_000)
    """Requests in flight per pod beyond which the frontend answers 429 with Retry-After."""
    resources: OpenAIResources = Field(default_factory=OpenAIResources)
    """The frontend container's CPU and memory (small: it tokenizes and relays)."""


class SmokeRequest(ApiModel):
    """One request of a verified rollout's smoke set, sent to the new revision's verification
    pod (HTTP generate) before any client traffic moves to it."""

    prompt: str = Field(min_length=1, max_length=4096)
    """The text_input sent."""
    maxTokens: int = Field(default=16, ge=1, le=4096)
    """max_tokens of the request."""
    maxLatencySeconds: float = Field(default=60.0, gt=0, le=600)
    """The whole answer must arrive within this many seconds."""
    expectExact: str | None = Field(default=None, max_length=4096)
    """The answer's text_output must be exactly this (deterministic decoding: the default
    sampling of the generate endpoint)."""
    expectPrefix: str | None = Field(default=None, min_length=1, max_length=4096)
    """The answer's text_output must start with this."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!has(self.expectExact) || !has(self.expectPrefix)",
            message="set expectExact or expectPrefix, not both (an exact answer already fixes "
            "its prefix)",
            check=lambda s: s.expectExact is None or s.expectPrefix is None,
            field="expectPrefix",
        ),
    )


DEFAULT_SMOKE_PROMPT = "Hello"


class RolloutSpec(ApiModel):
    """How a change of what the serving pods run reaches them (docs/rollout.md)."""

    strategy: Literal["Verified", "Immediate"] = "Verified"
    """Verified: a change of the serving pods (a new engine, new repository or launch settings,
    image, resources) first starts one pod (one group, multi-node) of the new revision beside the
    serving ones, with no client traffic, and sends it the smoke set; only if every request
    passes does the serving workload roll over (one new pod at a time, each taking traffic once
    Ready). If one fails, the serving pods stay as they are, Degraded says which request failed
    and why, and that revision is not tried again until the spec changes. Immediate: roll the
    serving workload over at once, each new pod taking traffic once its readiness probe passes.
    The first deployment, and a change while no replica is ready, roll over at once either way
    (there is no traffic to protect)."""
    smoke: list[SmokeRequest] = Field(default_factory=list, max_length=16)
    """The smoke set: each request must answer (HTTP 200 with a text_output) within its
    latency bound and match its expectation, if any. Empty: one request, prompt "Hello",
    8 tokens, any answer."""
    verifyTimeoutSeconds: int = Field(default=3600, ge=60, le=86400)
    """How long the verification pod may take to become Ready (engine check, model load);
    past it the revision fails verification, with the reason the pod gave if any."""

    @property
    def smoke_set(self) -> list[SmokeRequest]:
        """The requests sent: the smoke set, or the default one."""
        return list(self.smoke) or [SmokeRequest(prompt=DEFAULT_SMOKE_PROMPT, maxTokens=8)]


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration)."""

    key: str | None = Field(default=None, pattern=LABEL_KEY_PATTERN, max_length=317)
    """Taint key; empty with operator Exists matches every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Exists or Equal."""
    value: str | None = Field(default=None, pattern=LABEL_VALUE_PATTERN, max_length=63)
    """Taint value for Equal (a label value: at most 63 characters)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all."""
    tolerationSeconds: int | None = Field(default=None, ge=0, le=JSON_INT_MAX)
    """For NoExecute: how long the pod stays bound after the taint appears."""


class Resources(ApiModel):
    """CPU and memory for the serving container (GPUs come from the parallelism)."""

    cpu: Quantity = "8"
    """CPU request and limit per pod."""
    memory: Quantity = "64Gi"
    """Memory request and limit per pod (/dev/shm counts against it)."""


class EnvVar(ApiModel):
    """An environment variable for the serving and build containers."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
    """Variable name."""
    value: str = Field(default="", max_length=MAX_ANNOTATION_VALUE, pattern=NO_NUL_PATTERN)
    """Variable value (no NUL character: no process environment can hold one)."""


# Environment variables the operator or the platform sets in the pods: the operator's own (the
# writable HOME, TMPDIR and Hugging Face cache on a read-only root, unbuffered logs, Open MPI's
# copy mechanism), the token (it comes from model.credentials as a file, never as plain text in
# the spec), the GPUs the device plugin assigned (NVIDIA_VISIBLE_DEVICES=all would hand the pod
# every GPU of its node), and the prefixes that mpirun (a rank's identity) and LeaderWorkerSet
# (the group's leader and size) inject. A user value would silently replace ours.
RESERVED_ENV_NAMES = (
    "HOME",
    "TMPDIR",
    "HF_HOME",
    "PYTHONUNBUFFERED",
    "OMPI_MCA_btl_vader_single_copy_mechanism",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)
RESERVED_ENV_PREFIXES = ("OMPI_COMM_WORLD_", "PMIX_", "LWS_")


def _env_name_free(name: str) -> bool:
    return name not in RESERVED_ENV_NAMES and not name.startswith(RESERVED_ENV_PREFIXES)


_ENV_RESERVED_CEL = (
    "self.env.all(e, !(e.name in [" + ", ".join(f"'{n}'" for n in RESERVED_ENV_NAMES) + "])"
    + "".join(f" && !e.name.startsWith('{p}')" for p in RESERVED_ENV_PREFIXES)
    + ")"
)
ENV_RULES = (
    Rule(
        cel=f"!has(self.env) || {_ENV_RESERVED_CEL}",
        message=f"podTemplate.env must not set {', '.join(RESERVED_ENV_NAMES)} or names "
        f"starting with {', '.join(RESERVED_ENV_PREFIXES)}: the operator, the GPU device plugin, "
        "mpirun or LeaderWorkerSet set them (the token comes from model.credentials)",
        check=lambda s: all(_env_name_free(e.name) for e in s.env),
        field="env",
    ),
    Rule(
        cel="!has(self.env) || self.env.all(e, self.env.exists_one(f, f.name == e.name))",
        message="podTemplate.env names a variable twice; only the last would take effect: "
        "keep one",
        check=lambda s: len({e.name for e in s.env}) == len(s.env),
        field="env",
    ),
)

NODE_SELECTOR_RULE = Rule(
    cel=f"!has(self.nodeSelector) || !('{c.GPU_PRODUCT_LABEL}' in self.nodeSelector)",
    message=f"podTemplate.nodeSelector must not select {c.GPU_PRODUCT_LABEL}: set gpu.product "
    "instead (the operator adds that node affinity, and the product is part of the engine key: "
    "an engine only loads on the GPU architecture that built it)",
    check=lambda s: c.GPU_PRODUCT_LABEL not in s.nodeSelector,
    field="nodeSelector",
)

_OPERATOR_KEYS_CEL = "[" + ", ".join(f"'{k}'" for k in c.OPERATOR_POD_KEYS) + "]"


def _operator_keys_rule(field: str) -> Rule:
    """podTemplate.labels/annotations may not set the keys only the operator writes."""
    return Rule(
        cel=f"!has(self.{field}) || self.{field}.all(k, !(k in {_OPERATOR_KEYS_CEL}))",
        message=f"{', '.join(c.OPERATOR_POD_KEYS)} are set by the operator; remove them",
        check=lambda s: not set(getattr(s, field)) & set(c.OPERATOR_POD_KEYS),
        field=field,
    )


class PodTemplate(ApiModel):
    """Pod-level settings shared by the build Job and the serving pods."""

    nodeSelector: LabelMap = Field(default_factory=dict)
    """Extra node selector (the GPU product is added from gpu.product)."""
    tolerations: Annotated[
        list[Toleration],
        Field(max_length=MAX_MAP_ENTRIES),
        *cel_check(
            "self.all(t, t.operator != 'Exists' || !has(t.value) || t.value == '')",
            "a toleration with operator Exists must not set value; remove value or use Equal",
            lambda ts: all(t.operator != "Exists" or not t.value for t in ts),
        ),
    ] = Field(default_factory=list)
    """Extra tolerations (a toleration for the nvidia.com/gpu taint is always added)."""
    resources: Resources = Field(default_factory=Resources)
    """CPU and memory per pod."""
    shmSize: Quantity = "8Gi"
    """Size of /dev/shm (a memory emptyDir) for the Python backend and NCCL."""
    serviceAccountName: DnsSubdomain | None = None
    """Service account for the pods; empty uses the namespace default."""
    imagePullSecrets: list[DnsSubdomain] = Field(default_factory=list, max_length=MAX_MAP_ENTRIES)
    """Secrets for pulling the Triton image."""
    priorityClassName: DnsSubdomain | None = None
    """Priority class for the pods."""
    annotations: AnnotationMap = Field(default_factory=dict)
    """Extra annotations of every pod the operator renders (at most 32, values up to 4096
    characters). Any key is copied except that the operator's own keys are protected: the
    tritonllm.io keys it writes (engine-key, repository-key, spec-hash, revision) or reserves
    (deployment, trtllm-version) are refused, and the annotations it sets itself
    (prometheus.io/scrape, port and path on the serving pods) keep the operator's values."""
    labels: LabelMap = Field(default_factory=dict)
    """Extra labels of every pod the operator renders. The tritonllm.io keys the operator writes
    (engine-key, repository-key) or reserves (deployment) are refused, and the labels it sets
    itself (app.kubernetes.io/name, instance, component and managed-by, which the Service, the
    workload's selector and the NetworkPolicy select on) keep the operator's values."""
    env: list[EnvVar] = Field(default_factory=list, max_length=64)
    """Extra environment variables."""
    runAsUser: int = Field(default=1000, ge=0, le=INT32_MAX)
    """UID every container of the pods runs as (also their group and fsGroup). The default 1000
    is the triton-server user of NGC Triton images, so the pods pass Pod Security Admission
    `restricted`; 0 runs as root (admitted only under `baseline` or `privileged`)."""
    readOnlyRootFilesystem: bool = True
    """Mount the containers' root filesystems read-only. /tmp (also HOME and TMPDIR) is a
    writable emptyDir, /dev/shm a memory emptyDir and the store a PVC; false only for an image
    that must write elsewhere."""

    rules: ClassVar[tuple[Rule, ...]] = (
        _operator_keys_rule("labels"),
        _operator_keys_rule("annotations"),
        *ENV_RULES,
        NODE_SELECTOR_RULE,
    )


# spec.runtime in CEL as the validator resolves it: the CRD has no default for it (the choice
# depends on the image), so a rule that reads it must resolve an absent one the same way.
AFTER_ENGINE_PATH_CEL: Final = (
    f"(has(self.trtllmVersion) ? self.trtllmVersion.matches(r'{NEWER_THAN_ENGINE_PATH_RE}') : "
    f"self.image.matches(r'{NGC_TAG_AFTER_ENGINE_PATH_RE}'))"
)
RUNTIME_CEL: Final = (
    f"(has(self.runtime) ? self.runtime : ({AFTER_ENGINE_PATH_CEL} ? 'llmapi' : 'engine'))"
)


class TritonLLMDeploymentSpec(ApiModel):
    """The desired state of a TritonLLMDeployment."""

    image: str = Field(pattern=IMAGE_PATTERN, max_length=512)
    """The Triton TensorRT-LLM image that builds the engine and serves it, for example
    nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3. Its tag pins the TensorRT-LLM version."""
    trtllmVersion: str | None = Field(default=None, pattern=VERSION_PATTERN, max_length=64)
    """TensorRT-LLM version in the image, for images whose tag is not an NGC release tag
    (a mirror, a digest, a custom build). Empty derives it from the tag."""
    model: ModelSource
    """The model and its tokenizer."""
    # Typed as never empty: the validator below fills it before any field is read (the schema
    # still lets users leave it out; no default there, the choice depends on the image).
    runtime: Literal["engine", "llmapi"] = Field(
        default=_FILLED_BY_VALIDATOR, validate_default=False
    )
    """llmapi: no engine build; Triton's llmapi Python model serves the checkpoint with
    TensorRT-LLM's LLM API (PyTorch backend; TensorRT-LLM >= 0.19, NGC 25.05+): the forward
    path, and the only one after TensorRT-LLM 1.2.1 (NGC 26.07). engine: build a TensorRT engine
    and serve it with the inflight_batcher_llm model set (TensorRT-LLM <= 1.2.1). Empty: llmapi
    when the image's TensorRT-LLM has no engine path, else engine; status.runtime shows the
    choice."""
    engine: EngineSpec = Field(default_factory=EngineSpec)
    """Engine build settings (parallelism also applies to llmapi)."""
    serving: ServingSpec = Field(default_factory=ServingSpec)
    """Triton serving settings."""
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    """GPU product and node size."""
    storage: StorageSpec = Field(default_factory=StorageSpec)
    """The model store PVC."""
    autoscaling: AutoscalingSpec | None = None
    """Autoscale replicas with an HPA; empty keeps serving.replicas fixed."""
    podTemplate: PodTemplate = Field(default_factory=PodTemplate)
    """Pod settings."""
    networkPolicy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)
    """Who may reach the serving pods (a NetworkPolicy, on by default)."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """How changes reach the serving pods: verified on a pod of the new revision before traffic
    moves (default), or at once."""
    openai: OpenAISpec = Field(default_factory=OpenAISpec)
    """The OpenAI-compatible API on port 9000 (on by default)."""

    @model_validator(mode="before")
    @classmethod
    def _resolve_runtime(cls, data: Any) -> Any:
        """An empty runtime becomes the one the image's TensorRT-LLM version implies, before
        anything reads it (so spec.runtime is never None after validation)."""
        if not isinstance(data, dict):
            return data
        if data.get("runtime") is None:
            image, version = data.get("image"), data.get("trtllmVersion")
            if isinstance(image, str) and (version is None or isinstance(version, str)):
                try:
                    data = {**data, "runtime": default_runtime(image, version)}
                except ValueError:  # a malformed trtllmVersion: its own field error says so
                    return data
        scaling = data.get("autoscaling")
        if isinstance(scaling, dict) and scaling.get("metric") is None:
            llmapi = data.get("runtime") == "llmapi"
            metric = "backendWaitingRequests" if llmapi else "queueComputeRatio"
            data = {**data, "autoscaling": {**scaling, "metric": metric}}
        return data

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=f"!has(self.runtime) || self.runtime != 'engine' || !{AFTER_ENGINE_PATH_CEL}",
            message=f"runtime engine: {ENGINE_PATH_REMOVED}. Use runtime llmapi (or leave "
            "runtime empty: it then picks llmapi for this image; docs/migration.md maps each "
            f"engine field), or an image up to tritonserver:{NEWEST_ENGINE_RELEASE}",
            check=lambda s: s.runtime != "engine"
            or has_engine_path(s.image, s.trtllmVersion) is not False,
            field="runtime",
        ),
        Rule(
            cel="self.engine.parallelism.tensor * self.engine.parallelism.pipeline <= "
            "self.gpu.perNode || (self.engine.parallelism.tensor * "
            "self.engine.parallelism.pipeline) % self.gpu.perNode == 0",
            message="world size (engine.parallelism.tensor x pipeline) must fit on one node "
            "(<= gpu.perNode) or fill whole nodes (a multiple of gpu.perNode); adjust "
            "parallelism or gpu.perNode",
            check=lambda s: (
                s.engine.parallelism.world_size <= s.gpu.perNode
                or s.engine.parallelism.world_size % s.gpu.perNode == 0
            ),
            field="engine.parallelism",
        ),
        Rule(
            cel="self.engine.parallelism.tensor * self.engine.parallelism.pipeline <= "
            "self.gpu.perNode || self.gpu.perNode % self.engine.parallelism.tensor == 0 || "
            "self.engine.parallelism.tensor % self.gpu.perNode == 0",
            message="a multi-node engine.parallelism.tensor group must not straddle nodes: make "
            "tensor divide gpu.perNode (or be a multiple of it) and scale with pipeline",
            check=lambda s: (
                s.engine.parallelism.world_size <= s.gpu.perNode
                or s.gpu.perNode % s.engine.parallelism.tensor == 0
                or s.engine.parallelism.tensor % s.gpu.perNode == 0
            ),
            field="engine.parallelism.tensor",
        ),
        Rule(
            # Either runtime: an llmapi group starts its ranks over the same sshd.
            cel="self.engine.parallelism.tensor * self.engine.parallelism.pipeline <= "
            "self.gpu.perNode || self.podTemplate.runAsUser != 0",
            message="a multi-node deployment cannot run as root (podTemplate.runAsUser 0): its "
            "sshd would need SYS_CHROOT, SETUID and SETGID, which the pods drop; use a non-root "
            "uid such as 1000",
            check=lambda s: (
                s.engine.parallelism.world_size <= s.gpu.perNode
                or s.podTemplate.runAsUser != 0
            ),
            field="podTemplate.runAsUser",
        ),
        Rule(
            cel="!self.engine.parallelism.auto || has(self.gpu.product)",
            message="engine.parallelism.auto sizes the deployment for one GPU product's memory: "
            "set gpu.product (the nvidia.com/gpu.product label of the nodes)",
            check=lambda s: not s.engine.parallelism.auto or bool(s.gpu.product),
            field="engine.parallelism.auto",
        ),
        Rule(
            # llmapi quantizes with ModelOpt into a checkpoint the PyTorch backend loads; the
            # other formats (and an int8 KV cache) exist only for TensorRT engines.
            cel=f"{RUNTIME_CEL} != 'llmapi' || (self.engine.quantization.format in "
            f"{list(LLMAPI_FORMATS)} && self.engine.quantization.kvCacheDtype in "
            f"{list(LLMAPI_KV_DTYPES)} && (self.engine.quantization.format != 'none' || "
            "self.engine.quantization.kvCacheDtype == 'none'))",
            message="runtime llmapi serves checkpoints that ModelOpt pre-quantizes in a format "
            "TensorRT-LLM's PyTorch backend loads: engine.quantization.format must be one of "
            f"{', '.join(LLMAPI_FORMATS)} and kvCacheDtype one of {', '.join(LLMAPI_KV_DTYPES)}, "
            "fp8 only with a format other than none (ModelOpt calibrates the KV cache with the "
            "weights); int8_wo, int4_wo, int8_sq and an int8 KV cache need runtime engine",
            check=lambda s: s.runtime != "llmapi" or (
                s.engine.quantization.format in LLMAPI_FORMATS
                and s.engine.quantization.kvCacheDtype in LLMAPI_KV_DTYPES
                and (s.engine.quantization.format != "none"
                     or s.engine.quantization.kvCacheDtype == "none")
            ),
            field="engine.quantization.format",
        ),
        Rule(
            cel=f"{RUNTIME_CEL} != 'llmapi' || !has(self.autoscaling) || "
            "!has(self.autoscaling.metric) || "
            "!(self.autoscaling.metric in ['queueComputeRatio', 'pendingRequests'])",
            message="autoscaling.metric queueComputeRatio and pendingRequests read Triton's own "
            "queue, which runtime llmapi leaves at once (the LLM API queues and batches inside "
            "the model): use backendWaitingRequests (the default there) or kvCacheUtilization",
            check=lambda s: s.runtime != "llmapi" or s.autoscaling is None
            or s.autoscaling.metric not in ("queueComputeRatio", "pendingRequests"),
            field="autoscaling.metric",
        ),
        Rule(
            cel=f"{RUNTIME_CEL} != 'llmapi' || !self.serving.bls",
            message="serving.bls needs runtime engine (llmapi has a single Python model)",
            check=lambda s: s.runtime != "llmapi" or not s.serving.bls,
            field="serving.bls",
        ),
        Rule(
            cel="!self.serving.kvCache.enableReuse || self.engine.plugins.pagedContextFmha",
            message="serving.kvCache.enableReuse needs engine.plugins.pagedContextFmha true "
            "(TensorRT-LLM refuses KV reuse without paged context FMHA)",
            check=lambda s: not s.serving.kvCache.enableReuse or s.engine.plugins.pagedContextFmha,
            field="serving.kvCache.enableReuse",
        ),
        Rule(
            cel="self.serving.instances.bls <= self.engine.limits.maxBatchSize",
            message="serving.instances.bls above engine.limits.maxBatchSize adds idle instances; "
            "lower it",
            check=lambda s: s.serving.instances.bls <= s.engine.limits.maxBatchSize,
            field="serving.instances.bls",
        ),
        Rule(
            cel="!has(self.serving.kvCache.maxTokens) || self.serving.kvCache.maxTokens >= "
            "self.engine.limits.maxSeqLen",
            message="serving.kvCache.maxTokens must hold at least one full sequence "
            "(>= engine.limits.maxSeqLen)",
            check=lambda s: (
                s.serving.kvCache.maxTokens is None
                or s.serving.kvCache.maxTokens >= s.engine.limits.maxSeqLen
            ),
            field="serving.kvCache.maxTokens",
        ),
    )

    @property
    def world_size(self) -> int:
        return self.engine.parallelism.world_size

    @property
    def topology(self) -> Topology:
        """GPUs, pods and ranks of one replica (tritonllm.api.topology)."""
        par = self.engine.parallelism
        return Topology.derive(
            tensor=par.tensor,
            pipeline=par.pipeline,
            gpus_per_node=self.gpu.perNode,
        )


# Models that carry rules, with their path in the CRD schema (for the CRD generator and for
# running the Python side of every rule).
RULE_SITES: dict[str, type[ApiModel]] = {
    "spec": TritonLLMDeploymentSpec,
    "spec.model": ModelSource,
    "spec.model.tokenizer": Tokenizer,
    "spec.engine": EngineSpec,
    "spec.engine.parallelism": Parallelism,
    "spec.engine.quantization": Quantization,
    "spec.serving": ServingSpec,
    "spec.storage": StorageSpec,
    "spec.autoscaling": AutoscalingSpec,
    "spec.podTemplate": PodTemplate,
}


class RuleViolation(ValueError):
    """A cross-field rule failed; ``field`` is the full path from the object root."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _at(obj: Any, path: str) -> Any:
    for part in path.split(".")[1:]:
        if obj is None:
            return None
        obj = getattr(obj, part)
    return obj


def rule_violations(spec: TritonLLMDeploymentSpec) -> list[RuleViolation]:
    """Every non-transition rule that `spec` breaks, in schema order."""
    out: list[RuleViolation] = []
    for site, model in RULE_SITES.items():
        obj = _at(spec, site)
        if obj is None:
            continue
        for rule in model.rules:
            if rule.transition or rule.check(obj):
                continue
            out.append(RuleViolation(f"{site}.{rule.field}".rstrip("."), rule.message))
    return out
