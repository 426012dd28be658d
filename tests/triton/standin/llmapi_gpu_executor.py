"""The rank processes of the SIMULATED LLM API (llmapi_gpu_standin.py): NOT TensorRT-LLM.

Every rank: cuda:<rank> (the real LLM's workers take device rank % gpus_per_node), its shard of
the Llama (llmapi_gpu_model.ShardedLlama), torch.distributed over NCCL for the all-reduces and a
gloo group for the step plans. Rank 0 is the executor: it connects to the proxy (LLM() in the
Python model's process), schedules the requests in flight and samples; the other ranks run each
step plan rank 0 broadcasts. KV capacity: as many request slots as `kv_cache_config.
free_gpu_memory_fraction` of the free memory holds after the weights (at most max_batch_size);
a request waits in the queue for a slot. The iteration statistics use the real
IterationStats JSON keys; KV blocks are counted in `tokens_per_block` units of the slots' used
positions (the slots are contiguous here, not paged).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import math
import os
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from llmapi_gpu_model import DTYPES, ShardedLlama, read_config
from llmapi_gpu_standin import finish_reason, fits, groups

STOP = "stop"


@dataclasses.dataclass
class Request:
    request_id: int
    prompt: list[int]
    params: dict[str, Any]
    slot: int = -1
    generated: int = 0
    last: int = -1
    generator: torch.Generator | None = None

    @property
    def length(self) -> int:  # positions in the KV cache
        return len(self.prompt) + self.generated


def describe(rank: int, device: torch.device) -> str:
    """The placement line the GPU recipe checks."""
    uuid = name = "-"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name = props.name.replace(" ", "_")
        raw = str(getattr(props, "uuid", "") or "-")
        uuid = raw if raw == "-" or raw.startswith("GPU-") else f"GPU-{raw}"
    return (f"tritonllm-standin rank={rank} local_rank={rank} world={dist.get_world_size()} "
            f"device={device} pid={os.getpid()} uuid={uuid} name={name} "
            f"cuda_visible_devices={os.environ.get('CUDA_VISIBLE_DEVICES', '-')} kind=llmapi")


def load(rank: int, spec: dict[str, Any]) -> tuple[ShardedLlama, Any]:
    world = int(spec["world"])
    device = torch.device("cuda", rank % max(torch.cuda.device_count(), 1))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=spec["rendezvous"], rank=rank, world_size=world,
                            device_id=device, timeout=datetime.timedelta(minutes=30))
    control = dist.new_group(backend="gloo", timeout=datetime.timedelta(days=1))
    config = read_config(spec["model"])
    dtype_name = spec["dtype"] if spec["dtype"] != "auto" else config.get("torch_dtype",
                                                                           "bfloat16")
    dtype = DTYPES[str(dtype_name)]

    def all_reduce(t: torch.Tensor) -> None:
        if world > 1:
            dist.all_reduce(t)

    model = ShardedLlama(config, rank, world, device, dtype, all_reduce)
    print(describe(rank, device), file=sys.stderr, flush=True)
    return model, control


def allocate(model: ShardedLlama, spec: dict[str, Any], control: Any) -> None:
    """KV slots: the same number on every rank (the smallest that fits)."""
    max_len = int(spec["max_seq_len"] or model.config["max_position_embeddings"])
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info()
    slots = fits(free, float(spec["kv_fraction"]), model.slot_bytes(max_len),
                 int(spec["max_batch_size"]))
    agreed = torch.tensor([slots])
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=control)
    if int(agreed) < 1:
        raise RuntimeError(
            f"the KV cache does not fit: {spec['kv_fraction']} of {free / 2**30:.1f} GiB free "
            f"holds no sequence of max_seq_len {max_len}")
    model.allocate(int(agreed), max_len)
    graphs = int(spec.get("cuda_graph_batch") or 0)
    if graphs:
        try:
            model.enable_graphs(min(graphs, model.slots))
        except Exception as exc:  # every rank then runs eagerly
            print(f"tritonllm-standin rank={model.rank} CUDA graphs off: {exc}", file=sys.stderr,
                  flush=True)
            model.graph_batch = 0
        ok = torch.tensor([1 if model.graph_batch else 0])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=control)
        if not int(ok):
            model.graph_batch = 0


def watch_parent() -> None:
    """End this rank when the process that spawned it (the LLM's) is gone, as MPI ends a
    session's workers: a rank must not outlive a crashed server holding its GPU."""
    parent = os.getppid()

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        print(f"tritonllm-standin pid={os.getpid()} parent {parent} gone: exiting",
              file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=loop, daemon=True, name="watch-parent").start()


def run_rank(rank: int, spec: dict[str, Any], authkey: bytes, client: Any) -> None:
    watch_parent()
    conn = None
    try:
        model, control = load(rank, spec)
        allocate(model, spec, control)
        dist.barrier(group=control)
    except Exception as exc:
        if rank == 0:
            conn = client(tuple(spec["executor"]), authkey=authkey)
            conn.send({"error": f"{type(exc).__name__}: {exc}"})
        raise
    if rank == 0:
        conn = client(tuple(spec["executor"]), authkey=authkey)
        conn.send({"ready": True, "slots": model.slots, "max_len": model.max_len,
                   "graph_batch": model.graph_batch})
        Executor(model, control, conn, spec).loop()
    else:
        follow(model, control)
    dist.barrier(group=control)
    # Exit at once, without destroy_process_group: rank 0 hosts the rendezvous store, and a
    # rank still tearing down its NCCL group after rank 0 left waits on that store.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_plan(model: ShardedLlama, plan: dict[str, Any]) -> dict[str, Any]:
    """Execute one step on this rank: the new prompts (in groups of at most max_num_tokens
    padded tokens), then one decode of the running requests. Rank 0 gets the logits:
    {"prefill": [[N, vocab]...], "decode": [B, vocab] or None}."""
    out: dict[str, Any] = {"prefill": [], "decode": None}
    for group in plan["prefill"]:
        out["prefill"].append(model.prefill(group))
    if plan["decode"]:
        slots, tokens, positions = (list(col) for col in zip(*plan["decode"], strict=True))
        out["decode"] = model.decode(tokens, slots, positions)
    return out


def follow(model: ShardedLlama, control: Any) -> None:
    """Ranks >= 1: run every plan rank 0 broadcasts, until it says stop."""
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=control)
        if box[0] == STOP:
            return
        run_plan(model, box[0])


class Executor:
    """Rank 0: in-flight batching over the KV slots, sampling, answers and statistics."""

    def __init__(self, model: ShardedLlama, control: Any, conn: Any, spec: dict[str, Any]
                 ) -> None:
        self.model, self.control, self.conn, self.spec = model, control, conn, spec
        self.queue: collections.deque[Request] = collections.deque()
        self.running: dict[int, Request] = {}
        self.free = list(range(model.slots))
        self.iter = 0
        self.stop = False
        self.tokens_per_block = int(spec["tokens_per_block"])
        self.blocks_per_slot = math.ceil(model.max_len / self.tokens_per_block)
        self.alloc_total = self.alloc_new = 0
        self.max_batch = min(int(spec["max_batch_size"]), model.slots)
        self.max_tokens = int(spec.get("max_num_tokens") or 8192)
        self.step_ms: collections.defaultdict[tuple[str, int], list[float]] = \
            collections.defaultdict(list)

    def receive(self, block: bool) -> None:
        while True:
            try:
                if not self.conn.poll(None if block else 0):
                    return
                message = self.conn.recv()
            except (EOFError, OSError):  # the LLM (proxy) is gone: stop every rank
                self.stop = True
                return
            block = False
            if message[0] == "submit":
                _, request_id, prompt, params = message
                self.queue.append(Request(request_id, prompt, params))
            elif message[0] == "abort":
                self.cancel(message[1])
            elif message[0] == "shutdown":
                self.stop = True
                return

    def send(self, message: Any) -> None:
        try:
            self.conn.send(message)
        except OSError:  # the LLM (proxy) is gone
            self.stop = True

    def cancel(self, request_id: int) -> None:
        updates = {}
        for req in [r for r in self.queue if r.request_id == request_id]:
            self.queue.remove(req)
            updates[request_id] = self.update(req, [], [], "cancelled")
        req = self.running.pop(request_id, None)
        if req is not None:
            self.free.append(req.slot)
            updates[request_id] = self.update(req, [], [], "cancelled")
        if updates:
            self.send(("step", updates, []))

    @staticmethod
    def update(req: Request, tokens: list[int], logprobs: list[float], reason: str | None
               ) -> dict[str, Any]:
        return {"tokens": tokens, "logprobs": logprobs, "finished": reason is not None,
                "reason": reason}

    def loop(self) -> None:
        while not self.stop:
            self.receive(block=not self.queue and not self.running)
            if self.stop:
                break
            if self.queue or self.running:
                self.step()
        dist.broadcast_object_list([STOP], src=0, group=self.control)
        print(f"tritonllm-standin-steps {json.dumps(self.step_summary())}", file=sys.stderr,
              flush=True)

    def step_summary(self) -> dict[str, dict[int, list[float]]]:
        """Per kind of step (decode only, or with prompts) and batch size: [steps, p50 ms,
        mean ms] of the executor's own iteration time."""
        out: dict[str, dict[int, list[float]]] = {}
        for (kind, batch), times in sorted(self.step_ms.items()):
            ordered = sorted(times)
            out.setdefault(kind, {})[batch] = [len(times), round(ordered[len(times) // 2], 2),
                                               round(sum(times) / len(times), 2)]
        return out

    def admit(self) -> list[Request]:
        new = []
        while self.queue and self.free and len(self.running) + len(new) < self.max_batch:
            req = self.queue.popleft()
            if len(req.prompt) + 1 > self.model.max_len:
                self.send(("step", {req.request_id: self.update(req, [], [], "length")},
                                []))
                continue
            req.slot = self.free.pop(0)
            if not req.params["greedy"] and req.params["seed"] is not None:
                req.generator = torch.Generator(device=self.model.device)
                req.generator.manual_seed(int(req.params["seed"]))
            new.append(req)
        return new

    def step(self) -> None:
        started = time.perf_counter()
        new = self.admit()
        decoding = list(self.running.values())
        plan = {"prefill": groups([(r.slot, r.prompt) for r in new], self.max_tokens),
                "decode": [(r.slot, r.last, r.length - 1) for r in decoding]}
        dist.broadcast_object_list([plan], src=0, group=self.control)
        logits = run_plan(self.model, plan)
        rows = [*logits["prefill"]]
        if logits["decode"] is not None:
            rows.append(logits["decode"])
        batch = [*new, *decoding]
        chosen, logprobs = self.sample(batch, torch.cat(rows)) if batch else ([], [])
        updates = {}
        for req, token, logprob in zip(batch, chosen, logprobs, strict=True):
            updates[req.request_id] = self.advance(req, token, logprob)
        self.iter += 1
        kind = "prefill+decode" if new else "decode"
        self.step_ms[(kind, len(batch))].append((time.perf_counter() - started) * 1000)
        stats = [self.stats(started, new, decoding)] if self.spec["stats"] else []
        self.send(("step", updates, stats))

    def advance(self, req: Request, token: int, logprob: float) -> dict[str, Any]:
        p = req.params
        req.generated += 1
        req.last = token
        self.running[req.request_id] = req
        reason = finish_reason(p, token, req.generated, req.length, self.model.max_len)
        if reason is not None:
            self.running.pop(req.request_id)
            self.free.append(req.slot)
        if token == p["end_id"]:  # the end token is not part of the output
            return self.update(req, [], [], reason)
        return self.update(req, [token], [logprob], reason)

    def sample(self, batch: list[Request], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = torch.argmax(logits, dim=-1)
        for i, req in enumerate(batch):
            p = req.params
            if p["greedy"]:
                continue
            row = logits[i] / max(p["temperature"], 1e-5)
            if p["top_k"] > 0:
                kth = torch.topk(row, min(p["top_k"], row.numel())).values[-1]
                row = row.masked_fill(row < kth, float("-inf"))
            probs = torch.softmax(row, dim=-1)
            if p["top_p"] < 1.0:
                sorted_p, order = torch.sort(probs, descending=True)
                cut = torch.cumsum(sorted_p, 0) - sorted_p > p["top_p"]
                probs[order[cut]] = 0
                probs = probs / probs.sum()
            tokens[i] = torch.multinomial(probs, 1, generator=req.generator)[0]
        chosen = tokens.tolist()
        picked = logp.gather(1, tokens[:, None])[:, 0].tolist()
        return chosen, picked

    def stats(self, started: float, new: list[Request], decoding: list[Request]
              ) -> dict[str, Any]:
        tpb = self.tokens_per_block
        used = sum(math.ceil(r.length / tpb) for r in self.running.values())
        total = self.model.slots * self.blocks_per_slot
        new_blocks = sum(math.ceil(len(r.prompt) / tpb) for r in new)
        self.alloc_new += new_blocks
        self.alloc_total += new_blocks
        return {
            "iter": self.iter,
            "iterLatencyMS": (time.perf_counter() - started) * 1000,
            "newActiveRequestsQueueLatencyMS": 0.0,
            "numNewActiveRequests": len(new),
            "numActiveRequests": len(self.running),
            "numQueuedRequests": len(self.queue),
            "numCompletedRequests": len(new) + len(decoding) - len(self.running),
            "maxNumActiveRequests": self.max_batch,
            "maxBatchSizeStatic": self.max_batch,
            "maxNumTokensRuntime": 0,
            "gpuMemUsage": int(torch.cuda.memory_allocated(self.model.device)),
            "cpuMemUsage": 0,
            "pinnedMemUsage": 0,
            "timestamp": time.strftime("%m-%d-%Y %H:%M:%S"),
            "kvCacheStats": {
                "maxNumBlocks": total, "freeNumBlocks": total - used, "usedNumBlocks": used,
                "tokensPerBlock": tpb, "allocTotalBlocks": self.alloc_total,
                "allocNewBlocks": self.alloc_new, "reusedBlocks": 0,
                "missedBlocks": self.alloc_new, "cacheHitRate": 0.0,
            },
            "inflightBatchingStats": {
                "numScheduledRequests": len(new) + len(decoding),
                "numContextRequests": len(new), "numGenRequests": len(decoding),
                "numPausedRequests": 0, "numCtxTokens": sum(len(r.prompt) for r in new),
                "microBatchId": 0, "avgNumDecodedTokensPerIter": 1.0 if decoding else 0.0,
            },
        }
