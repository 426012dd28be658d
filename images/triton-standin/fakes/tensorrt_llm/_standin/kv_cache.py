"""A SIMULATED paged KV cache: block accounting and prefix reuse, no tensors.

Sizing as TensorRT-LLM's PyTorch backend sizes its pool (tensorrt_llm/_torch/pyexecutor/
resource_manager.py, KVCacheManager.calculate_max_num_blocks and
get_max_atten_window_upper_bound; read at NVIDIA/TensorRT-LLM main, 2026): max tokens =
free_gpu_memory_fraction (default 0.9, which must be < 1) x free memory / bytes per token, or
kv_cache_config.max_tokens, the smaller of the two when both are set; blocks = max tokens //
tokens_per_block; a pool without room for one sequence fails the load with
``AssertionError("Impossible to fit in any sequence in kvCache")``. Free memory is SIMULATED:
TRITONLLM_STANDIN_GPU_MEMORY_BYTES (default 8 GiB) minus this rank's share of the weights.

Blocks: a request holds ceil(tokens / tokens_per_block) blocks. With enable_block_reuse (the
real default), the full blocks of a finished request stay in the pool with their content (a hash
of the token prefix they end): a later prompt that starts with the same full blocks takes them
instead of new ones (reusedBlocks; the blocks it had to allocate for its prompt are
missedBlocks). Free blocks are taken never-used first, then least recently freed first (a
reusable block taken so loses its content).
"""

from __future__ import annotations

import collections
import math
from typing import Any

ENV_GPU_MEMORY = "TRITONLLM_STANDIN_GPU_MEMORY_BYTES"
DEFAULT_GPU_MEMORY = 8 << 30
DEFAULT_TOKENS_PER_BLOCK = 32
DEFAULT_FREE_FRACTION = 0.9


def pool_blocks(kv: dict[str, Any], free_bytes: int, bytes_per_token: int,
                max_beam_width: int = 1) -> tuple[int, int]:
    """(blocks, tokens per block) of the pool, or the real assertion when nothing fits."""
    per_block = int(kv.get("tokens_per_block") or DEFAULT_TOKENS_PER_BLOCK)
    fraction = kv.get("free_gpu_memory_fraction")
    fraction = DEFAULT_FREE_FRACTION if fraction is None else float(fraction)
    assert fraction < 1.0, (f"Invalid freeMemFraction, freeMemFraction {fraction} must be "
                            "smaller than 1.0")
    max_tokens = fraction * max(0, free_bytes) / bytes_per_token
    if kv.get("max_tokens") is not None:
        if kv.get("free_gpu_memory_fraction") is not None:
            max_tokens = min(int(kv["max_tokens"]), max_tokens)
        else:
            max_tokens = int(kv["max_tokens"])
    blocks = int(max_tokens // per_block)
    assert math.floor(blocks * per_block / (max_beam_width * per_block)) > 0, \
        "Impossible to fit in any sequence in kvCache"
    return blocks, per_block


class KvCache:
    def __init__(self, max_blocks: int, tokens_per_block: int, reuse: bool) -> None:
        self.max_blocks = max_blocks
        self.tokens_per_block = tokens_per_block
        self.reuse = reuse
        # Free blocks, least recently freed first (a block id -> None); blocks are numbered on
        # first use, so a huge pool costs nothing until used.
        self._free: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._never_used = max_blocks  # blocks not yet numbered, all free
        self._refs: dict[int, int] = {}
        self._by_key: dict[int, int] = {}
        self._key_of: dict[int, int] = {}
        self.alloc_total = self.alloc_new = self.reused = self.missed = 0

    @property
    def free_blocks(self) -> int:
        return len(self._free) + self._never_used

    @property
    def used_blocks(self) -> int:
        return self.max_blocks - self.free_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.tokens_per_block)

    def _keys(self, tokens: list[int]) -> list[int]:
        """The prefix hash ending each full block of `tokens`."""
        keys, key = [], 0
        n = self.tokens_per_block
        for end in range(n, len(tokens) + 1, n):
            key = hash((key, tuple(tokens[end - n:end])))
            keys.append(key)
        return keys

    def reusable(self, prompt: list[int]) -> list[int]:
        """The cached blocks a prompt would reuse (its leading full blocks found in the pool).
        The last prompt token is always computed, as the real cache does, so a prompt made only
        of full blocks reuses all but its last block."""
        if not self.reuse:
            return []
        found = []
        for key in self._keys(prompt[:-1]):
            block = self._by_key.get(key)
            if block is None:
                break
            found.append(block)
        return found

    def needed(self, prompt: list[int], total_tokens: int) -> int:
        """Free blocks a request would take: its total minus reused blocks held by others."""
        shared = sum(1 for b in self.reusable(prompt) if self._refs.get(b, 0) > 0)
        return self.blocks_for(total_tokens) - shared

    def _take_free(self) -> int:
        """A free block: one never used, else the least recently freed (its content, if
        reusable, is evicted)."""
        if self._never_used:
            block = self.max_blocks - self._never_used
            self._never_used -= 1
        elif self._free:
            block, _ = self._free.popitem(last=False)
            key = self._key_of.pop(block, None)
            if key is not None and self._by_key.get(key) == block:
                del self._by_key[key]
        else:
            raise RuntimeError("SIMULATED KV cache: no free block (the scheduler reserves them)")
        return block

    def allocate_prompt(self, prompt: list[int]) -> list[int]:
        blocks = []
        for block in self.reusable(prompt):
            if self._refs.get(block, 0) == 0:
                self._free.pop(block, None)
            self._refs[block] = self._refs.get(block, 0) + 1
            blocks.append(block)
        self.reused += len(blocks)
        fresh = self.blocks_for(len(prompt)) - len(blocks)
        self.missed += fresh
        for _ in range(fresh):
            blocks.append(self.allocate_one(count_total=False))
        self.alloc_total += len(blocks)
        return blocks

    def allocate_one(self, count_total: bool = True) -> int:
        block = self._take_free()
        self._refs[block] = 1
        self.alloc_new += 1
        if count_total:
            self.alloc_total += 1
        return block

    def release(self, blocks: list[int], tokens: list[int]) -> None:
        """Give a finished request's blocks back; with reuse its full blocks keep their content."""
        keys = self._keys(tokens) if self.reuse else []
        for i, block in enumerate(blocks):
            if i < len(keys) and keys[i] not in self._by_key:
                self._by_key[keys[i]] = block
                self._key_of[block] = keys[i]
            self._refs[block] -= 1
            if self._refs[block] == 0:
                del self._refs[block]
                self._free[block] = None

    def stats(self) -> dict[str, Any]:
        """KvCacheStats as the real iteration stats carry it."""
        looked_up = self.reused + self.missed
        return {"maxNumBlocks": self.max_blocks, "freeNumBlocks": self.free_blocks,
                "usedNumBlocks": self.used_blocks, "tokensPerBlock": self.tokens_per_block,
                "allocTotalBlocks": self.alloc_total, "allocNewBlocks": self.alloc_new,
                "reusedBlocks": self.reused, "missedBlocks": self.missed,
                "cacheHitRate": self.reused / looked_up if looked_up else 0.0}
