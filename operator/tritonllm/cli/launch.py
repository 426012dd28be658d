"""`tritonllm launch --mode single|leader|worker --plan FILE`: the serving container's process.

Checks the engine against the plan and the image, then runs mpirun (leader, single) or sshd
(worker) in the foreground, forwarding SIGTERM. Runs from tritonllm.pyz inside the Triton image;
standard library only (see tritonllm.runtime); exit codes are listed in docs/in-pod.md.
"""

from __future__ import annotations

import argparse

from tritonllm.runtime import launch


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "launch",
        help="start tritonserver under mpirun for a serving pod (in-pod)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--mode",
        choices=launch.MODES,
        required=True,
        help="single: one pod runs every rank; leader/worker: a LeaderWorkerSet group",
    )
    p.add_argument("--plan", required=True, help="launch plan JSON (launch.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return launch.main(args.mode, args.plan)
