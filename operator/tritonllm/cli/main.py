"""The ``tritonllm`` command: one entry point, one sub-command per verb.

Each verb lives in its own module with an ``add_parser(subparsers)`` function that registers its
arguments and sets ``func``; ``main`` only dispatches. Exit codes: 0 success, 1 runtime failure,
2 invalid input (bad CR, bad flags).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Verb modules, imported lazily so that `tritonllm launch` inside a pod does not import kopf.
VERBS: dict[str, str] = {
    "crd": "tritonllm.cli.crd",
    "render": "tritonllm.cli.render",
    "run": "tritonllm.cli.run",
    "build": "tritonllm.cli.build",
    "launch": "tritonllm.cli.launch",
    "cluster": "tritonllm.cluster.cli",
    "demo": "tritonllm.cli.demo",
}


def build_parser(verbs: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tritonllm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in verbs or VERBS:
        try:
            module = importlib.import_module(VERBS[verb])
        except ModuleNotFoundError as exc:  # a verb not built yet in this checkout
            if exc.name and exc.name.startswith("tritonllm"):
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Import only the requested verb when it is known: keeps in-pod start-up light.
    verbs = [args_list[0]] if args_list and args_list[0] in VERBS else None
    parser = build_parser(verbs)
    args = parser.parse_args(args_list)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
