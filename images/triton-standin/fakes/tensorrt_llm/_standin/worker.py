"""A worker rank the SIMULATED LLM spawned itself (single node, world > 1):
``python -m tensorrt_llm._standin.worker --rank R --world W --leader HOST:PORT``."""

import argparse
import os
import sys

from .ranks import ENV_WORKER_TIMEOUT, run_worker


def main() -> int:
    parser = argparse.ArgumentParser(prog="tensorrt_llm._standin.worker")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--leader", required=True, help="host:port of the LLM's hub")
    args = parser.parse_args()
    host, port = args.leader.rsplit(":", 1)
    timeout = float(os.environ.get(ENV_WORKER_TIMEOUT) or 300)
    return run_worker(args.rank, args.world, host, int(port), timeout)


if __name__ == "__main__":
    sys.exit(main())
