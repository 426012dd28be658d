"""GPU stand-in for the `tensorrt_llm` model: a tensor-parallel TOY, not a model, not TensorRT-LLM.

Used by the GPU recipe (scripts/gpu-check, docs/gpu.md); never by CI. It is deployed like the CPU
stand-in (the rendered tensorrt_llm config.pbtxt with only `backend` switched to python), as
tensorrt_llm/1/model.py with tensorrt_llm_cpu_standin.py beside it, whose request parsing and
response building it reuses: the same inputs and outputs as the TensorRT-LLM backend.

What it does on each rank that `tritonllm launch` starts through mpirun (one process per rank):

- placement as TensorRT-LLM does it: every rank sees all of the pod's GPUs and takes
  cuda:<local rank> (OMPI_COMM_WORLD_LOCAL_RANK); rank and world size from OMPI_COMM_WORLD_RANK /
  OMPI_COMM_WORLD_SIZE; torch.distributed over NCCL, rendezvous at TRITONLLM_STANDIN_RENDEZVOUS
  (host:port, default 127.0.0.1:29517). TRITONLLM_STANDIN_DEVICE=cpu computes on the CPU over gloo
  instead (the same recipe without GPUs, to see what the stand-in itself costs).
- the toy: token embedding -> W1 -> relu -> W2 -> output projection, with weights in {-1, 0, 1}
  drawn from a fixed seed, in float64 so that every sum is exact. Rank r holds the r-th column
  block of W1 and row block of W2 (Megatron-style tensor parallelism), computes its partial
  result, and a real all-reduce sums them, once per generated token. The next token is the
  argmax of the logits over the prompt's own token ids (so any tokenizer decodes it);
  tensorrt_llm_gpu_toy.reference_tokens() computes the same without sharding, which is how the
  recipe checks the answers.
- rank 0 receives the requests (as with TensorRT-LLM, only rank 0 serves) and advances all
  requests of a batch together, one token per step; each step it broadcasts the step's tokens
  over a CPU (gloo) group, as TensorRT-LLM's leader does over MPI, and the other ranks' worker
  thread (started in initialize, like TensorRT-LLM's worker loop on ranks >= 1) joins the step.
  finalize on rank 0 broadcasts a stop.
- each rank prints one line at initialize: `tritonllm-standin rank=.. local_rank=.. world=..
  device=.. pid=.. uuid=.. name=.. cuda_visible_devices=..` (the recipe checks the placement).
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import os
import socket
import sys
import threading
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tensorrt_llm_cpu_standin import TritonPythonModel as CpuStandin
from tensorrt_llm_cpu_standin import _scalar
from tensorrt_llm_gpu_toy import candidates_of, full_weights, partial, pick, shard

faulthandler.enable(all_threads=True)  # a crash in native code says where, in the rank's log

MAX_STEP = 64  # tokens per step message (more requests are stepped in chunks)
STOP = -1
ENV_DEVICE = "TRITONLLM_STANDIN_DEVICE"
ENV_RENDEZVOUS = "TRITONLLM_STANDIN_RENDEZVOUS"
DEFAULT_RENDEZVOUS = "127.0.0.1:29517"


class Toy:
    """This rank's shard, its device and its place in the world."""

    def __init__(self) -> None:
        env = os.environ
        self.rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("PMIX_RANK", "0")))
        self.world = int(env.get("OMPI_COMM_WORLD_SIZE", "1"))
        self.local_rank = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        self.steps = 0
        self.lock = threading.Lock()
        if env.get(ENV_DEVICE) == "cpu":
            self.device, backend = torch.device("cpu"), "gloo"
        else:
            count = torch.cuda.device_count()
            if count == 0:
                raise RuntimeError(f"rank {self.rank}: no CUDA device visible "
                                   f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r})")
            self.device, backend = torch.device("cuda", self.local_rank % count), "nccl"
            torch.cuda.set_device(self.device)
            torch.backends.cuda.matmul.allow_tf32 = False
            # NVLink multicast (NVLS) stays off on shared hosts: it can take GPUs out of service.
            os.environ["NCCL_NVLS_ENABLE"] = "0"
        host, port = env.get(ENV_RENDEZVOUS, DEFAULT_RENDEZVOUS).rsplit(":", 1)
        # An idle worker waits in a broadcast for the next step: no watchdog timeout for that.
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=self.rank,
                                world_size=self.world, timeout=datetime.timedelta(days=1))
        # Steps are announced on the CPU (as TensorRT-LLM's leader does over MPI), so an idle
        # worker waits in a socket, not in a GPU kernel that would show as GPU utilization.
        self.control = dist.new_group(backend="gloo", timeout=datetime.timedelta(days=1))
        full = full_weights()
        self.weights = {k: v.to(self.device) for k, v in shard(full, self.rank, self.world).items()}
        self._self_check(full)

    def describe(self) -> str:
        fields = {"rank": self.rank, "local_rank": self.local_rank, "world": self.world,
                  "device": str(self.device), "pid": os.getpid(), "host": socket.gethostname(),
                  "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            uuid = str(getattr(props, "uuid", ""))
            fields["uuid"] = uuid if not uuid or uuid.startswith("GPU-") else f"GPU-{uuid}"
            fields["name"] = props.name.replace(" ", "_")
        return "tritonllm-standin " + " ".join(f"{k}={v}" for k, v in fields.items())

    def _self_check(self, full: dict[str, torch.Tensor]) -> None:
        """One all-reduce at load: the sharded sum must equal the unsharded product exactly."""
        probe = torch.arange(8, dtype=torch.int64)
        summed = partial(self.weights, probe.to(self.device))
        dist.all_reduce(summed)
        if not torch.equal(summed.cpu(), partial(full, probe)):
            raise RuntimeError(f"rank {self.rank}: the all-reduced partial sums differ from the "
                               "unsharded product")

    def step(self, tokens: list[int]) -> torch.Tensor:
        """Rank 0: the summed hidden state for `tokens` (all ranks join through a broadcast)."""
        message = torch.zeros(MAX_STEP + 1, dtype=torch.int64)
        message[0] = len(tokens)
        message[1:1 + len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
        with self.lock:
            dist.broadcast(message, 0, group=self.control)
            summed = partial(self.weights, message[1:1 + len(tokens)].to(self.device))
            dist.all_reduce(summed)
            self.steps += 1
        return summed

    def serve(self) -> None:
        """Ranks >= 1: join every step rank 0 broadcasts, until the stop message."""
        message = torch.zeros(MAX_STEP + 1, dtype=torch.int64)
        while True:
            dist.broadcast(message, 0, group=self.control)
            count = int(message[0])
            if count == STOP:
                return
            summed = partial(self.weights, message[1:1 + count].to(self.device))
            dist.all_reduce(summed)
            self.steps += 1

    def stop(self) -> None:
        message = torch.zeros(MAX_STEP + 1, dtype=torch.int64)
        message[0] = STOP
        with self.lock:
            dist.broadcast(message, 0, group=self.control)


@dataclasses.dataclass(eq=False)
class Sequence:
    """One request in flight on rank 0."""

    request: Any
    prompt: np.ndarray
    streaming: bool
    exclude: bool
    remaining: int
    end_id: int | None
    candidates: torch.Tensor
    last: int
    tokens: list[int] = dataclasses.field(default_factory=list)
    _sender: Any = None

    def sender(self) -> Any:
        """The request's response sender, taken when first needed (decoupled only)."""
        if self._sender is None:
            self._sender = self.request.get_response_sender()
        return self._sender


class TritonPythonModel(CpuStandin):
    def initialize(self, args: dict[str, str]) -> None:
        super().initialize(args)
        started = time.monotonic()
        self.toy = Toy()
        print(f"{self.toy.describe()} init_seconds={time.monotonic() - started:.1f}",
              file=sys.stderr, flush=True)
        self.worker: threading.Thread | None = None
        if self.toy.rank != 0:
            self.worker = threading.Thread(target=self.toy.serve, name="standin-worker",
                                           daemon=True)
            self.worker.start()

    def finalize(self) -> None:
        super().finalize()  # the metrics thread (its gauges stay at their idle values here)
        if self.worker is None:
            self.toy.stop()
        else:
            self.worker.join(timeout=30)
        if self.worker is None or not self.worker.is_alive():
            dist.destroy_process_group()

    def execute(self, requests: list[Any]) -> list[Any] | None:
        sequences: list[Sequence | Any] = []  # a Sequence, or the error response
        for request in requests:
            try:
                sequences.append(self._sequence(request))
            except Exception as exc:
                sequences.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        active = [s for s in sequences if isinstance(s, Sequence) and s.remaining > 0]
        while active:
            for first in range(0, len(active), MAX_STEP):
                chunk = active[first:first + MAX_STEP]
                summed = self.toy.step([s.last for s in chunk])
                picked = pick(self.toy.weights, summed, [s.candidates for s in chunk])
                for seq, token in zip(chunk, picked, strict=True):
                    if token == seq.end_id:
                        seq.remaining = 0
                        continue
                    seq.tokens.append(token)
                    seq.last = token
                    seq.remaining -= 1
                    if seq.streaming:
                        seq.sender().send(self._response([token], seq.request, generated=1))
            active = [s for s in active if s.remaining > 0]
        if not self.decoupled:
            return [self._final(s) for s in sequences]
        for request, seq in zip(requests, sequences, strict=True):
            sender = seq.sender() if isinstance(seq, Sequence) else request.get_response_sender()
            response = self._final(seq)
            if response is not None:
                sender.send(response)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _final(self, seq: Sequence | Any) -> Any:
        """The last response of a request: its error, its whole output, or none (streamed)."""
        if not isinstance(seq, Sequence):
            return seq
        if seq.streaming:
            return None
        return self._response(seq.tokens if seq.exclude else [*seq.prompt.tolist(), *seq.tokens],
                              seq.request, generated=len(seq.tokens))

    def _sequence(self, request: Any) -> Sequence:
        prompt, streaming, exclude = self._parse(request)
        end_id = _scalar(request, "end_id")
        return Sequence(request, prompt, streaming, exclude,
                        remaining=int(_scalar(request, "request_output_len")),
                        end_id=None if end_id is None else int(end_id),
                        candidates=candidates_of(prompt.tolist(), self.toy.device),
                        last=int(prompt[-1]))
