"""SIMULATED `tensorrt_llm.LLM` (PyTorch backend, TensorRT-LLM 1.x): the real surface, on CPU.

The public surface follows NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm.py (BaseLLM/_TorchLLM;
read at commit 00966934 and later stored versions): ``LLM(model, tokenizer=None, ...,
tensor_parallel_size=1, **kwargs)`` with the keys of the arguments class (checked against the
contract table of the package's version, llm_args.py), ``generate``, ``generate_async``,
``get_stats``/``get_stats_async`` (iteration statistics as dicts with the real IterationStats
JSON keys; only with ``enable_iter_perf_stats=True``, as the PyTorch backend; the newest
``iter_stats_max_iterations`` are kept, default 1000), ``shutdown`` and the context manager.

What happens at load, in the real order:
  1. the arguments are checked (unknown key -> ValueError "LLM got invalid argument: <key>");
  2. world = tensor_parallel_size x pipeline_parallel_size; with world > 1 the ranks start
     (_standin/ranks.py): under trtllm-llmapi-launch (TLLM_SPAWN_PROXY_PROCESS=1) the LLM
     attaches to the leader node, whose MPI world (tllm_mpi_size) must equal world; otherwise it
     needs world simulated GPUs ("Only N GPUs are available, but W are required.", GPUs counted
     as the image's nvidia-smi counts them: TRITONLLM_STANDIN_GPUS, else NVIDIA_VISIBLE_DEVICES'
     entries, else 8) and spawns world - 1 worker processes that connect back to it;
  3. the checkpoint's config.json is read (the SIMULATED fault "crash-at-load" fails here);
  4. the KV cache pool is sized from simulated GPU memory (_standin/kv_cache.py); no room fails
     with the real AssertionError "Impossible to fit in any sequence in kvCache";
  5. the tokenizer is loaded with transformers AutoTokenizer from `tokenizer` or `model`.

Limits and their real defaults: max_batch_size 2048, max_num_tokens 8192, max_seq_len from the
checkpoint. TRITONLLM_STANDIN_TOKEN_DELAY (seconds per step, default 0) is the simulated compute.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._standin import ranks
from .._standin.engine import Engine, Limits, Request
from .._standin.kv_cache import DEFAULT_GPU_MEMORY, ENV_GPU_MEMORY, KvCache, pool_blocks
from .._standin.model import (
    FAULT_CRASH_AT_LOAD,
    FAULT_WRONG_ANSWER,
    load_tokenizer,
    read_checkpoint,
)
from ..executor.executor import GenerationExecutor
from ..executor.result import IterationResult, RequestOutput
from ..sampling_params import SamplingParams
from .llm_args import check_llm_kwargs

ENV_TOKEN_DELAY = "TRITONLLM_STANDIN_TOKEN_DELAY"
ENV_GPUS = "TRITONLLM_STANDIN_GPUS"
ENV_PYTHON = "TRITONLLM_STANDIN_PYTHON"
DEFAULT_MAX_BATCH_SIZE = 2048
DEFAULT_MAX_NUM_TOKENS = 8192
DEFAULT_STATS_MAX = 1000
_ids = itertools.count(1)


def simulated_gpus() -> int:
    if os.environ.get(ENV_GPUS):
        return int(os.environ[ENV_GPUS])
    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if visible and visible not in ("all", "none", "void"):
        return len([d for d in visible.split(",") if d.strip()])
    return 8


def _python() -> str:
    """An interpreter for worker ranks (inside Triton's Python backend sys.executable is the
    stub, not python)."""
    if os.environ.get(ENV_PYTHON):
        return os.environ[ENV_PYTHON]
    if "python" in os.path.basename(sys.executable or ""):
        return sys.executable
    return shutil.which("python3") or "python3"


class _Ranks:
    """The other ranks of this LLM: spawned here, or those of trtllm-llmapi-launch."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.procs: list[subprocess.Popen[bytes]] = []
        self.hub: Any = None
        if world == 1:
            return
        timeout = float(os.environ.get(ranks.ENV_WORKER_TIMEOUT) or 300)
        if os.environ.get("TLLM_SPAWN_PROXY_PROCESS") == "1":
            mpi = int(os.environ.get("tllm_mpi_size") or 1)  # noqa: SIM112 (the launch script's name)
            if mpi != world:
                raise RuntimeError(f"SIMULATED TensorRT-LLM: the LLM needs {world} ranks "
                                   f"(tp x pp), trtllm-llmapi-launch runs {mpi}")
            self.hub = ranks.RemoteHub(os.environ["TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR"], world,
                                       timeout)
            return
        gpus = simulated_gpus()
        if gpus < world:
            raise RuntimeError(f"Only {gpus} GPUs are available, but {world} are required.")
        port = int(os.environ.get(ranks.ENV_LEADER_PORT) or 0)
        self.hub = ranks.Hub(world, "127.0.0.1", port)
        try:
            self._spawn(timeout)
        except BaseException:
            self.close()
            raise

    def _spawn(self, timeout: float) -> None:
        package_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
        for rank in range(1, self.world):
            self.procs.append(subprocess.Popen(
                [_python(), "-m", "tensorrt_llm._standin.worker", "--rank", str(rank),
                 "--world", str(self.world), "--leader", f"127.0.0.1:{self.hub.port}"],
                env=env))
        self.hub.wait_for_workers(timeout)

    def close(self) -> None:
        if self.hub is not None:
            self.hub.close()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class LLM:
    """SIMULATED LLM API entry point (module docstring)."""

    def __init__(self, model: str | Path, tokenizer: str | Path | None = None,
                 tokenizer_mode: str = "auto", skip_tokenizer_init: bool = False,
                 trust_remote_code: bool = False, tensor_parallel_size: int = 1,
                 dtype: str = "auto", revision: str | None = None,
                 tokenizer_revision: str | None = None, **kwargs: Any) -> None:
        self._engine: Engine | None = None
        self._executor: GenerationExecutor | None = None
        self._ranks: _Ranks | None = None
        kwargs = check_llm_kwargs(kwargs)
        backend = kwargs.pop("backend", None) or "pytorch"
        if backend != "pytorch":
            raise ValueError(f"SIMULATED TensorRT-LLM: backend {backend!r} is not simulated; "
                             "the stand-in is the PyTorch backend")
        self.args = types.SimpleNamespace(
            model=str(model), tokenizer=tokenizer, tokenizer_mode=tokenizer_mode,
            skip_tokenizer_init=skip_tokenizer_init, trust_remote_code=trust_remote_code,
            tensor_parallel_size=tensor_parallel_size, dtype=dtype, backend=backend, **kwargs)
        pp = int(kwargs.get("pipeline_parallel_size") or 1)
        world = int(tensor_parallel_size) * pp
        ranks.announce(0, world, "leader")
        self._ranks = _Ranks(world)
        try:
            self._load(str(model), tokenizer, skip_tokenizer_init, trust_remote_code,
                       int(tensor_parallel_size), pp)
        except BaseException:
            self._ranks.close()
            raise

    def _load(self, model: str, tokenizer: Any, skip_tokenizer: bool, trust_remote_code: bool,
              tp: int, pp: int) -> None:
        if not os.path.isdir(model):
            raise ValueError(f"SIMULATED TensorRT-LLM: {model} is not a local checkpoint "
                             "directory (the stand-in downloads nothing)")
        ckpt = read_checkpoint(model)
        if ckpt.fault == FAULT_CRASH_AT_LOAD:
            raise RuntimeError(f"SIMULATED fault {ckpt.fault!r} (the checkpoint's config.json "
                               "asks for it): this model does not load")
        args = self.args
        kv_config = dict(getattr(args, "kv_cache_config", None) or {})
        gpu_memory = int(os.environ.get(ENV_GPU_MEMORY) or DEFAULT_GPU_MEMORY)
        weights = ckpt.weight_bytes(tp, pp)
        per_token = ckpt.kv_bytes_per_token(tp, pp, kv_config.get("dtype"))
        blocks, per_block = pool_blocks(kv_config, gpu_memory - weights, per_token,
                                        int(getattr(args, "max_beam_width", None) or 1))
        reuse = kv_config.get("enable_block_reuse")
        self.tokenizer = None if skip_tokenizer else load_tokenizer(
            str(tokenizer or model), trust_remote_code)
        self.max_seq_len = int(getattr(args, "max_seq_len", None) or ckpt.max_positions)
        self.max_num_tokens = int(getattr(args, "max_num_tokens", None)
                                  or DEFAULT_MAX_NUM_TOKENS)
        limits = Limits(
            max_batch_size=int(getattr(args, "max_batch_size", None) or DEFAULT_MAX_BATCH_SIZE),
            max_num_tokens=self.max_num_tokens,
            token_delay=float(os.environ.get(ENV_TOKEN_DELAY) or 0),
            shift=1 if ckpt.fault == FAULT_WRONG_ANSWER else 0,
            stats_enabled=bool(getattr(args, "enable_iter_perf_stats", False)),
            stats_max=int(getattr(args, "iter_stats_max_iterations", None) or DEFAULT_STATS_MAX),
            gpu_mem_usage=weights + blocks * per_block * per_token,
        )
        kv = KvCache(blocks, per_block, reuse=True if reuse is None else bool(reuse))
        assert self._ranks is not None
        executor = GenerationExecutor(stop=self._stop_engine)
        self._engine = Engine(kv, limits, self._ranks.hub, executor.background_error)
        self._executor = executor

    def _stop_engine(self) -> None:
        if self._engine is not None:
            self._engine.stop()

    # --- generation ----------------------------------------------------------------------------
    def _prepare_sampling_params(self, params: SamplingParams | None) -> SamplingParams:
        if params is None:
            if self.tokenizer is None:
                raise ValueError("tokenizer is required to initialize a default sampling_params, "
                                 "or you can explicitly specify a sampling_params")
            params = SamplingParams(end_id=self.tokenizer.eos_token_id,
                                    pad_id=self.tokenizer.pad_token_id)
        if not isinstance(params, SamplingParams):
            raise TypeError("The sampling_params must be type SamplingParams or None, but got "
                            f"{type(params)}")
        if self.tokenizer is not None:
            params._setup(self.tokenizer)
        elif params.end_id is None:
            raise ValueError("tokenizer is required to reset end_id if it is None, or you can "
                             "explicitly specify the end_id for sampling_params")
        return params

    def _prompt(self, inputs: Any, params: SamplingParams) -> tuple[str | None, list[int]]:
        if isinstance(inputs, dict):
            if "prompt_token_ids" in inputs:
                return None, list(inputs["prompt_token_ids"])
            inputs = inputs["prompt"]
        if isinstance(inputs, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer (skip_tokenizer_init is set)")
            ids = self.tokenizer.encode(inputs, add_special_tokens=params.add_special_tokens)
            return inputs, list(ids)
        if isinstance(inputs, (list, tuple)) and all(isinstance(t, int) for t in inputs):
            return None, list(inputs)
        raise TypeError(f"The inputs must be type str or list of int, but got {type(inputs)}")

    def generate_async(self, inputs: Any, sampling_params: SamplingParams | None = None,
                       lora_request: Any = None, prompt_adapter_request: Any = None,
                       streaming: bool = False, kv_cache_retention_config: Any = None,
                       disaggregated_params: Any = None, _postproc_params: Any = None,
                       scheduling_params: Any = None, cache_salt: str | None = None
                       ) -> RequestOutput:
        # The real check (llm.py): an executor that shut down, e.g. after a rank died, takes no
        # request.
        if self._executor is None or self._executor.is_shutdown() or self._engine is None:
            raise RuntimeError("LLM is shutting down")
        params = self._prepare_sampling_params(sampling_params)
        prompt, ids = self._prompt(inputs, params)
        if params.truncate_prompt_tokens is not None:
            ids = ids[-params.truncate_prompt_tokens:]
        if not ids:
            raise ValueError("SIMULATED TensorRT-LLM: the prompt has no tokens")
        if not getattr(self.args, "enable_chunked_prefill", False) and \
                len(ids) > self.max_num_tokens:
            raise ValueError(f"The sum of prompt length ({float(len(ids))}) and query length (0) "
                             f"should not exceed max_num_tokens ({self.max_num_tokens})")
        request_id = next(_ids)
        result = RequestOutput(request_id, prompt, ids, params, streaming, self.tokenizer,
                               self._engine.abort)
        self._engine.submit(Request(request_id, ids, params, streaming, result))
        # As the real proxy's submit: a queued background error (a lost rank) shuts the executor
        # down and is raised here.
        self._executor._handle_background_error()
        return result

    def generate(self, inputs: Any, sampling_params: SamplingParams | Sequence[SamplingParams]
                 | None = None, use_tqdm: bool = True, **kwargs: Any
                 ) -> RequestOutput | list[RequestOutput]:
        unbatched = not isinstance(inputs, list) or (bool(inputs) and isinstance(inputs[0], int))
        batch = [inputs] if unbatched else inputs
        futures = []
        for i, one in enumerate(batch):
            params = sampling_params[i] if isinstance(sampling_params, list) else sampling_params
            futures.append(self.generate_async(one, params, streaming=False, **kwargs))
        for future in futures:
            future.result()
        return futures[0] if unbatched else futures

    # --- statistics ----------------------------------------------------------------------------
    def _stats_ready(self) -> bool:
        if self._engine is None or not self._engine.submitted:
            print("Iteration statistics are not available yet. To collect runtime statistics, "
                  "please call get_stats() AFTER prompts have been submitted.", flush=True)
            return False
        return True

    def get_stats(self, timeout: float | None = 2) -> list[dict[str, Any]]:
        if not self._stats_ready():
            return []
        assert self._engine is not None
        return self._engine.drain_stats(timeout or 0)

    def get_stats_async(self, timeout: float | None = 2) -> IterationResult:
        engine = self._engine if self._stats_ready() else None
        return IterationResult(
            (lambda t: engine.next_stat(t)) if engine else (lambda t: None), timeout or 0)

    # --- lifetime ------------------------------------------------------------------------------
    def shutdown(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.doing_shutdown = True
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.stop()
        ranks_, self._ranks = self._ranks, None
        if ranks_ is not None:
            ranks_.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.shutdown()
        return False

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()
