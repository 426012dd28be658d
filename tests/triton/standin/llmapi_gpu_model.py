"""The transformer behind the SIMULATED LLM API of the GPU recipe: a Llama decoder in PyTorch,
tensor parallel across GPUs, with RANDOM weights. Not TensorRT-LLM, not a trained model.

Used by tests/triton/standin/llmapi_gpu_standin.py (its rank processes) and by the GPU recipe's
llmapi stack (tests/gpu/llmapi.py, docs/gpu.md), which also runs the unsharded reference below.

- **Architecture**: Llama-2-7B's `config.json` (hidden 4096, 32 layers, 32 heads, intermediate
  11008, vocabulary 32000, RMSNorm eps 1e-5, RoPE theta 10000, SiLU), written by `write_model`
  on the machine; `num_hidden_layers` may be lowered for a smoke run. The math follows
  transformers' `LlamaForCausalLM` (RMSNorm in float32, rotate-half RoPE, SDPA attention,
  `down(silu(gate(x)) * up(x))`), so `reference_model` (transformers itself, unsharded, the same
  state dict) must agree.
- **Weights**: no checkpoint is read. Every tensor is drawn from a generator seeded with the
  config's `tritonllm_standin.seed` and the tensor's name (normal, std `initializer_range`; norms
  ones), on the GPU in float32, then cast to the model's dtype; every rank draws the full tensor
  and keeps its shard, so the shards are exactly slices of the reference's weights.
- **Tensor parallelism as TensorRT-LLM does it (Megatron-style)**: rank r holds the r-th block of
  attention heads of q/k/v_proj and of the rows of gate/up_proj (column parallel), and the
  matching columns of o_proj and down_proj (row parallel); one all-reduce (NCCL) sums the partial
  outputs after attention and one after the MLP, per layer. The embedding is replicated; the
  LM head is computed by rank 0 only, the only rank that samples (TensorRT-LLM splits it by
  vocabulary and gathers: a detail that changes no token).
- **KV cache**: one slot per running request, `[slots, kv_heads / tp, max_seq_len, head_dim]`
  per layer and for K and V; a prefill writes positions 0..n-1 of its slot, a decode step
  writes one position per request and attends over its slot's first positions.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

# Llama-2-7B's architecture (meta-llama/Llama-2-7b-hf config.json); torch_dtype bfloat16 here.
LLAMA2_7B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "num_hidden_layers": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "bfloat16",
}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Decode graphs cover attention lengths in steps of this many positions.
GRAPH_LENGTH_STEP = 256
SPECIAL = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2 as in Llama's tokenizer
# Words the recipe's prompts use (the rest of the vocabulary is w<id>).
WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world", "triton",
    "says", "hi", "what", "is", "machine", "learning", "answer", "in", "one", "paragraph", "a",
    "of", "to", "and",
]


def write_model(out: Path, *, layers: int | None = None, seed: int = 0,
                dtype: str = "bfloat16") -> Path:
    """config.json (Llama-2-7B's architecture, `layers` if given) and a word-level tokenizer of
    the full vocabulary (specials, WORDS, then w<id>), no weights: the stand-in draws them."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    config = {**LLAMA2_7B, "torch_dtype": dtype,
              "tritonllm_standin": {"seed": seed, "note": "SIMULATED: random weights"}}
    if layers is not None:
        config["num_hidden_layers"] = layers
    (out / "config.json").write_text(json.dumps(config, indent=1))
    vocab = {w: i for i, w in enumerate([*SPECIAL, *WORDS])}
    for i in range(len(vocab), config["vocab_size"]):
        vocab[f"w{i}"] = i
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(str(out))
    return out


def read_config(model_dir: str | Path) -> dict[str, Any]:
    return dict(json.loads((Path(model_dir) / "config.json").read_text()))


def weight_names(config: dict[str, Any]) -> list[str]:
    """The state dict's keys, as transformers' LlamaForCausalLM names them."""
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names += [p + n for n in (
            "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
            "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
            "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight")]
    return names


def weight_shape(config: dict[str, Any], name: str) -> tuple[int, ...]:
    h, inter, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
    if name.endswith("norm.weight"):
        return (h,)
    shapes = {"embed_tokens": (v, h), "lm_head": (v, h), "q_proj": (h, h), "k_proj": (kv, h),
              "v_proj": (kv, h), "o_proj": (h, h), "gate_proj": (inter, h),
              "up_proj": (inter, h), "down_proj": (h, inter)}
    return next(shape for key, shape in shapes.items() if f"{key}." in name)


def draw(config: dict[str, Any], name: str, device: torch.device, dtype: torch.dtype
         ) -> torch.Tensor:
    """One weight, the same on every rank and in the reference: seeded by seed and name."""
    shape = weight_shape(config, name)
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device, dtype=dtype)
    seed = int(config.get("tritonllm_standin", {}).get("seed", 0))
    gen = torch.Generator(device=device)
    gen.manual_seed((seed << 32) ^ zlib.crc32(name.encode()))
    std = float(config.get("initializer_range", 0.02))
    full = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * std
    return full.to(dtype)


def shard_of(name: str, full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank r's part: column parallel (q/k/v, gate/up: rows of the [out, in] weight), row
    parallel (o, down: columns), the rest replicated."""
    if any(k in name for k in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")):
        return full.chunk(world, dim=0)[rank].contiguous()
    if any(k in name for k in ("o_proj", "down_proj")):
        return full.chunk(world, dim=1)[rank].contiguous()
    return full


def state_dict(config: dict[str, Any], device: torch.device, dtype: torch.dtype
               ) -> dict[str, torch.Tensor]:
    """The full (unsharded) weights, for the reference."""
    return {name: draw(config, name, device, dtype) for name in weight_names(config)}


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class ShardedLlama:
    """Rank `rank` of `world`: its shard of the weights, its KV cache, the forward passes.

    `all_reduce(t)` sums t over the ranks in place (torch.distributed over NCCL; identity for a
    world of one)."""

    def __init__(self, config: dict[str, Any], rank: int, world: int, device: torch.device,
                 dtype: torch.dtype, all_reduce: Any) -> None:
        self.config, self.rank, self.world, self.device, self.dtype = (
            config, rank, world, device, dtype)
        self.all_reduce = all_reduce
        heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        if heads % world or kv_heads % world or config["intermediate_size"] % world:
            raise ValueError(f"tensor_parallel_size {world} does not divide the heads "
                             f"({heads}, {kv_heads}) and the MLP ({config['intermediate_size']})")
        self.head_dim = config["hidden_size"] // heads
        self.heads, self.kv_heads = heads // world, kv_heads // world
        self.eps = float(config["rms_norm_eps"])
        self.weights: dict[str, torch.Tensor] = {}
        for name in weight_names(config):
            if name == "lm_head.weight" and rank != 0:
                continue  # only rank 0 samples
            self.weights[name] = shard_of(name, draw(config, name, device, dtype), rank, world)
        theta = float(config.get("rope_theta", 10000.0))
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, device=device,
                                                      dtype=torch.float32) / self.head_dim))
        self.cache_k: list[torch.Tensor] = []
        self.cache_v: list[torch.Tensor] = []
        self.slots = 0
        self.max_len = 0

    def slot_bytes(self, max_len: int) -> int:
        per_layer = 2 * self.kv_heads * max_len * self.head_dim * self.dtype.itemsize
        return int(per_layer * self.config["num_hidden_layers"])

    def allocate(self, slots: int, max_len: int) -> None:
        """KV for `slots` requests, plus one scratch slot that padded rows of a CUDA graph write
        to."""
        shape = (slots + 1, self.kv_heads, max_len, self.head_dim)
        layers = self.config["num_hidden_layers"]
        self.cache_k = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(layers)]
        self.cache_v = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(layers)]
        self.slots, self.max_len = slots, max_len

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, T, head_dim] for positions [B, T] (float32, then the model's dtype,
        as transformers computes them)."""
        freqs = positions.to(torch.float32)[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def _attention(self, i: int, x: torch.Tensor, step: Step) -> torch.Tensor:
        """x: [B, T, hidden]. Writes K/V of the new positions to the requests' slots."""
        w = self.weights
        p = f"model.layers.{i}.self_attn."
        b, t, _ = x.shape
        q = F.linear(x, w[p + "q_proj.weight"]).view(b, t, self.heads, self.head_dim)
        k = F.linear(x, w[p + "k_proj.weight"]).view(b, t, self.kv_heads, self.head_dim)
        v = F.linear(x, w[p + "v_proj.weight"]).view(b, t, self.kv_heads, self.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, d]
        q = q * step.cos + _rotate_half(q) * step.sin
        k = k * step.cos + _rotate_half(k) * step.sin
        ck, cv = self.cache_k[i], self.cache_v[i]
        if step.prefill:  # prompts padded at the end: causal attention never sees the pads
            ck[step.slots, :, :t] = k
            cv[step.slots, :, :t] = v
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            ck[step.slots, :, step.positions] = k[:, :, 0]
            cv[step.slots, :, step.positions] = v[:, :, 0]
            keys = ck[:, :, :step.length].index_select(0, step.slots)
            values = cv[:, :, :step.length].index_select(0, step.slots)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=step.mask)
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        partial = F.linear(out, w[p + "o_proj.weight"])
        self.all_reduce(partial)
        return partial

    def _mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        w = self.weights
        p = f"model.layers.{i}.mlp."
        h = F.silu(F.linear(x, w[p + "gate_proj.weight"])) * F.linear(x, w[p + "up_proj.weight"])
        partial = F.linear(h, w[p + "down_proj.weight"])
        self.all_reduce(partial)
        return partial

    @torch.inference_mode()
    def prefill(self, batch: list[tuple[int, list[int]]]) -> torch.Tensor | None:
        """The prompts of new requests (slot, token ids), together, padded at the end to the
        longest: K/V of positions 0..n-1 into each slot; on rank 0 the logits of each prompt's
        last position ([N, vocab], float32), None on the other ranks."""
        t = max(len(prompt) for _, prompt in batch)
        ids = torch.tensor([prompt + [0] * (t - len(prompt)) for _, prompt in batch],
                           device=self.device)
        cos, sin = self._rope(torch.arange(t, device=self.device)[None].expand(len(batch), t))
        last = torch.tensor([len(prompt) - 1 for _, prompt in batch], device=self.device)
        slots = torch.tensor([slot for slot, _ in batch], device=self.device)
        return self._forward(ids, Step(True, slots, None, t, None, cos, sin, last))

    def _decode_step(self, slots: torch.Tensor, pos: torch.Tensor, length: int) -> Step:
        """What every layer of a decode step shares, made once (no GPU sync in the layers)."""
        mask = (torch.arange(length, device=self.device)[None, :] <= pos[:, None])[:, None, None]
        cos, sin = self._rope(pos[:, None])
        return Step(False, slots, pos, length, mask, cos, sin)

    def _forward(self, ids: torch.Tensor, step: Step) -> torch.Tensor | None:
        w = self.weights
        x = F.embedding(ids, w["model.embed_tokens.weight"])
        for i in range(self.config["num_hidden_layers"]):
            p = f"model.layers.{i}."
            x = x + self._attention(i, _rms_norm(x, w[p + "input_layernorm.weight"], self.eps),
                                    step)
            x = x + self._mlp(i, _rms_norm(x, w[p + "post_attention_layernorm.weight"],
                                           self.eps))
        if self.rank != 0:
            return None
        rows = x[:, -1] if step.last is None else x[torch.arange(len(x), device=x.device),
                                                     step.last]
        return F.linear(_rms_norm(rows, w["model.norm.weight"], self.eps),
                        w["lm_head.weight"]).float()

    # --- decode steps as CUDA graphs (the PyTorch backend's default, cuda_graph_config) -------

    graphs: dict[tuple[int, int], Graph]
    graph_batch = 0  # largest batch replayed from a graph (0: graphs off)

    @torch.inference_mode()
    def enable_graphs(self, max_batch: int) -> None:
        """Capture one graph now (a batch of 1): what makes the rank agree to use them."""
        self.graphs, self.pool = {}, torch.cuda.graph_pool_handle()
        self.graph_batch = max_batch
        self._graph(1, self._length_bucket(1))

    @staticmethod
    def _batch_bucket(b: int) -> int:
        return 1 << (b - 1).bit_length()

    def _length_bucket(self, length: int) -> int:
        return min(self.max_len, -(-length // GRAPH_LENGTH_STEP) * GRAPH_LENGTH_STEP)

    @torch.inference_mode()
    def decode(self, tokens: list[int], slots: list[int], positions: list[int]
               ) -> torch.Tensor | None:
        """One decode step of the batch: a replay of the graph of its (batch, length) bucket,
        padded rows writing to the scratch slot; eagerly when graphs are off or the batch is
        larger than they cover."""
        b = len(tokens)
        bucket = self._batch_bucket(b)
        if not self.graph_batch or bucket > self.graph_batch:
            step = self._decode_step(torch.tensor(slots, device=self.device),
                                     torch.tensor(positions, device=self.device),
                                     max(positions) + 1)
            return self._forward(torch.tensor(tokens, device=self.device)[:, None], step)
        graph = self._graph(bucket, self._length_bucket(max(positions) + 1))
        pad = bucket - b
        rows = [tokens + [0] * pad, slots + [self.slots] * pad, positions + [0] * pad]
        graph.inputs.copy_(torch.tensor(rows))
        graph.graph.replay()
        return None if graph.logits is None else graph.logits[:b]

    def _graph(self, bucket: int, length: int) -> Graph:
        key = (bucket, length)
        if key in self.graphs:
            return self.graphs[key]
        inputs = torch.zeros(3, bucket, dtype=torch.long, device=self.device)
        inputs[1] = self.slots  # capture and warm-up write to the scratch slot only

        def body() -> torch.Tensor | None:
            step = self._decode_step(inputs[1], inputs[2], length)
            return self._forward(inputs[0][:, None], step)

        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            body()  # warm-up, as torch.cuda.graph's documentation asks
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            logits = body()
        self.graphs[key] = Graph(graph, inputs, logits)
        return self.graphs[key]


@dataclasses.dataclass(frozen=True)
class Graph:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: torch.Tensor  # [3, bucket]: tokens, slots, positions
    logits: torch.Tensor | None  # rank 0: [bucket, vocab]


@dataclasses.dataclass(frozen=True)
class Step:
    prefill: bool
    slots: torch.Tensor  # [B]: each row's KV slot
    positions: torch.Tensor | None  # decode: [B], each row's position
    length: int  # prefill: the padded prompt length; decode: positions attended
    mask: torch.Tensor | None  # decode: [B, 1, 1, length], True where a row attends
    cos: torch.Tensor
    sin: torch.Tensor
    last: torch.Tensor | None = None  # prefill: [B], each prompt's last position


def reference_model(config: dict[str, Any], device: torch.device, dtype: torch.dtype) -> Any:
    """transformers' LlamaForCausalLM (unsharded, SDPA attention) with the same weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    keys = set(LlamaConfig().to_dict()) | {"architectures"}
    cfg = LlamaConfig(**{k: v for k, v in config.items() if k in keys and k != "torch_dtype"})
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model.load_state_dict(state_dict(config, device, dtype), assign=True)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg, device=device)
    return model.to(device=device).eval()


@torch.inference_mode()
def reference_greedy(model: Any, prompt: list[int], n: int) -> dict[str, Any]:
    """Greedy decoding with transformers (KV cache on): the tokens, each step's log-probability
    of the chosen token, and each step's margin (top-1 minus top-2 logit)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], device=device)
    out = model(input_ids=ids, use_cache=True)
    tokens, logprobs, margins = [], [], []
    for _ in range(n):
        logits = out.logits[0, -1].float()
        top = torch.topk(logits, 2)
        token = int(top.indices[0])
        tokens.append(token)
        margins.append(float(top.values[0] - top.values[1]))
        logprobs.append(float(torch.log_softmax(logits, -1)[token]))
        out = model(input_ids=torch.tensor([[token]], device=device),
                    past_key_values=out.past_key_values, use_cache=True)
    return {"tokens": tokens, "logprobs": logprobs, "margins": margins}


@torch.inference_mode()
def teacher_forced_gaps(model: Any, prompt: list[int], tokens: list[int]) -> list[float]:
    """For an answer `tokens` to `prompt`: at each step, the reference's top logit minus its
    logit of the token the answer chose there (0: the reference's own greedy choice), given the
    answer's own prefix. One forward over prompt + answer."""
    if not tokens:
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + tokens], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(tokens)].float()
    chosen = logits.gather(1, torch.tensor(tokens, device=device)[:, None])[:, 0]
    return [float(g) for g in (logits.max(dim=1).values - chosen)]
