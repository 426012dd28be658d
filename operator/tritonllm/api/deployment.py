"""The whole TritonLLMDeployment object, and the one function that turns user input into it.

`parse_deployment` is the operator's and the CLI's gate: it applies the schema (types, bounds,
enums, defaults), every cross-field rule (the same ones the CRD enforces with CEL) and the checks
that need knowledge the API server lacks (image tag -> TensorRT-LLM version, GPU architecture). It
reports *all* problems at once, each naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import constants as c
from . import fit
from .reasons import DOES_NOT_FIT
from .spec import (
    DNS_LABEL_PATTERN,
    GPU_PRODUCT_PATTERN,
    IMAGE_PATTERN,
    LLMAPI_FORMAT_SINCE,
    MODELOPT_CALIB_DATASETS,
    MODELOPT_FORMATS,
    NO_NUL_PATTERN,
    ONE_LINE_PATTERN,
    POSITIVE_QUANTITY_PATTERN,
    QUANTITY_PATTERN,
    SOURCE_PATTERN,
    VERSION_PATTERN,
    TritonLLMDeploymentSpec,
    rule_violations,
)
from .status import FitRow, FitStatus, TritonLLMDeploymentStatus
from .toolflags import (
    ARCHITECTURE_DIRS,
    CALIB_DATASET_SINCE,
    CONVERTERS,
    QUANTIZE_FORMAT_SINCE,
    converter_problems,
)
from .versions import (
    LLMAPI_ITER_STATS_SINCE,
    LLMAPI_SINCE,
    OLDEST_SUPPORTED,
    TrtllmVersion,
    version_for_image,
)

NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"  # DNS-1035: Service names must start with a letter


class Metadata(BaseModel):
    """The part of ObjectMeta the operator reads."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, max_length=c.MAX_NAME_LENGTH)
    namespace: str = Field(default="default", pattern=DNS_LABEL_PATTERN, max_length=63)
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class TritonLLMDeployment(BaseModel):
    """A parsed, validated TritonLLMDeployment."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    apiVersion: str = c.API_VERSION
    kind: str = c.KIND
    metadata: Metadata
    spec: TritonLLMDeploymentSpec
    status: TritonLLMDeploymentStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def trtllm_version(self) -> TrtllmVersion:
        """The TensorRT-LLM version of spec.image (parse_deployment guarantees one exists)."""
        v = resolve_trtllm_version(self.spec)
        assert v is not None
        return v


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One problem with user input: the field's full path and what to do about it."""

    field: str
    message: str
    reason: str = ""  # a condition reason when not InvalidSpec (DoesNotFit)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InvalidDeployment(ValueError):
    """Raised by parse_deployment with every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


# Friendly descriptions for pattern errors (pydantic's default repeats the regex).
_PATTERN_HINTS = {
    IMAGE_PATTERN: "must be an image reference such as "
    "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3 (lower-case path, optional :tag "
    "and @sha256:digest)",
    SOURCE_PATTERN: "must be hf://<org>/<name> (Hugging Face Hub) or pvc://<claim>/<path>",
    QUANTITY_PATTERN: "must be a Kubernetes quantity such as 8Gi or 500M",
    POSITIVE_QUANTITY_PATTERN: "must be a Kubernetes quantity above zero such as 8Gi, 500M or "
    "500m (an exponent of at most 18)",
    NO_NUL_PATTERN: "must not contain a NUL character",
    GPU_PRODUCT_PATTERN: "must be a node label value (at most 63 letters, digits, '-', '_' or "
    "'.', starting and ending with a letter or digit) such as NVIDIA-H100-80GB-HBM3",
    ONE_LINE_PATTERN: "must be one line without control characters (it is written into "
    "config.pbtxt)",

    VERSION_PATTERN: "must be a version such as 0.13.0",
    NAME_PATTERN: f"must be a DNS-1035 label (lower-case letters, digits and '-', starting with a "
    f"letter, at most {c.MAX_NAME_LENGTH} characters)",
    DNS_LABEL_PATTERN: "must be a DNS label (lower-case letters, digits and '-')",
}


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _pydantic_errors(exc: ValidationError) -> list[FieldError]:
    out = []
    for err in exc.errors(include_url=False):
        # Drop pydantic's internal union/literal tags (e.g. 'literal[...]') from the path.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
        field = _loc(loc)
        kind = err["type"]
        msg = err["msg"]
        if kind == "string_pattern_mismatch":
            pattern = (err.get("ctx") or {}).get("pattern", "")
            msg = _PATTERN_HINTS.get(pattern, f"must match {pattern}")
        elif kind == "missing":
            msg = "is required"
        elif kind == "extra_forbidden":
            msg = "is not a field of TritonLLMDeployment; check its spelling (`kubectl explain "
            "tllm.spec`)"
        elif kind.startswith("literal_error"):
            msg = msg.replace("Input should be", "must be")
        else:
            msg = msg.replace("Input should be", "must be")
        out.append(FieldError(field, msg))
    return out


def resolve_trtllm_version(spec: TritonLLMDeploymentSpec) -> TrtllmVersion | None:
    """spec.trtllmVersion if set, else the version the image tag implies."""
    if spec.trtllmVersion:
        return TrtllmVersion(spec.trtllmVersion)
    return version_for_image(spec.image)


# GPU products (nvidia.com/gpu.product values, matched by substring) by architecture.
_ARCH_MARKERS = (
    ("blackwell", ("B100", "B200", "GB200", "B300", "RTX-PRO-6000", "RTX-5090")),
    ("hopper", ("H100", "H200", "H800", "H20", "GH200")),
    ("ada", ("L40", "L4", "RTX-4090", "RTX-6000-Ada", "L20")),
    ("ampere", ("A100", "A800", "A10", "A30", "A40", "A16", "A2", "RTX-A6000", "RTX-3090")),
    ("turing", ("T4", "RTX-2080", "Quadro-RTX")),
    ("volta", ("V100",)),
)
_ARCH_ORDER = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")
# Minimum architecture per quantization format and dtype (TensorRT-LLM / ModelOpt support
# matrices): AWQ, INT8 SmoothQuant, weight-only and bfloat16 need Ampere, FP8 Ada (or Hopper),
# NVFP4 Blackwell.
_MIN_ARCH = {
    "int4_awq": "ampere",
    "int8_sq": "ampere",
    "int8_wo": "ampere",
    "int4_wo": "ampere",
    "bfloat16": "ampere",
    "fp8": "ada",
    "w4a8_awq": "ada",
    "nvfp4": "blackwell",
}
_ALTERNATIVE = {
    "ampere": "use float16 with quantization none, or an Ampere or newer GPU",
    "ada": "use int4_awq or int8_sq, or an Ada, Hopper or newer GPU",
    "blackwell": "use fp8 (Ada/Hopper) or int4_awq, or a Blackwell GPU",
}

def gpu_architecture(product: str) -> str | None:
    """The architecture of a GPU product label value, or None when we do not know it."""
    upper = product.upper()
    for arch, markers in _ARCH_MARKERS:
        if any(m.upper() in upper for m in markers):
            return arch
    return None


def _llmapi_quantization_errors(
    spec: TritonLLMDeploymentSpec, version: TrtllmVersion
) -> list[FieldError]:
    """A quantization format the image's PyTorch backend cannot load yet (spec's
    LLMAPI_FORMAT_SINCE); the formats it never loads are the spec's Rule."""
    q = spec.engine.quantization
    out = []
    since = LLMAPI_FORMAT_SINCE.get(q.format)
    if since is not None and version < TrtllmVersion(since):
        out.append(FieldError(
            "spec.engine.quantization.format",
            f"runtime llmapi loads {q.format} checkpoints from TensorRT-LLM {since} (its PyTorch "
            f"backend loads only fp8 and nvfp4 before); the image has {version}: use fp8, or a "
            "newer image (tritonserver:25.09+)",
        ))
    if q.calibrationDataset and q.calibrationDataset not in MODELOPT_CALIB_DATASETS:
        out.append(FieldError(
            "spec.engine.quantization.calibrationDataset",
            "runtime llmapi calibrates with ModelOpt's hf_ptq.py, whose --dataset takes one of "
            f"{', '.join(MODELOPT_CALIB_DATASETS)} (no path)",
        ))
    return out


def _llmapi_metric_errors(
    spec: TritonLLMDeploymentSpec, version: TrtllmVersion
) -> list[FieldError]:
    """The backend's metrics of runtime llmapi come from the LLM API's iteration statistics,
    which LLM() takes as an argument (enable_iter_perf_stats) only from 0.21."""
    scaling = spec.autoscaling
    if (spec.runtime != "llmapi" or scaling is None or version >= LLMAPI_ITER_STATS_SINCE
            or scaling.metric not in ("backendWaitingRequests", "kvCacheUtilization")):
        return []
    return [FieldError(
        "spec.autoscaling.metric",
        f"runtime llmapi exports the backend's request and KV-cache metrics from TensorRT-LLM "
        f"{LLMAPI_ITER_STATS_SINCE} on (tritonserver:25.08+); the image has {version}: use "
        "metric cpu or a newer image",
    )]


def _semantic_errors(spec: TritonLLMDeploymentSpec) -> list[FieldError]:
    errors: list[FieldError] = []
    version = resolve_trtllm_version(spec)
    if version is None:
        errors.append(
            FieldError(
                "spec.trtllmVersion",
                f"cannot tell the TensorRT-LLM version of image {spec.image!r} (not an NGC "
                "<yy.mm>-trtllm-python-py3 tag we know); set spec.trtllmVersion to the version "
                "the image carries",
            )
        )
    else:
        if version < OLDEST_SUPPORTED:
            errors.append(
                FieldError(
                    "spec.image",
                    f"TensorRT-LLM {version} is older than the oldest supported "
                    f"({OLDEST_SUPPORTED}); use tritonserver:24.04-trtllm-python-py3 or newer",
                )
            )
        # runtime engine after the engine path: the spec's Rule (admission) refuses it.
        if spec.runtime == "llmapi" and version < LLMAPI_SINCE:
            errors.append(
                FieldError(
                    "spec.runtime",
                    f"runtime llmapi needs TensorRT-LLM >= {LLMAPI_SINCE} (tritonserver:25.05+); "
                    f"the image has {version}: use runtime engine or a newer image",
                )
            )
        errors += _llmapi_metric_errors(spec, version)
        if spec.runtime == "engine":
            errors += _tool_errors(spec, version)
        else:
            errors += _llmapi_quantization_errors(spec, version)
    errors += _gpu_errors(spec) + _image_errors(spec) + _shape_errors(spec)
    if spec.podTemplate.shmSize and re.fullmatch(QUANTITY_PATTERN, spec.podTemplate.shmSize):
        from .spec import quantity_bytes

        if quantity_bytes(spec.podTemplate.shmSize) > quantity_bytes(
            spec.podTemplate.resources.memory
        ):
            errors.append(
                FieldError(
                    "spec.podTemplate.shmSize",
                    "/dev/shm counts against the pod's memory: shmSize must not exceed "
                    "podTemplate.resources.memory",
                )
            )
    return errors


def _tool_errors(spec: TritonLLMDeploymentSpec, version: TrtllmVersion) -> list[FieldError]:
    """What the build tools of `version` cannot do for this spec (tritonllm.api.toolflags, read
    off the upstream option tables): a quantize.py format or option, or a converter flag."""
    q = spec.engine.quantization
    errors: list[FieldError] = []
    if q.format in MODELOPT_FORMATS:
        since = QUANTIZE_FORMAT_SINCE[q.format]
        if version < since:
            errors.append(
                FieldError(
                    "spec.engine.quantization.format",
                    f"{q.format} needs TensorRT-LLM >= {since} (quantize.py of the image's "
                    f"{version} has no --qformat {q.format})",
                )
            )
        if q.calibrationDataset and version < CALIB_DATASET_SINCE:
            errors.append(
                FieldError(
                    "spec.engine.quantization.calibrationDataset",
                    f"quantize.py of TensorRT-LLM {version} has no --calib_dataset (it exists "
                    f"since {CALIB_DATASET_SINCE}); remove it to use the tool's default dataset",
                )
            )
        return errors
    arch = spec.model.architecture
    # auto: the converter is known only at build time, which refuses there; here only when
    # no converter at all could do it.
    dirs = sorted(set(ARCHITECTURE_DIRS.values())) if arch == "auto" else [ARCHITECTURE_DIRS[arch]]
    found = {
        d: converter_problems(
            CONVERTERS[d],
            version,
            tp=spec.topology.tensor,
            pp=spec.topology.pipeline,
            weight_only=q.format in ("int8_wo", "int4_wo"),
            kv=q.kvCacheDtype,
        )
        for d in dirs
    }
    if all(found.values()):
        errors += [FieldError(field, why) for problems in found.values() for field, why in problems]
    return errors


def _gpu_errors(spec: TritonLLMDeploymentSpec) -> list[FieldError]:
    """Quantization formats and dtypes the GPU of spec.gpu.product cannot run."""
    arch = gpu_architecture(spec.gpu.product) if spec.gpu.product else None
    if arch is None:
        return []
    q = spec.engine.quantization
    checks = (
        (q.format, "spec.engine.quantization.format"),
        ("fp8" if q.kvCacheDtype == "fp8" else "", "spec.engine.quantization.kvCacheDtype"),
        (spec.engine.dtype if spec.runtime == "engine" else "", "spec.engine.dtype"),
    )
    errors = []
    for value, field in checks:
        need = _MIN_ARCH.get(value)
        if need and _ARCH_ORDER.index(arch) < _ARCH_ORDER.index(need):
            errors.append(
                FieldError(
                    field,
                    f"{value} needs a {need.capitalize()} or newer GPU, but gpu.product "
                    f"{spec.gpu.product} is {arch.capitalize()}: {_ALTERNATIVE[need]}",
                )
            )
    return errors


def _image_errors(spec: TritonLLMDeploymentSpec) -> list[FieldError]:
    """spec.trtllmVersion must agree with the version an NGC image tag pins."""
    tagged = version_for_image(spec.image)
    if spec.trtllmVersion and tagged is not None and TrtllmVersion(spec.trtllmVersion) != tagged:
        return [
            FieldError(
                "spec.trtllmVersion",
                f"is {spec.trtllmVersion} but image {spec.image} carries TensorRT-LLM {tagged}; "
                "remove spec.trtllmVersion (the tag decides) or use the image of that version",
            )
        ]
    return []


def _shape_errors(spec: TritonLLMDeploymentSpec) -> list[FieldError]:
    """Parallelism that cannot split a known model: tp must divide its attention heads, pp its
    layers (the fit planner's table of architectures, tritonllm.api.fit)."""
    arch = fit.known_architecture(spec.model.source)
    par = spec.engine.parallelism
    if arch is None or par.auto:
        return []
    problems = fit.shape_problems(arch, par.tensor, par.pipeline, spec.model.source)
    return [FieldError(f"spec.engine.parallelism.{field}", message) for field, message in problems]


def fit_for(spec: TritonLLMDeploymentSpec) -> tuple[fit.Fit | None, list[fit.Fit]] | None:
    """The fit planner's answer for a spec: (the first layout that fits, the layouts tried up to
    it), or None when it cannot tell (no gpu.product in its memory table, or a model whose
    architecture it does not know)."""
    arch = fit.known_architecture(spec.model.source)
    memory = fit.gpu_memory(spec.gpu.product) if spec.gpu.product else None
    if arch is None or memory is None:
        return None
    return fit.choose(arch, fit.request_from_spec(spec), memory, spec.gpu.perNode)


def fit_status(spec: TritonLLMDeploymentSpec, auto: bool) -> FitStatus | None:
    """status.fit of a parsed spec (`auto`: the user asked engine.parallelism.auto): the layouts
    auto tries up to the first that fits, and the one served."""
    arch = fit.known_architecture(spec.model.source)
    memory = fit.gpu_memory(spec.gpu.product) if spec.gpu.product else None
    if arch is None or memory is None:
        return None
    req = fit.request_from_spec(spec)
    par = spec.engine.parallelism
    served = fit.compute(arch, req, memory, par.tensor, par.pipeline, spec.gpu.perNode)
    _, tried = fit.choose(arch, req, memory, spec.gpu.perNode)
    if served.layout not in {f.layout for f in tried}:
        tried.append(served)
    rows = [FitRow(tensor=f.tensor, pipeline=f.pipeline, nodes=f.nodes,
                   weightsGiB=round(f.weights / fit.GIB, 2),
                   workspaceGiB=round(f.workspace / fit.GIB, 2),
                   kvBytesPerToken=int(f.kv_per_token), kvTokens=f.kv_tokens, fits=f.fits)
            for f in tried]
    needed = served.fraction_needed
    return FitStatus(auto=auto, chosen=served.layout, gpuProduct=str(spec.gpu.product),
                     gpuMemoryGiB=round(memory / fit.GIB, 2), requestedTokens=req.tokens,
                     fractionNeeded=round(needed, 3) if needed < 1e6 else -1.0, table=rows)


def _fit_errors(spec: TritonLLMDeploymentSpec) -> list[FieldError]:
    """An explicit layout whose GPUs cannot hold the weights and the requested KV cache."""
    arch = fit.known_architecture(spec.model.source)
    memory = fit.gpu_memory(spec.gpu.product) if spec.gpu.product else None
    par = spec.engine.parallelism
    if arch is None or memory is None or par.auto or _shape_errors(spec):
        return []
    req = fit.request_from_spec(spec)
    this = fit.compute(arch, req, memory, par.tensor, par.pipeline, spec.gpu.perNode)
    if this.fits:
        return []
    better, _ = fit.choose(arch, req, memory, spec.gpu.perNode)
    message = fit.refusal(this, req, str(spec.gpu.product), better)
    return [FieldError("spec.engine.parallelism", message, reason=DOES_NOT_FIT)]


def _resolve_auto(dep: TritonLLMDeployment) -> TritonLLMDeployment:
    """engine.parallelism.auto replaced by the planner's choice (or InvalidDeployment)."""
    spec = dep.spec
    answer = fit_for(spec)
    if answer is None:
        raise InvalidDeployment([FieldError(
            "spec.engine.parallelism.auto",
            f"the fit planner knows no architecture for {spec.model.source} or no memory for "
            f"gpu.product {spec.gpu.product} (docs/fit.md lists both tables); set "
            "engine.parallelism.tensor and pipeline", reason=DOES_NOT_FIT)])
    chosen, tried = answer
    if chosen is None:
        last = tried[-1] if tried else None
        detail = fit.refusal(last, fit.request_from_spec(spec), str(spec.gpu.product), None) \
            if last else "no layout can split the model"
        raise InvalidDeployment([FieldError(
            "spec.engine.parallelism.auto",
            f"no layout fits up to 64 GPUs of {spec.gpu.perNode} per node; the largest tried: "
            f"{detail}", reason=DOES_NOT_FIT)])
    par = spec.engine.parallelism.model_copy(
        update={"tensor": chosen.tensor, "pipeline": chosen.pipeline, "auto": False})
    engine = spec.engine.model_copy(update={"parallelism": par})
    return dep.model_copy(update={"spec": spec.model_copy(update={"engine": engine})})


def without_nulls(value: Any) -> Any:
    """`value` without the fields that are null, as the API server prunes them from a custom
    resource before defaulting (no field of the CRD is nullable): `credentials: null`,
    `engine: ~` or an empty `tokenizer:` mean "not set", and the defaults apply."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def parse_deployment(obj: dict[str, Any]) -> TritonLLMDeployment:
    """Validate a TritonLLMDeployment given as a dict (YAML, or the body kopf hands us).

    Raises InvalidDeployment listing every problem; on success the result has every default
    filled in and passes every rule the CRD has, plus the version and GPU checks.
    """
    errors: list[FieldError] = []
    if not isinstance(obj, dict):
        raise InvalidDeployment([FieldError("(root)", "must be a mapping (a YAML object)")])
    if obj.get("kind", c.KIND) != c.KIND:
        errors.append(FieldError("kind", f"must be {c.KIND}, got {obj.get('kind')!r}"))
    if obj.get("apiVersion", c.API_VERSION) != c.API_VERSION:
        errors.append(
            FieldError("apiVersion", f"must be {c.API_VERSION}, got {obj.get('apiVersion')!r}")
        )
    body = without_nulls({"metadata": obj.get("metadata") or {}, "spec": obj.get("spec")})
    if not isinstance(body["metadata"], dict):
        errors.append(FieldError("metadata", "must be a mapping with at least a name"))
    if body.get("spec") is None:
        errors.append(FieldError("spec", "is required"))
    elif not isinstance(body.get("spec"), dict):
        errors.append(FieldError("spec", "must be a mapping"))
    if errors and any(e.field in ("metadata", "spec") for e in errors):
        raise InvalidDeployment(errors)
    try:
        dep = TritonLLMDeployment.model_validate(body)
    except ValidationError as exc:
        raise InvalidDeployment(errors + _pydantic_errors(exc)) from None
    errors += [FieldError(v.field, v.message) for v in rule_violations(dep.spec)]
    errors += _semantic_errors(dep.spec) + _fit_errors(dep.spec)
    if errors:
        raise InvalidDeployment(errors)
    if dep.spec.engine.parallelism.auto:
        dep = _resolve_auto(dep)
        errors = [FieldError(v.field, v.message) for v in rule_violations(dep.spec)]
        errors += _semantic_errors(dep.spec)
        if errors:  # e.g. a chosen multi-node layout with podTemplate.runAsUser 0
            raise InvalidDeployment(errors)
    return dep
