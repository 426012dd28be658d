"""SIMULATED `python3 -m tensorrt_llm.llmapi.mgmn_worker_node`: what trtllm-llmapi-launch runs on
every rank but 0. It joins the leader node's hub (TRITONLLM_STANDIN_LEADER, else
LWS_LEADER_ADDRESS, else 127.0.0.1; port TRITONLLM_STANDIN_LEADER_PORT, default 29531) and
acknowledges the steps of whichever LLM attaches there until the leader node stops
(tensorrt_llm/_standin/ranks.py). Rank and world size as the launch script reads them."""

import os
import sys

from .._standin.ranks import ENV_WORKER_TIMEOUT, leader_address, leader_port, run_worker


def mpi_rank() -> int:
    for var in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMI_ID"):
        if os.environ.get(var):
            return int(os.environ[var])
    return 0


def mpi_world() -> int:
    for var in ("tllm_mpi_size", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        if os.environ.get(var):
            return int(os.environ[var])
    return 1


def main() -> int:
    timeout = float(os.environ.get(ENV_WORKER_TIMEOUT) or 300)
    return run_worker(mpi_rank(), mpi_world(), leader_address(), leader_port(), timeout)


if __name__ == "__main__":
    sys.exit(main())
