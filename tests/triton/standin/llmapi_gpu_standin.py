"""A SIMULATED TensorRT-LLM LLM API for the GPU recipe: `LLM`, `SamplingParams`, `RequestOutput`
over a real transformer computed with PyTorch on the GPUs (llmapi_gpu_model.py). NOT
TensorRT-LLM. Deployed behind Triton's llmapi model (the product's
tritonllm/triton/models/llmapi.py, unchanged) by tests/gpu/llmapi.py through the package shim
llmapi_gpu_shim/tensorrt_llm, so that `from tensorrt_llm import LLM, SamplingParams` resolves
here. Never used by CI.

The surface is the real one's (TensorRT-LLM 1.x, PyTorch backend), as the project's LLM-API
stand-in (images/triton-standin/fakes/tensorrt_llm) and its contract tables describe it;
SamplingParams and CompletionOutput are that stand-in's classes (SamplingParams' fields, defaults
and checks as read from NVIDIA/TensorRT-LLM `tensorrt_llm/sampling_params.py` at
000a01de66f0eab4ab05640711f0253f50f5209c), LLM()'s arguments those of the contract table:

- `LLM(**kwargs)` with model.yaml's keys; an unknown key raises a pydantic-style "Extra inputs are
  not permitted" ValueError, as 1.x's `TorchLlmArgs` (extra="forbid") does; config classes
  (`kv_cache_config`, `scheduler_config`) as dicts or objects. `dtype` "auto" takes the
  checkpoint's `torch_dtype`.
- `generate_async(prompt, sampling_params=None, streaming=False)` -> `RequestOutput` (iterable
  and async iterable: every step when streaming, else once; `result()`, `aresult()`, `abort()`,
  `finished`, `outputs[0]` a `CompletionOutput` with `text`, `token_ids`, `text_diff`,
  `token_ids_diff`, `cumulative_logprob`, `logprobs`, `finish_reason` (stop | length |
  cancelled), `stop_reason`), `generate(prompts, sampling_params)`, `get_stats(timeout)` /
  `get_stats_async(timeout)` (iteration statistics in the real JSON keys, only with
  `enable_iter_perf_stats=True`, as the PyTorch backend), `shutdown()`, `tokenizer`.
- `SamplingParams` is a keyword-only dataclass with the real fields, defaults (max_tokens 32,
  exclude_input_from_output True) and checks; an unknown keyword is a TypeError.

How it runs, as the real LLM does: LLM() (the "proxy", in the caller's process: Triton's Python
model stub) spawns one process per rank (`tensor_parallel_size`); rank r takes cuda:r, holds its
shard and joins a torch.distributed world over NCCL. Rank 0 is the executor: it receives the
requests over a local socket, schedules them in flight (a request joins at a step boundary,
prefilled alone, then decoded together with every running request, one token per step; it
leaves at its end or when aborted), samples (greedy by default: temperature/top_k/top_p/seed
honoured), and returns each step's tokens and log-probabilities; each step's plan goes to the
other ranks over a CPU (gloo) group first, as the real executor's leader drives its workers
over MPI. Each rank prints `tritonllm-standin rank=.. local_rank=.. device=.. uuid=..` once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import AsyncIterator, Iterator, Sequence
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

__version__ = "1.2.1+standin.gpu"  # SIMULATED; the version whose surface it mirrors

HERE = Path(__file__).resolve().parent
READY_SECONDS = 900.0
SHUTDOWN_SECONDS = 15.0

# --- the public surface ------------------------------------------------------------------------


# SamplingParams and CompletionOutput are the CPU stand-in's SIMULATED classes
# (images/triton-standin/fakes/tensorrt_llm: sampling_params.py, executor/result.py), which need
# only the standard library: beside this module as SIMULATED when deployed (tests/gpu/llmapi.py
# copies the parts used there), else the repository's. They are imported as modules of a private
# package, so that their relative imports resolve and the package's __init__ (which reads the
# installed TensorRT-LLM version) does not run.
SIMULATED = "llmapi_cpu_standin"
_SIMULATED_PACKAGE = "_llmapi_cpu_standin_tensorrt_llm"


def simulated_root(where: Path = HERE) -> Path:
    for path in (where / SIMULATED, where.parent.parent.parent / "images" / "triton-standin"
                 / "fakes" / "tensorrt_llm"):
        if (path / "sampling_params.py").exists():
            return path
    raise FileNotFoundError(f"no simulated tensorrt_llm beside {where} nor in the repository")


def _simulated(module: str) -> types.ModuleType:
    if _SIMULATED_PACKAGE not in sys.modules:
        package = types.ModuleType(_SIMULATED_PACKAGE)
        package.__path__ = [str(simulated_root())]
        sys.modules[_SIMULATED_PACKAGE] = package
    return importlib.import_module(f"{_SIMULATED_PACKAGE}.{module}")


# Its logprobs here are floats, one per generated token (a form the PyTorch backend returns too).
CompletionOutput = _simulated("executor.result").CompletionOutput


class SamplingParams(_simulated("sampling_params").SamplingParams):
    """The real SamplingParams (the CPU stand-in's: fields, defaults, checks; an unknown keyword
    is a TypeError), and what this executor needs of it."""

    __slots__ = ()

    def wire(self, eos: int | None) -> dict[str, Any]:
        """What the executor needs of it."""
        # Greedy unless asked to sample (the PyTorch backend's default without sampling knobs).
        greedy = self.top_k == 1 or self.temperature == 0 or (
            self.temperature is None and self.top_k is None and self.top_p is None)
        end = self.end_id if self.end_id is not None else eos
        return {"max_tokens": int(self.max_tokens), "greedy": greedy,
                "temperature": float(self.temperature or 1.0), "top_k": int(self.top_k or 0),
                "top_p": float(self.top_p or 1.0), "seed": self.seed,
                "end_id": None if self.ignore_eos else end,
                "stop_token_ids": list(self.stop_token_ids or ())}


@dataclasses.dataclass
class KvCacheConfig:
    free_gpu_memory_fraction: float | None = 0.9
    enable_block_reuse: bool = True
    max_tokens: int | None = None
    max_attention_window: list[int] | None = None
    sink_token_length: int | None = None
    host_cache_size: int | None = None
    onboard_blocks: bool = True
    cross_kv_cache_fraction: float | None = None
    secondary_offload_min_priority: int | None = None
    event_buffer_max_size: int = 0
    enable_partial_reuse: bool = True
    copy_on_partial_reuse: bool = True
    use_uvm: bool = False
    dtype: str = "auto"
    tokens_per_block: int = 32


@dataclasses.dataclass
class SchedulerConfig:
    capacity_scheduler_policy: str = "GUARANTEED_NO_EVICT"
    context_chunking_policy: str | None = None
    dynamic_batch_config: Any = None


# LLM()'s arguments and its config classes' fields come from the contract table of a
# TensorRT-LLM version (tests/contract/tables/llm_args-<version>.json, read from the real
# llm_args.py): beside this module as ARGS_TABLE when deployed (tests/gpu/llmapi.py copies the
# CR's version), else the repository's table of TABLE_VERSION.
ARGS_TABLE = "llmapi_gpu_llm_args.json"
TABLE_VERSION = "1.2.1"
CONFIGS = {"kv_cache_config": KvCacheConfig, "scheduler_config": SchedulerConfig}


def args_table(where: Path = HERE) -> dict[str, Any]:
    for path in (where / ARGS_TABLE,
                 where.parent.parent / "contract" / "tables" / f"llm_args-{TABLE_VERSION}.json"):
        if path.exists():
            return dict(json.loads(path.read_text()))
    raise FileNotFoundError(f"no LLM argument table beside {where} nor in the repository")


def _names(fields: list[Any]) -> set[str]:
    return {f["name"] if isinstance(f, dict) else str(f) for f in fields}


def check_llm_args(kwargs: dict[str, Any], table: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """kwargs with config dicts made objects. As 1.x's LLM(): a keyword that is no argument is a
    ValueError "LLM got invalid argument: <key>"; an unknown key inside a config dict is
    pydantic's "Extra inputs are not permitted" (a ValueError too)."""
    table = table or args_table()
    classes = table["classes"]
    valid = _names(classes.get("LLM") or classes["TorchLlmArgs"])
    for key in kwargs:
        if key not in valid:
            raise ValueError(f"LLM got invalid argument: {key}")
    if "model" not in kwargs:
        raise ValueError("1 validation error for TorchLlmArgs\nmodel\n  Field required")
    out = dict(kwargs)
    for key, cls in CONFIGS.items():
        value = out.get(key)
        if isinstance(value, dict):
            fields = _names(classes.get(table["nested"][key], []))
            extra = sorted(set(value) - fields)
            if extra:
                lines = [f"{k}\n  Extra inputs are not permitted [type=extra_forbidden]"
                         for k in extra]
                raise ValueError(f"{len(extra)} validation error(s) for {cls.__name__}\n"
                                 + "\n".join(lines))
            known = {f.name for f in dataclasses.fields(cls)}
            out[key] = cls(**{k: v for k, v in value.items() if k in known})
        elif value is None:
            out[key] = cls()
    return out


def fits(free_bytes: int, fraction: float, slot_bytes: int, wanted: int) -> int:
    """KV slots (one sequence of max_seq_len each) that `fraction` of the free memory holds,
    at most `wanted`."""
    return max(0, min(wanted, int(free_bytes * fraction) // max(slot_bytes, 1)))


def groups(prompts: list[tuple[int, list[int]]], max_tokens: int
           ) -> list[list[tuple[int, list[int]]]]:
    """New prompts in admission order, grouped so that a group padded to its longest prompt
    holds at most max_tokens tokens (a longer prompt alone)."""
    out: list[list[tuple[int, list[int]]]] = []
    for prompt in prompts:
        group = out[-1] if out else None
        if group and (len(group) + 1) * max(len(p[1]) for p in [*group, prompt]) <= max_tokens:
            group.append(prompt)
        else:
            out.append([prompt])
    return out


def finish_reason(params: dict[str, Any], token: int, generated: int, length: int,
                  max_len: int) -> str | None:
    """Why a request ends after choosing `token` as its `generated`-th token, its sequence now
    `length` positions long: "stop" (the end id or a stop token id), "length" (max_tokens, or
    max_seq_len reached), else None."""
    if token == params["end_id"] or token in params["stop_token_ids"]:
        return "stop"
    if generated >= params["max_tokens"] or length >= max_len:
        return "length"
    return None


def graph_batch(args: dict[str, Any]) -> int:
    """The largest decode batch replayed from a CUDA graph: cuda_graph_config on by default
    (max_batch_size 128 unless it says otherwise), off when given as null."""
    if "cuda_graph_config" in args and args["cuda_graph_config"] is None:
        return 0
    config = args.get("cuda_graph_config") or {}
    wanted = config.get("max_batch_size") if isinstance(config, dict) else None
    return int(wanted or 128)


class RequestOutput:
    """One request's result, updated as the executor's steps arrive (real: GenerationResult)."""

    def __init__(self, llm: LLM, request_id: int, prompt: str | None, prompt_ids: list[int],
                 params: SamplingParams, streaming: bool) -> None:
        self._llm, self.request_id, self.prompt = llm, request_id, prompt
        self.prompt_token_ids = prompt_ids
        self.sampling_params, self.streaming = params, streaming
        self.outputs = [CompletionOutput(0)]
        self.finished = False
        self._updates: collections.deque[dict[str, Any]] = collections.deque()
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._stops = ([params.stop] if isinstance(params.stop, str) else list(params.stop or ()))

    # -- fed by the proxy's receiver thread
    def _push(self, update: dict[str, Any]) -> None:
        with self._cond:
            self._updates.append(update)
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # its loop closed
                loop.call_soon_threadsafe(_wake, future)

    def _apply(self, update: dict[str, Any]) -> None:
        out = self.outputs[0]
        out._last_text_len, out._last_token_ids_len = len(out.text), len(out.token_ids)
        out._last_logprobs_len = len(out.logprobs)
        out.token_ids.extend(update["tokens"])
        out.logprobs.extend(update["logprobs"])
        out.cumulative_logprob = sum(out.logprobs) if out.logprobs else None
        text = self._llm._decode(out.token_ids, self.sampling_params)
        for stop in self._stops:  # a stop string ends the request; it is not returned
            at = text.find(stop)
            if at >= 0:
                keep = at + len(stop) if self.sampling_params.include_stop_str_in_output else at
                text = text[:keep]
                update = {**update, "finished": True, "reason": "stop", "stop_reason": stop}
                self._llm._abort(self.request_id)
                break
        out.text = text
        if update["finished"]:
            out.finish_reason = update["reason"]
            out.stop_reason = update.get("stop_reason")
            self.finished = True
            self._llm._forget(self.request_id)

    def _next(self, timeout: float | None) -> bool:
        """Apply updates until one a caller should see (each, when streaming; the last
        otherwise); False when nothing is left."""
        while not self.finished or self._updates:
            with self._cond:
                if not self._updates and not self._cond.wait_for(lambda: self._updates, timeout):
                    raise TimeoutError(f"request {self.request_id}: no result in {timeout}s")
                update = self._updates.popleft()
            self._apply(update)
            if self.streaming or self.finished:
                return True
        return False

    async def _anext(self) -> bool:
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._updates or self.finished:
                    break
                future: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, future))
            await future
        return self._next(None)

    # -- the caller's
    def __iter__(self) -> Iterator[RequestOutput]:
        while not self.finished and self._next(None):
            yield self

    def __aiter__(self) -> AsyncIterator[RequestOutput]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[RequestOutput]:
        while not self.finished and await self._anext():
            yield self

    def result(self, timeout: float | None = None) -> RequestOutput:
        while not self.finished:
            self._next(timeout)
        return self

    async def aresult(self) -> RequestOutput:
        while not self.finished:
            await self._anext()
        return self

    def abort(self) -> None:
        self._llm._abort(self.request_id)

    @property
    def text(self) -> str:
        return self.outputs[0].text


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class LLM:
    """SIMULATED tensorrt_llm.LLM (PyTorch backend): the proxy; the ranks are processes."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        args = check_llm_args({"model": model, **kwargs})
        self.args = args
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(args.get("tokenizer") or model))
        self._requests: dict[int, RequestOutput] = {}
        self._ids = iter(range(1, 1 << 62))
        self._lock = threading.Lock()
        self._stats: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=int(args.get("iter_stats_max_iterations") or 1000))
        self._stats_cond = threading.Condition()
        self._stats_on = bool(args.get("enable_iter_perf_stats"))
        self._closed = False
        self._procs, self._conn = self._spawn(args)
        self._receiver = threading.Thread(target=self._receive, daemon=True,
                                          name="llm-standin-receiver")
        self._receiver.start()

    # -- start and stop
    def _spawn(self, args: dict[str, Any]) -> tuple[list[subprocess.Popen[bytes]], Connection]:
        world = int(args.get("tensor_parallel_size") or 1) * int(
            args.get("pipeline_parallel_size") or 1)
        if int(args.get("pipeline_parallel_size") or 1) != 1:
            raise ValueError("the GPU stand-in implements tensor parallelism only")
        authkey = os.urandom(16)
        listener = Listener(("127.0.0.1", 0), authkey=authkey)
        with socket.socket() as s:  # torch.distributed's rendezvous
            s.bind(("127.0.0.1", 0))
            rendezvous = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        kv = args["kv_cache_config"]
        spec = {
            "model": str(args["model"]), "world": world, "rendezvous": rendezvous,
            "executor": listener.address, "dtype": str(args.get("dtype") or "auto"),
            "max_batch_size": int(args.get("max_batch_size") or 2048),
            "max_seq_len": int(args.get("max_seq_len") or 0),
            "max_num_tokens": int(args.get("max_num_tokens") or 8192),
            "kv_fraction": kv.free_gpu_memory_fraction or 0.9,
            "tokens_per_block": kv.tokens_per_block, "stats": self._stats_on,
            "cuda_graph_batch": graph_batch(args),
        }
        python = shutil.which("python3", path=os.environ.get("PATH")) or sys.executable
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(HERE), os.environ.get("PYTHONPATH", "")]), "PYTHONUNBUFFERED": "1"}
        procs = []
        for rank in range(world):
            procs.append(subprocess.Popen(
                [python, str(HERE / "llmapi_gpu_standin.py"), "--rank", str(rank),
                 "--spec", json.dumps(spec), "--authkey", authkey.hex()], env=env))
        conn, self.executor_info = self._accept(listener, procs)
        return procs, conn

    @staticmethod
    def _accept(listener: Listener, procs: list[subprocess.Popen[bytes]]
                ) -> tuple[Connection, dict[str, Any]]:
        """Rank 0's connection, once every rank has its weights and KV cache (its "ready")."""
        result: list[Connection] = []
        thread = threading.Thread(target=lambda: result.append(listener.accept()), daemon=True)
        thread.start()
        deadline = time.monotonic() + READY_SECONDS
        while thread.is_alive():
            dead = [(r, p.returncode) for r, p in enumerate(procs) if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                listener.close()
                raise RuntimeError(f"LLM stand-in: ranks did not start: exited {dead}")
            thread.join(0.2)
        conn = result[0]
        hello = conn.recv()
        listener.close()
        if hello.get("error"):
            raise RuntimeError(f"LLM stand-in: {hello['error']}")
        print(f"tritonllm-standin-executor {json.dumps(hello)}", file=sys.stderr, flush=True)
        return conn, hello

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock, contextlib.suppress(OSError):
            self._conn.send(("shutdown",))
        deadline = time.monotonic() + SHUTDOWN_SECONDS  # within Triton's exit timeout
        for p in self._procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        with contextlib.suppress(OSError):
            self._conn.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # -- requests
    def generate_async(self, inputs: str | list[int], sampling_params: SamplingParams | None = None,
                       streaming: bool = False, **_: Any) -> RequestOutput:
        if self._closed:
            raise RuntimeError("LLM is shut down")
        params = sampling_params or SamplingParams()
        if isinstance(inputs, str):
            ids = list(self.tokenizer.encode(inputs, add_special_tokens=params.add_special_tokens))
            prompt: str | None = inputs
        else:
            ids, prompt = list(inputs), None
        limit = int(self.args.get("max_seq_len") or 0)
        if limit and len(ids) + 1 > limit:
            raise ValueError(f"The sum of prompt length ({len(ids)}) and max_tokens should not "
                             f"exceed max_seq_len ({limit})")
        with self._lock:
            request_id = next(self._ids)
            result = RequestOutput(self, request_id, prompt, ids, params, streaming)
            self._requests[request_id] = result
            self._conn.send(("submit", request_id, ids, params.wire(self.tokenizer.eos_token_id)))
        return result

    def generate(self, inputs: str | list[int] | Sequence[str],
                 sampling_params: SamplingParams | None = None, **_: Any
                 ) -> RequestOutput | list[RequestOutput]:
        if isinstance(inputs, list | tuple) and inputs and not isinstance(inputs[0], int):
            pending = [self.generate_async(i, sampling_params) for i in inputs]
            return [r.result() for r in pending]
        return self.generate_async(inputs, sampling_params).result()  # type: ignore[arg-type]

    def _abort(self, request_id: int) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._conn.send(("abort", request_id))

    def _forget(self, request_id: int) -> None:
        with self._lock:
            self._requests.pop(request_id, None)

    def _decode(self, ids: list[int], params: SamplingParams) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens))

    def _receive(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "step":
                for request_id, update in message[1].items():
                    result = self._requests.get(request_id)
                    if result is not None:
                        result._push(update)
                if message[2]:
                    with self._stats_cond:
                        self._stats.extend(message[2])
                        self._stats_cond.notify_all()
        for result in list(self._requests.values()):  # the executor is gone
            result._push({"tokens": [], "logprobs": [], "finished": True, "reason": "cancelled"})

    # -- statistics
    def get_stats(self, timeout: float = 2) -> list[dict[str, Any]]:
        """Iteration statistics since the last call (PyTorch backend: with
        enable_iter_perf_stats only)."""
        if not self._stats_on:
            return []
        with self._stats_cond:
            self._stats_cond.wait_for(lambda: self._stats, timeout)
            out = list(self._stats)
            self._stats.clear()
        return out

    def get_stats_async(self, timeout: float = 2) -> AsyncIterator[dict[str, Any]]:
        async def stats() -> AsyncIterator[dict[str, Any]]:
            for item in await asyncio.to_thread(self.get_stats, timeout):
                yield item
        return stats()


# --- the ranks (separate processes; torch imported here only) ----------------------------------


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--authkey", required=True)
    a = ap.parse_args()
    import faulthandler

    faulthandler.enable(all_threads=True)
    from llmapi_gpu_executor import run_rank

    run_rank(a.rank, json.loads(a.spec), bytes.fromhex(a.authkey), Client)


if __name__ == "__main__":
    main()
