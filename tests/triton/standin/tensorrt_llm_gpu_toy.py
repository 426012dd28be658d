"""The arithmetic of the GPU stand-in's tensor-parallel toy (tensorrt_llm_gpu_standin.py): PyTorch
only, importable without Triton, so that the recipe (tests/gpu/check.py) computes the expected
answers with the very code the ranks run. Not a model: a 2-layer MLP over token embeddings with
weights in {-1, 0, 1} from a fixed seed, in float64, so that every sum is exact and the sharded,
all-reduced result equals the unsharded one bit for bit.
"""

from __future__ import annotations

import torch

VOCAB, HIDDEN, FFN = 4096, 256, 2048
SEED = 20261123


def full_weights() -> dict[str, torch.Tensor]:
    """The toy's weights, unsharded, on the CPU (the same on every rank: a fixed seed)."""
    gen = torch.Generator().manual_seed(SEED)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randint(-1, 2, shape, generator=gen).to(torch.float64)

    return {"embed": draw(VOCAB, HIDDEN), "w1": draw(HIDDEN, FFN), "w2": draw(FFN, HIDDEN),
            "out": draw(HIDDEN, VOCAB)}


def shard(weights: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s part: a column block of W1 and the matching row block of W2."""
    return {**weights, "w1": weights["w1"].tensor_split(world, dim=1)[rank],
            "w2": weights["w2"].tensor_split(world, dim=0)[rank]}


def partial(weights: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """One rank's share of the hidden state after the MLP, for a batch of last tokens."""
    hidden = weights["embed"][tokens % VOCAB]
    return torch.relu(hidden @ weights["w1"]) @ weights["w2"]


def pick(weights: dict[str, torch.Tensor], summed: torch.Tensor,
         candidates: list[torch.Tensor]) -> list[int]:
    """Next token per row: argmax of the logits over that request's candidate ids."""
    logits = summed @ weights["out"]
    return [int(ids[torch.argmax(row[ids % VOCAB])]) for row, ids in zip(logits, candidates,
                                                                         strict=True)]


def candidates_of(prompt: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.tensor(sorted(set(prompt)), dtype=torch.int64, device=device)


def reference_tokens(prompt: list[int], count: int, end_id: int | None = None) -> list[int]:
    """What the stand-in generates for `prompt`, computed unsharded on the CPU."""
    weights = full_weights()
    ids = candidates_of(prompt)
    out: list[int] = []
    last = int(prompt[-1])
    for _ in range(count):
        token = pick(weights, partial(weights, torch.tensor([last])), [ids])[0]
        if token == end_id:
            break
        out.append(token)
        last = token
    return out
