"""The OpenAI frontend's configuration: what the operator renders for the `openai` container of
a serving pod, and what `tritonllm openai` (the frontend, :mod:`tritonllm.openai`) reads.

The frontend is a thin HTTP server beside tritonserver in the same pod: it speaks OpenAI's
`/v1/chat/completions`, `/v1/completions` and `/v1/models`, renders chat prompts with the
model's own chat template, counts tokens with the model's tokenizer, and sends each request to
Triton over its gRPC stream on the pod's loopback. Everything that differs between runtimes
and TensorRT-LLM versions (the model to call, its tensor names and types, whether it streams)
is decided here, by the operator, from the same contracts that render the model repository;
the frontend itself knows no runtime.

docs/openai.md says why this frontend and not Triton's or `trtllm-serve`.
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tritonllm.api.deployment import TritonLLMDeployment

from .contracts import LLMAPI_CONTRACT, Dtypes, ModelContract, model_set
from .features import Features, features_for
from .repository import ENSEMBLE, TENSORRT_LLM, dtypes_for

# The file, in the serving pod's plan volume, that holds a FrontendConfig as JSON.
FRONTEND_CONFIG_KEY = "openai.json"

# Sampling and control parameters the frontend may send to the Triton model, by the name the
# frontend uses; FrontendConfig.inputs maps each one the model accepts to its tensor.
PARAMETERS = (
    "prompt",            # BYTES: the (rendered) prompt text
    "max_tokens",        # INT32: tokens to generate
    "stream",            # BOOL: ask a decoupled model for one response per step
    "temperature",       # FP32
    "top_p",             # FP32
    "seed",              # UINT64 (engine) / INT64 (llmapi)
    "frequency_penalty",  # FP32
    "presence_penalty",  # FP32
    "return_log_probs",  # BOOL: ask for per-token log probabilities
    "end_id",            # INT32 (unused unless a model needs it)
    "return_num_output_tokens",  # BOOL: ask for the count of generated tokens
)


class TritonTensor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    dtype: Literal["BYTES", "BOOL", "INT32", "INT64", "UINT64", "FP32"]


class FrontendConfig(BaseModel):
    """Everything the frontend needs, rendered per deployment (revision) by the operator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The name clients put in `model` and `/v1/models` lists (spec.openai.servedModelName,
    # default the deployment's name).
    served_model_name: str
    runtime: Literal["engine", "llmapi"]
    # Triton's gRPC endpoint in the pod (loopback) and the model that generates.
    triton_grpc: str = "127.0.0.1:8001"
    triton_model: str
    # Inputs carry a leading batch dimension (the ensemble's max_batch_size > 0: shape [1, 1]);
    # llmapi's model has max_batch_size 0 (shape [1]).
    batched: bool
    # The model is decoupled (serving.streaming): it can send one response per generated step.
    decoupled: bool
    # PARAMETERS name -> the model's input tensor; a parameter absent here is not sent (and an
    # OpenAI field that needs it is refused with 400 naming the field).
    inputs: dict[str, TritonTensor]
    # "text" -> the output tensor with the generated text; "log_probs" -> per-token log
    # probabilities, when the model returns them; "num_output_tokens" -> the count of tokens
    # generated (a whole answer's completion tokens, exact where re-encoding its text is not).
    outputs: dict[str, str]
    # The model's tokenizer files (tokenizer.json, tokenizer_config.json, chat_template.jinja)
    # as mounted in the frontend's container (the store, read-only).
    tokenizer_dir: str
    # Whether the model's own tokenization adds special tokens (a BOS) to the prompt: the
    # frontend counts prompt tokens the same way, and drops a chat template's leading BOS text
    # so that the prompt does not carry two.
    add_special_tokens: bool = True
    # The model's text output starts with the prompt (engine runtime with
    # serving.excludeInputInOutput false): the frontend removes that prefix.
    output_includes_prompt: bool = False
    # spec.openai.chatTemplate: a Jinja chat template that replaces the tokenizer's.
    chat_template: str | None = None
    # The deployment's limits: the longest prompt, prompt + completion, and the completion
    # length when a request names none.
    max_input_len: int = Field(gt=0)
    max_seq_len: int = Field(gt=0)
    default_max_tokens: int = Field(gt=0)
    # Requests in flight beyond this are answered 429 (with Retry-After) at once.
    max_concurrent_requests: int = Field(default=256, gt=0)
    # Bounds on untrusted input: request body bytes, messages per chat, stop strings.
    max_body_bytes: int = Field(default=1 << 20, gt=0)
    max_messages: int = Field(default=1024, gt=0)
    max_stop: int = Field(default=4, gt=0)
    # Seconds one request may take end to end before the frontend cancels it (504).
    request_timeout_seconds: float = Field(default=600.0, gt=0)
    port: int = 9000


# --- what the operator renders -----------------------------------------------------------------

# PARAMETERS name -> the input of each runtime's model that carries it. The tensors themselves
# (and so whether this version's model has one, and its type) come from the contracts that
# render config.pbtxt: a name here that the model lacks is simply not offered.
_ENSEMBLE_INPUTS: dict[str, tuple[str, ...]] = {
    "prompt": ("text_input",),
    "max_tokens": ("max_tokens",),
    "stream": ("stream",),
    "temperature": ("temperature",),
    "top_p": ("top_p",),
    "seed": ("seed", "random_seed"),  # renamed in TensorRT-LLM 1.0's templates
    "frequency_penalty": ("frequency_penalty",),
    "presence_penalty": ("presence_penalty",),
    "return_log_probs": ("return_log_probs",),
    "end_id": ("end_id",),
    "return_num_output_tokens": ("return_num_output_tokens",),  # TensorRT-LLM 1.0's templates
}
_LLMAPI_INPUTS: dict[str, tuple[str, ...]] = {
    "prompt": ("text_input",),
    "max_tokens": ("sampling_param_max_tokens",),
    "stream": ("streaming",),
    "temperature": ("sampling_param_temperature",),
    "top_p": ("sampling_param_top_p",),
    "seed": ("sampling_param_seed",),
    "frequency_penalty": ("sampling_param_frequency_penalty",),
    "presence_penalty": ("sampling_param_presence_penalty",),
    # Our llmapi model returns output_log_probs when sampling_param_logprobs is set (an INT32:
    # the count of log probabilities per token, as SamplingParams.logprobs).
    "return_log_probs": ("sampling_param_logprobs",),
    "end_id": ("sampling_param_end_id",),
    "return_num_output_tokens": ("return_num_output_tokens",),
}
# The output with per-token log probabilities, in either runtime's model.
_LOG_PROBS_OUTPUT = "output_log_probs"
# The output with the count of generated tokens (with its input return_num_output_tokens).
_NUM_OUTPUT_TOKENS = "num_output_tokens"
# Triton's wire name of the config's STRING type.
_WIRE_DTYPE = {"STRING": "BYTES"}


def _contract(dep: TritonLLMDeployment) -> ModelContract:
    """The contract of the model the frontend calls: llmapi's model, or the ensemble (also with
    serving.bls: the ensemble is the model the repository always has, with the same inputs)."""
    if dep.spec.runtime == "llmapi":
        return LLMAPI_CONTRACT
    f = features_for(dep.trtllm_version)
    return _ensemble(f, dtypes_for(dep.spec, f))


@functools.lru_cache(maxsize=64)
def _ensemble(f: Features, dtypes: Dtypes) -> ModelContract:
    # Deriving the model set is most of the cost of a render; it depends on these two alone.
    return model_set(f, dtypes).ensemble


def _inputs(dep: TritonLLMDeployment, contract: ModelContract) -> dict[str, TritonTensor]:
    names = _LLMAPI_INPUTS if dep.spec.runtime == "llmapi" else _ENSEMBLE_INPUTS
    out: dict[str, TritonTensor] = {}
    for parameter in PARAMETERS:
        tensor = next(
            (t for n in names[parameter] if (t := contract.input(n)) is not None), None
        )
        # A model that is not decoupled answers once: asking it to stream is an error.
        if tensor is None or (parameter == "stream" and not dep.spec.serving.streaming):
            continue
        dtype = _WIRE_DTYPE.get(tensor.dtype, tensor.dtype)
        out[parameter] = TritonTensor.model_validate({"name": tensor.name, "dtype": dtype})
    return out


def served_model_name(dep: TritonLLMDeployment) -> str:
    """The name clients send: spec.openai.servedModelName, or the deployment's name."""
    return dep.spec.openai.servedModelName or dep.name


def frontend_config(dep: TritonLLMDeployment, *, tokenizer_dir: str) -> FrontendConfig:
    """The frontend's configuration for `dep` (pure). `tokenizer_dir`: where the model's
    tokenization reads the tokenizer, as mounted in the serving pod (the frontend mounts the
    store at the same path)."""
    spec = dep.spec
    llmapi = spec.runtime == "llmapi"
    contract = _contract(dep)
    outputs = {"text": "text_output"}
    if contract.output(_LOG_PROBS_OUTPUT) is not None:
        outputs["log_probs"] = _LOG_PROBS_OUTPUT
    if contract.output(_NUM_OUTPUT_TOKENS) is not None and \
            contract.input("return_num_output_tokens") is not None:
        outputs["num_output_tokens"] = _NUM_OUTPUT_TOKENS
    limits = spec.engine.limits
    return FrontendConfig(
        served_model_name=served_model_name(dep),
        runtime=spec.runtime,
        triton_model=TENSORRT_LLM if llmapi else ENSEMBLE,
        # llmapi's model has max_batch_size 0 (no batch dimension); the ensemble batches.
        batched=not llmapi,
        decoupled=spec.serving.streaming,
        inputs=_inputs(dep, contract),
        outputs=outputs,
        tokenizer_dir=tokenizer_dir,
        # The preprocessing model tokenizes with spec.model.tokenizer.addSpecialTokens; the
        # LLM API with SamplingParams' default (add_special_tokens true).
        add_special_tokens=True if llmapi else spec.model.tokenizer.addSpecialTokens,
        # The ensemble echoes the prompt unless serving.excludeInputInOutput (the tensorrt_llm
        # model's exclude_input_in_output); our llmapi model never does by default.
        output_includes_prompt=not llmapi and not spec.serving.excludeInputInOutput,
        chat_template=spec.openai.chatTemplate,
        max_input_len=limits.maxInputLen,
        max_seq_len=limits.maxSeqLen,
        # Room for any prompt the deployment accepts (maxSeqLen > maxInputLen by rule).
        default_max_tokens=limits.maxSeqLen - limits.maxInputLen,
        max_concurrent_requests=spec.openai.maxConcurrentRequests,
    )
