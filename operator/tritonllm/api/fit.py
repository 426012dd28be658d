"""Fit planner: does a model, at the requested concurrency and context, fit the GPUs? Pure.

From the model's architecture (a config.json, or the table below for well-known checkpoints),
the engine dtype and quantization, the build limits and the GPU product's memory, it computes per
rank (one GPU):

    weights     = layers/pp x (attention + MLP parameters)/tp x bytes per weight
                  + the embedding (first stage, replicated) + the LM head/tp (last stage)
    workspace   = maxNumTokens x (4 hidden + 3 intermediate/tp) x activation bytes
                  + maxBatchSize x beams x vocabulary/tp x 4 (float32 logits)
                  + RUNTIME_OVERHEAD (CUDA context, cuBLAS and NCCL buffers)
    KV/token    = 2 (K and V) x layers/pp x ceil(KV heads/tp) x head size x KV bytes
    KV tokens   = freeGpuMemFraction x (memory - weights - workspace) / KV per token

which is how TensorRT-LLM sizes its paged KV cache: kv_cache_free_gpu_mem_fraction of the memory
left once the engine is loaded.

Runtime llmapi (the LLM API's PyTorch backend) has no engine and no TensorRT workspace. It loads
the checkpoint (ModelOpt-quantized for engine.quantization: lm_head stays unquantized, ModelOpt's
exclude_modules), runs one profiling forward pass of max_num_tokens, and gives the KV cache
free_gpu_memory_fraction of what that pass left: KvCacheCreator._cal_max_tokens in
tensorrt_llm/_torch/pyexecutor/_util.py, (total - peak + the profiling KV cache) x fraction,
peak being torch plus non-torch memory after weights and activations. So, per rank:

    weights     = layers/pp x (attention + MLP parameters)/tp x bytes per weight
                  + (embedding + LM head)/tp (both column-parallel over tp in the PyTorch
                  models, e.g. LlamaModel.embed_tokens: TensorParallelMode.COLUMN)
    activations = maxNumTokens x (4 hidden + 3 intermediate/tp) x activation bytes
                  + maxBatchSize x beams x vocabulary x 4 (float32 logits, gathered to the
                  whole vocabulary on every rank) + RUNTIME_OVERHEAD
    KV tokens   = freeGpuMemFraction x (memory - weights - activations) / KV per token

The KV cache is one byte a value with an fp8 KV cache (kvCacheDtype fp8), else the dtype's.
engine.dtype stands for the checkpoint's dtype, which the LLM API loads as it is.

A layout *fits* when that KV cache holds the requested tokens:
serving.kvCache.maxTokens when set, else maxBatchSize x beams x maxSeqLen (every sequence at
full length, what guaranteed_no_evict reserves), with maxSeqLen capped by
maxAttentionWindowSize. `choose` picks the smallest tp (then pp, then nodes) that fits.

These are estimates: the activation term and the overhead are not TensorRT's exact allocation;
docs/fit.md compares the figures with published ones. Standard library only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .topology import world_size

GIB = 2**30
MIB = 2**20
# CUDA context, cuBLAS workspace, NCCL buffers and the TensorRT-LLM runtime's own buffers: an
# assumption (docs/fit.md), not a measurement of TensorRT.
RUNTIME_OVERHEAD = 1 * GIB


@dataclasses.dataclass(frozen=True)
class Architecture:
    """The shape of a decoder-only transformer (the fields of its config.json that size it)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    gated_mlp: bool = True  # SwiGLU (three projections) as Llama; GPT-2 has two
    positions: int = 0  # learned position embeddings (GPT-2); 0 for rotary
    experts: int = 1  # mixture of experts: MLPs per layer

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.intermediate * self.experts
        return q_o + k_v + mlp

    def params(self) -> int:
        """All parameters, the LM head counted apart from the embedding (TensorRT-LLM
        checkpoints store it even when the Hub model ties it)."""
        embed = (self.vocab + self.positions) * self.hidden
        return self.layers * self.layer_params() + embed + self.vocab * self.hidden


def architecture_from_config(cfg: Mapping[str, Any]) -> Architecture:
    """An Architecture from a Hugging Face config.json (Llama-style names, or GPT-2's)."""
    if "n_embd" in cfg:  # GPT-2
        hidden = int(cfg["n_embd"])
        return Architecture(
            layers=int(cfg["n_layer"]), hidden=hidden, heads=int(cfg["n_head"]),
            kv_heads=int(cfg["n_head"]), intermediate=int(cfg.get("n_inner") or 4 * hidden),
            vocab=int(cfg["vocab_size"]), gated_mlp=False, positions=int(cfg["n_positions"]),
        )
    heads = int(cfg["num_attention_heads"])
    return Architecture(
        layers=int(cfg["num_hidden_layers"]), hidden=int(cfg["hidden_size"]), heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
        experts=int(cfg.get("num_local_experts") or 1),
    )


_GPT2 = Architecture(12, 768, 12, 12, 3072, 50257, gated_mlp=False, positions=1024)
_GPT2_MEDIUM = Architecture(24, 1024, 16, 16, 4096, 50257, gated_mlp=False, positions=1024)
_LLAMA2_7B = Architecture(32, 4096, 32, 32, 11008, 32000)
_LLAMA2_13B = Architecture(40, 5120, 40, 40, 13824, 32000)
_LLAMA2_70B = Architecture(80, 8192, 64, 8, 28672, 32000)
_LLAMA3_8B = Architecture(32, 4096, 32, 8, 14336, 128256)
_LLAMA3_70B = Architecture(80, 8192, 64, 8, 28672, 128256)
_QWEN2_7B = Architecture(28, 3584, 28, 4, 18944, 152064)

# Well-known checkpoints (their config.json on the Hub), by lower-cased Hub id.
KNOWN_ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": _GPT2,
    "openai-community/gpt2": _GPT2,
    "gpt2-medium": _GPT2_MEDIUM,
    "openai-community/gpt2-medium": _GPT2_MEDIUM,
    "meta-llama/llama-2-7b-hf": _LLAMA2_7B,
    "meta-llama/llama-2-7b-chat-hf": _LLAMA2_7B,
    "meta-llama/llama-2-13b-hf": _LLAMA2_13B,
    "meta-llama/llama-2-13b-chat-hf": _LLAMA2_13B,
    "meta-llama/llama-2-70b-hf": _LLAMA2_70B,
    "meta-llama/llama-2-70b-chat-hf": _LLAMA2_70B,
    "meta-llama/meta-llama-3-8b-instruct": _LLAMA3_8B,
    "meta-llama/meta-llama-3.1-8b-instruct": _LLAMA3_8B,
    "meta-llama/llama-3.1-8b-instruct": _LLAMA3_8B,
    "meta-llama/meta-llama-3.1-70b-instruct": _LLAMA3_70B,
    "meta-llama/llama-3.1-70b-instruct": _LLAMA3_70B,
    "mistralai/mistral-7b-instruct-v0.3": Architecture(32, 4096, 32, 8, 14336, 32768),
    "mistralai/mixtral-8x7b-instruct-v0.1": Architecture(32, 4096, 32, 8, 14336, 32000,
                                                         experts=8),
    "qwen/qwen2-7b-instruct": _QWEN2_7B,
    "qwen/qwen2.5-7b-instruct": _QWEN2_7B,
    "tinyllama/tinyllama-1.1b-chat-v1.0": Architecture(22, 2048, 32, 4, 5632, 32000),
}


def known_architecture(source: str) -> Architecture | None:
    """The table's architecture for an hf:// source (None for pvc:// and unknown models)."""
    if not source.startswith("hf://"):
        return None
    return KNOWN_ARCHITECTURES.get(source.removeprefix("hf://").lower())


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A GPU product: the memory the driver reports (what the KV fraction applies to) and the
    figure NVIDIA's datasheet publishes for it (docs/fit.md cites each)."""

    memory_mib: int
    datasheet: str


# nvidia.com/gpu.product label values (GPU feature discovery) -> memory. memory_mib is the total
# nvidia-smi reports for the product; datasheet is NVIDIA's published capacity.
GPUS: dict[str, Gpu] = {
    "NVIDIA-H200": Gpu(143771, "141 GB HBM3e"),
    "NVIDIA-H100-80GB-HBM3": Gpu(81559, "80 GB HBM3"),
    "NVIDIA-H100-PCIe": Gpu(81559, "80 GB HBM2e"),
    "NVIDIA-A100-SXM4-80GB": Gpu(81920, "80 GB HBM2e"),
    "NVIDIA-A100-80GB-PCIe": Gpu(81920, "80 GB HBM2e"),
    "NVIDIA-A100-SXM4-40GB": Gpu(40960, "40 GB HBM2"),
    "NVIDIA-A100-PCIE-40GB": Gpu(40960, "40 GB HBM2"),
    "NVIDIA-L40S": Gpu(46068, "48 GB GDDR6"),
    "NVIDIA-A10": Gpu(23028, "24 GB GDDR6"),
    "NVIDIA-A10G": Gpu(23028, "24 GB GDDR6"),
    "NVIDIA-L4": Gpu(23034, "24 GB GDDR6"),
    "Tesla-T4": Gpu(15360, "16 GB GDDR6"),
}


def gpu_memory(product: str) -> int | None:
    """Bytes of memory of a product label value (case-insensitive), None when unknown."""
    for name, gpu in GPUS.items():
        if name.lower() == product.lower():
            return gpu.memory_mib * MIB
    return None


@dataclasses.dataclass(frozen=True)
class Request:
    """What the engine is asked to hold: everything of the spec that sizes memory."""

    dtype: str = "float16"
    quantization: str = "none"
    awq_block: int = 128
    kv_dtype: str = "none"
    max_batch: int = 64
    max_seq: int = 2048
    max_num_tokens: int = 8192
    beams: int = 1
    window: int | None = None
    max_tokens: int | None = None  # serving.kvCache.maxTokens
    fraction: float = 0.9
    runtime: str = "engine"  # llmapi: the PyTorch backend's arithmetic (module docstring)

    @property
    def sequence_tokens(self) -> int:
        return min(self.max_seq, self.window) if self.window else self.max_seq

    @property
    def tokens(self) -> int:
        """KV tokens asked for: maxTokens, else every sequence at full length."""
        return self.max_tokens or self.max_batch * self.beams * self.sequence_tokens

    @property
    def tokens_text(self) -> str:
        if self.max_tokens:
            return f"{self.max_tokens:,} tokens (serving.kvCache.maxTokens)"
        beams = f" x {self.beams} beams" if self.beams > 1 else ""
        return f"{self.max_batch}{beams} x {self.sequence_tokens} tokens"


def request_from_spec(spec: Any) -> Request:
    """The Request of a TritonLLMDeploymentSpec (duck-typed: this module stays stdlib-only)."""
    eng, kv = spec.engine, spec.serving.kvCache
    return Request(
        dtype=eng.dtype, quantization=eng.quantization.format,
        awq_block=eng.quantization.awqBlockSize, kv_dtype=eng.quantization.kvCacheDtype,
        max_batch=eng.limits.maxBatchSize, max_seq=eng.limits.maxSeqLen,
        max_num_tokens=eng.limits.maxNumTokens, beams=eng.limits.maxBeamWidth,
        window=kv.maxAttentionWindowSize, max_tokens=kv.maxTokens, fraction=kv.freeGpuMemFraction,
        runtime=spec.runtime,
    )


_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def weight_bytes(req: Request) -> float:
    """Bytes per weight of the transformer layers' linear layers (scales included)."""
    fmt = req.quantization
    if fmt in ("int8_wo", "int8_sq", "fp8"):
        return 1.0
    if fmt == "int4_wo":
        return 0.5
    if fmt in ("int4_awq", "w4a8_awq"):
        return 0.5 + 2 / req.awq_block  # a 16-bit scale per group
    if fmt == "nvfp4":
        return 0.5 + 1 / 16  # an FP8 scale per 16 weights
    return _DTYPE_BYTES[req.dtype]


@dataclasses.dataclass(frozen=True)
class Fit:
    """The arithmetic of one layout (tp, pp) on one GPU product, per rank."""

    tensor: int
    pipeline: int
    nodes: int
    memory: int
    weights: float
    workspace: float
    kv_per_token: float
    fraction: float
    requested: int  # KV tokens asked for
    runtime: str = "engine"

    @property
    def work(self) -> str:
        """What `workspace` holds: TensorRT's workspace, or the LLM API's activation peak."""
        return "activations" if self.runtime == "llmapi" else "workspace"

    @property
    def free(self) -> float:
        return self.memory - self.weights - self.workspace

    @property
    def kv_tokens(self) -> int:
        """Tokens the KV cache gets at the fraction (0 when the weights do not fit)."""
        return max(0, int(self.fraction * self.free / self.kv_per_token))

    @property
    def fits(self) -> bool:
        return self.free > 0 and self.kv_tokens >= self.requested

    @property
    def fraction_needed(self) -> float:
        """The smallest freeGpuMemFraction that holds the requested tokens (> 1: none)."""
        return self.requested * self.kv_per_token / self.free if self.free > 0 else math.inf

    @property
    def layout(self) -> str:
        return f"tp={self.tensor} pp={self.pipeline}"


def compute(arch: Architecture, req: Request, memory: int, tensor: int, pipeline: int,
            per_node: int = 8) -> Fit:
    """The per-rank arithmetic of one layout (the module docstring has the formulas)."""
    stage_layers = math.ceil(arch.layers / pipeline)
    act = _DTYPE_BYTES[req.dtype]
    llmapi = req.runtime == "llmapi"
    # The PyTorch models split the embedding over tp; TensorRT engines replicate it.
    embed = (arch.vocab + arch.positions) * arch.hidden * act / (tensor if llmapi else 1)
    head = arch.vocab * arch.hidden * act / tensor
    edges = embed + head if pipeline == 1 else max(embed, head)
    weights = stage_layers * arch.layer_params() * weight_bytes(req) / tensor + edges
    moe = 2 if arch.experts > 1 else 1  # top-2 routing: two experts' activations per token
    per_token = (4 * arch.hidden + 3 * moe * arch.intermediate / tensor) * act
    # float32 logits: the engine's per tp rank, the PyTorch LM head's gathered on every rank
    logits = req.max_batch * req.beams * arch.vocab / (1 if llmapi else tensor) * 4
    workspace = req.max_num_tokens * per_token + logits + RUNTIME_OVERHEAD
    kv_bytes = 1 if req.kv_dtype in ("int8", "fp8") else act
    kv = 2 * stage_layers * math.ceil(arch.kv_heads / tensor) * arch.head_dim * kv_bytes
    nodes = max(1, world_size(tensor, pipeline) // per_node)
    return Fit(tensor, pipeline, nodes, memory, weights, workspace, kv, req.fraction, req.tokens,
               req.runtime)


def shape_problems(arch: Architecture, tensor: int, pipeline: int,
                   name: str = "the model") -> list[tuple[str, str]]:
    """(field, message) for a layout that cannot split the model: tp must divide the attention
    heads; pp must not exceed the layers, and must divide them."""
    out = []
    if arch.heads % tensor:
        divisors = [d for d in range(1, min(arch.heads, 64) + 1) if arch.heads % d == 0]
        out.append(("tensor", f"{tensor} does not divide the {arch.heads} attention heads of "
                    f"{name}; use one of {', '.join(map(str, divisors))}"))
    if pipeline > arch.layers:
        out.append(("pipeline", f"{pipeline} is more than the {arch.layers} layers of {name}; "
                    f"use at most {arch.layers}, a divisor of it"))
    elif arch.layers % pipeline:
        out.append(("pipeline", f"{pipeline} does not divide the {arch.layers} layers of {name}; "
                    f"use a divisor of {arch.layers}"))
    return out


def candidates(arch: Architecture, per_node: int) -> list[tuple[int, int]]:
    """Layouts in the order `auto` tries them: one node first, then fewer nodes; on as many
    nodes, the smaller pp, then the smaller tp. A tp group stays within a node; a multi-node
    world fills whole nodes (the spec's own rules)."""
    out = []
    for tensor in range(1, per_node + 1):
        for pipeline in range(1, 65):
            world = world_size(tensor, pipeline)
            if world > 64 or shape_problems(arch, tensor, pipeline):
                continue
            if world > per_node and (world % per_node or per_node % tensor):
                continue
            out.append((tensor, pipeline))
    return sorted(out, key=lambda tp: (max(1, tp[0] * tp[1] // per_node), tp[1], tp[0]))


def choose(arch: Architecture, req: Request, memory: int, per_node: int) -> tuple[
        Fit | None, list[Fit]]:
    """The first layout of `candidates` that fits, and the layouts tried up to it."""
    tried = []
    for tensor, pipeline in candidates(arch, per_node):
        fit = compute(arch, req, memory, tensor, pipeline, per_node)
        tried.append(fit)
        if fit.fits:
            return fit, tried
    return None, tried


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def refusal(fit: Fit, req: Request, product: str, better: Fit | None) -> str:
    """Why `fit` does not fit, with the arithmetic, and what would."""
    mem = f"{product}'s {gib(fit.memory)}"
    if fit.free <= 0:
        why = (f"weights {gib(fit.weights)} + {fit.work} {gib(fit.workspace)} per GPU exceed "
               f"{mem}")
    else:
        need = fit.requested * fit.kv_per_token
        why = (f"weights {gib(fit.weights)} + {fit.work} {gib(fit.workspace)} + KV {gib(need)} at "
               f"{req.tokens_text} > {fit.fraction:g} x {gib(fit.free)} left of {mem}: the KV "
               f"cache holds {fit.kv_tokens:,} tokens ({fit.kv_per_token / 1024:.0f} KiB each)")
    fixes = [f"{better.layout} fits (engine.parallelism, or parallelism.auto: true)"] \
        if better else []
    if fit.free > 0 and not req.max_tokens and fit.kv_tokens >= req.sequence_tokens:
        most = fit.kv_tokens // (req.beams * req.sequence_tokens)
        fixes.append(f"engine.limits.maxBatchSize {most} fits")
    if fit.free > 0 and fit.kv_tokens >= req.sequence_tokens:
        fixes.append(f"serving.kvCache.maxTokens {fit.kv_tokens:,} fits (fewer full-length "
                     "sequences at once)")
    return f"{fit.layout} does not fit: {why}" + (f"; {'; '.join(fixes)}" if fixes else "")


TABLE_HEADER = ("layout", "nodes", "weights/GPU", "workspace", "KV/token", "KV tokens",
                "requested", "fits")


def table_row(fit: Fit) -> tuple[str, ...]:
    return (fit.layout, str(fit.nodes), gib(fit.weights), gib(fit.workspace),
            f"{fit.kv_per_token / 1024:.0f} KiB", f"{fit.kv_tokens:,}", f"{fit.requested:,}",
            "yes" if fit.fits else "no")
