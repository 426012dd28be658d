"""SIMULATED ranks of a tensor/pipeline-parallel LLM: one real process per rank, over TCP.

The real LLM runs world = tp x pp ranks over MPI: on one node it spawns its workers itself (an
MPI pool), under mpirun `trtllm-llmapi-launch` starts them (rank 0 runs the given command and an
MPI comm server, the other ranks a worker; tensorrt_llm/llmapi/trtllm-llmapi-launch,
mgmn_leader_node.py, mgmn_worker_node.py). The stand-in keeps that process layout with plain
sockets instead of MPI; JSON lines, one message per line:

  worker -> hub   {"op": "hello", "rank", "world", "pid", "host"}
  hub -> worker   {"op": "step", "n", "tokens": [[request id, token], ...]} | {"op": "ping"}
                  | {"op": "shutdown"};  worker -> hub {"ack": n}  (ping: {"ack": "ping"})
  LLM -> hub      {"op": "attach", "world"} then {"op": "step"|"ping", ...}, {"op": "detach"};
                  hub -> LLM {"ok": true, ...} | {"error": "..."}      (launch mode only)
  control -> hub  {"op": "stop"}        (`python3 -m tensorrt_llm.llmapi.mgmn_leader_node
                                          --action stop`, launch mode only)

The hub is where workers connect: the LLM itself when it spawned them (listening on 127.0.0.1),
or, under trtllm-llmapi-launch, rank 0's leader-node process (listening on all addresses, port
TRITONLLM_STANDIN_LEADER_PORT, default 29531), which the LLM in the launched command reaches at
TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR, as the real one reaches its MPI comm server. Every step of
the scheduler goes to every worker and waits for its acknowledgement, so a rank that died or
hangs (TRITONLLM_STANDIN_ACK_TIMEOUT seconds, default 30) fails the step with an error naming it.

Each process prints one line when it starts (tests check placement):
  tensorrt_llm SIMULATED rank=<r> world=<w> pid=<pid> host=<hostname> role=<leader|worker|hub>
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
import threading
import time
from typing import Any

ENV_LEADER = "TRITONLLM_STANDIN_LEADER"
ENV_LEADER_PORT = "TRITONLLM_STANDIN_LEADER_PORT"
ENV_ACK_TIMEOUT = "TRITONLLM_STANDIN_ACK_TIMEOUT"
ENV_WORKER_TIMEOUT = "TRITONLLM_STANDIN_WORKER_TIMEOUT"
DEFAULT_LEADER_PORT = 29531


def announce(rank: int, world: int, role: str) -> None:
    print(f"tensorrt_llm SIMULATED rank={rank} world={world} pid={os.getpid()} "
          f"host={socket.gethostname()} role={role}", flush=True)


def _seconds(env: str, default: float) -> float:
    return float(os.environ.get(env) or default)


def leader_address() -> str:
    """Where a launched worker finds rank 0: TRITONLLM_STANDIN_LEADER, else the LeaderWorkerSet's
    LWS_LEADER_ADDRESS, else the host of the mpirun that started it (Open MPI's
    OMPI_MCA_orte_hnp_uri; processes started over ssh see no pod environment), else 127.0.0.1."""
    for var in (ENV_LEADER, "LWS_LEADER_ADDRESS"):
        if os.environ.get(var, "").strip():
            return os.environ[var].strip()
    hnp = re.search(r"tcp://([0-9.]+):", os.environ.get("OMPI_MCA_orte_hnp_uri", ""))  # noqa: SIM112
    return hnp.group(1) if hnp else "127.0.0.1"


def leader_port() -> int:
    return int(os.environ.get(ENV_LEADER_PORT) or DEFAULT_LEADER_PORT)


class RankLost(RuntimeError):
    """A rank stopped answering: the LLM fails its requests with this message."""


class Line:
    """A socket read and written as JSON lines."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._file = sock.makefile("rb")

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self, timeout: float | None) -> dict[str, Any]:
        self.sock.settimeout(timeout)
        line = self._file.readline()
        if not line:
            raise ConnectionError("connection closed")
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
            self.sock.close()


class Hub:
    """Where the workers connect; steps go to all of them and wait for every acknowledgement."""

    def __init__(self, world: int, host: str, port: int) -> None:
        self.world = world
        self._server = socket.create_server((host, port), reuse_port=False)
        self.port = self._server.getsockname()[1]
        self._workers: dict[int, tuple[Line, dict[str, Any]]] = {}
        self._lost: dict[int, str] = {}
        self._changed = threading.Condition()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="standin-hub").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            line = Line(sock)
            try:
                hello = line.receive(30)
            except (OSError, ValueError):
                line.close()
                continue
            if hello.get("op") != "hello" or not 0 < int(hello.get("rank", 0)) < self.world:
                line.send({"error": f"not a worker of this world of {self.world}: {hello}"})
                line.close()
                continue
            with self._changed:
                self._workers[int(hello["rank"])] = (line, hello)
                self._lost.pop(int(hello["rank"]), None)
                self._changed.notify_all()

    def wait_for_workers(self, timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._workers) < self.world - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, self.world)) - set(self._workers))
                    raise RuntimeError(
                        f"SIMULATED TensorRT-LLM: ranks {missing} of {self.world} did not join "
                        f"within {timeout:.0f}s (hub port {self.port})")
                self._changed.wait(left)
            return [hello for _, hello in sorted(self._workers.values(),
                                                 key=lambda w: int(w[1]["rank"]))]

    def _describe(self, rank: int) -> str:
        hello = self._workers.get(rank, (None, {}))[1]
        return (f"rank {rank} of {self.world} (pid {hello.get('pid', '?')} on "
                f"{hello.get('host', '?')})")

    def _lose(self, rank: int, reason: str) -> RankLost:
        message = f"SIMULATED TensorRT-LLM {self._describe(rank)} is gone: {reason}"
        line = self._workers.pop(rank, (None, {}))[0]
        if line is not None:
            line.close()
        self._lost[rank] = message
        return RankLost(message)

    def broadcast(self, message: dict[str, Any], ack: Any) -> None:
        """Send to every worker, wait for each acknowledgement; RankLost names the first rank
        that failed."""
        timeout = _seconds(ENV_ACK_TIMEOUT, 30)
        with self._changed:
            if self._lost:
                rank = min(self._lost)
                raise RankLost(self._lost[rank])
            missing = sorted(set(range(1, self.world)) - set(self._workers))
            if missing:
                raise RankLost(f"SIMULATED TensorRT-LLM rank {missing[0]} of {self.world} "
                               "is not connected")
            workers = sorted(self._workers.items())
        for rank, (line, _) in workers:
            try:
                line.send(message)
            except OSError as exc:
                raise self._lose(rank, f"send failed ({exc})") from None
        for rank, (line, _) in workers:
            try:
                reply = line.receive(timeout)
            except (OSError, ValueError) as exc:
                raise self._lose(rank, f"no acknowledgement ({exc or 'timed out'})") from None
            if reply.get("ack") != ack:
                raise self._lose(rank, f"unexpected reply {reply}")

    def step(self, n: int, tokens: list[list[int]]) -> None:
        self.broadcast({"op": "step", "n": n, "tokens": tokens}, n)

    def ping(self) -> None:
        self.broadcast({"op": "ping"}, "ping")

    def close(self) -> None:
        self._closed = True
        for line, _ in list(self._workers.values()):
            with contextlib.suppress(OSError):
                line.send({"op": "shutdown"})
            line.close()
        self._server.close()


class RemoteHub:
    """The hub of trtllm-llmapi-launch's leader node, as the LLM in the launched command sees it."""

    def __init__(self, address: str, world: int, timeout: float) -> None:
        host, port = address.removeprefix("tcp://").rsplit(":", 1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._line = Line(socket.create_connection((host, int(port)), timeout=10))
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"SIMULATED TensorRT-LLM: the leader node at {address} "
                                       f"does not answer ({exc})") from None
                time.sleep(0.2)
        self._request({"op": "attach", "world": world}, timeout)

    def _request(self, message: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        try:
            self._line.send(message)
            reply = self._line.receive(timeout)
        except (OSError, ValueError) as exc:
            raise RankLost(f"SIMULATED TensorRT-LLM leader node is gone: {exc}") from None
        if "error" in reply:
            raise RankLost(str(reply["error"]))
        return reply

    def step(self, n: int, tokens: list[list[int]]) -> None:
        self._request({"op": "step", "n": n, "tokens": tokens})

    def ping(self) -> None:
        self._request({"op": "ping"})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._line.send({"op": "detach"})
        self._line.close()


def run_worker(rank: int, world: int, host: str, port: int, connect_timeout: float) -> int:
    """A worker rank: join the hub, acknowledge every step until told to stop."""
    announce(rank, world, "worker")
    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            line = Line(socket.create_connection((host, port), timeout=10))
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                print(f"tensorrt_llm SIMULATED rank={rank}: no leader at {host}:{port} ({exc})",
                      file=sys.stderr, flush=True)
                return 1
            time.sleep(0.2)
    line.send({"op": "hello", "rank": rank, "world": world, "pid": os.getpid(),
               "host": socket.gethostname()})
    while True:
        try:
            message = line.receive(None)
        except (OSError, ValueError):
            return 0  # the leader went away: nothing left to serve
        op = message.get("op")
        if op == "shutdown" or "error" in message:
            return 0 if op == "shutdown" else 1
        line.send({"ack": message.get("n") if op == "step" else "ping"})
