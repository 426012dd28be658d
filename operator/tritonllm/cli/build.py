"""`tritonllm build --plan FILE`: run a build, download or model-repository plan.

The engine-build and download Jobs run it from tritonllm.pyz inside the Triton image; the
model-repository Job runs it from the operator image. Standard library only (see
tritonllm.runtime); exit codes are listed in docs/in-pod.md.
"""

from __future__ import annotations

import argparse

from tritonllm.runtime import build


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "build",
        help="execute a build plan: download, convert/quantize, trtllm-build (in-pod)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--plan", required=True, help="plan JSON (build.json or repository.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return build.main(args.plan)
