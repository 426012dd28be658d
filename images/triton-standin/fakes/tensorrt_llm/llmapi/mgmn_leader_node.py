"""SIMULATED `python3 -m tensorrt_llm.llmapi.mgmn_leader_node [--action stop]`: rank 0's
process beside the launched command under trtllm-llmapi-launch (the real one is an MPI comm
server the LLM's proxy attaches to).

Without --action: the hub of the group (tensorrt_llm/_standin/ranks.py). Worker ranks connect
on all addresses at TRITONLLM_STANDIN_LEADER_PORT (default 29531); the LLM in the launched
command attaches at TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR (tcp://127.0.0.1:<port>, exported by the
launch script) and its steps are relayed to every worker. It serves one LLM after another
(a model reload) until told to stop. With --action stop: tell the hub to stop (the launch script
does this when the command exits); the workers are shut down and every process ends.
"""

import argparse
import os
import socket
import sys
import threading
import time
from typing import Any

from .._standin import ranks
from .mgmn_worker_node import mpi_world

ENV_IPC_ADDR = "TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR"


def _address() -> tuple[str, int]:
    host, port = os.environ[ENV_IPC_ADDR].removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


def _serve_llm(line: ranks.Line, hub: ranks.Hub, stop: threading.Event) -> None:
    timeout = float(os.environ.get(ranks.ENV_WORKER_TIMEOUT) or 300)
    while True:
        try:
            message = line.receive(None)
        except (OSError, ValueError):
            return
        op = message.get("op")
        reply: dict[str, Any] = {"ok": True}
        try:
            if op == "attach":
                if int(message.get("world", 0)) != hub.world:
                    raise ranks.RankLost(f"SIMULATED TensorRT-LLM: the LLM needs "
                                         f"{message.get('world')} ranks, the launch runs "
                                         f"{hub.world}")
                reply["ranks"] = hub.wait_for_workers(timeout)
            elif op == "step":
                hub.step(int(message["n"]), message.get("tokens", []))
            elif op == "ping":
                hub.ping()
            elif op == "detach":
                line.close()
                return
            elif op == "stop":
                stop.set()
                line.close()
                return
        except (ranks.RankLost, RuntimeError) as exc:
            reply = {"error": str(exc)}
        try:
            line.send(reply)
        except OSError:
            return


def serve() -> int:
    world = mpi_world()
    ranks.announce(0, world, "hub")
    hub = ranks.Hub(world, "0.0.0.0", ranks.leader_port())
    server = socket.create_server(_address())
    stop = threading.Event()

    def accept() -> None:
        while True:
            sock, _ = server.accept()
            threading.Thread(target=_serve_llm, args=(ranks.Line(sock), hub, stop),
                             daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    stop.wait()
    hub.close()
    server.close()
    return 0


def send_stop() -> int:
    deadline = time.monotonic() + 30  # the command may end before the leader node listens
    while True:
        try:
            line = ranks.Line(socket.create_connection(_address(), timeout=10))
            line.send({"op": "stop"})
            line.close()
            return 0
        except OSError as exc:
            if time.monotonic() > deadline:
                print(f"mgmn_leader_node --action stop: no leader node ({exc})",
                      file=sys.stderr)
                return 1
            time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(prog="tensorrt_llm.llmapi.mgmn_leader_node")
    parser.add_argument("--action", choices=["stop"], default=None)
    args = parser.parse_args()
    return send_stop() if args.action == "stop" else serve()


if __name__ == "__main__":
    sys.exit(main())
