"""The ``tritonllm`` command: one entry point, one sub-command per verb.

Each verb lives in its own module with an ``add_parser(subparsers)`` function that registers its
arguments and sets ``func``; ``main`` only dispatches. Exit codes: 0 success, 1 runtime failure,
2 invalid input (bad CR, bad flags).

An error the command does not expect to handle (a failed build, a cluster that does not come up,
a timeout) prints one ``error:`` line and exits 1; ``--debug`` anywhere on the command line (or
``TRITONLLM_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence

# Verb modules, imported lazily so that `tritonllm launch` inside a pod does not import kopf.
VERBS: dict[str, str] = {
    "crd": "tritonllm.cli.crd",
    "render": "tritonllm.cli.render",
    "fit": "tritonllm.cli.fit",
    "bench": "tritonllm.cli.bench",
    "run": "tritonllm.cli.run",
    "build": "tritonllm.cli.build",
    "launch": "tritonllm.cli.launch",
    "openai": "tritonllm.cli.openai",
    # The dev tooling's verbs (devcluster/, not in the wheel; its own command is `tritonllm-dev`).
    "cluster": "tritonllm_dev.cli",
    "demo": "tritonllm_dev.demo",
}


def build_parser(
    verbs: Sequence[str] | None = None, table: Mapping[str, str] = VERBS, prog: str = "tritonllm",
    description: str = __doc__.splitlines()[0],
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in verbs or table:
        try:
            module = importlib.import_module(table[verb])
        except ModuleNotFoundError as exc:  # a verb not built yet in this checkout
            if exc.name and exc.name.startswith("tritonllm"):
                continue
            raise
        module.add_parser(sub)
    return parser


def _left_out(verb: str, module: str) -> int:
    """A verb whose code this installation does not carry (the operator image leaves out the
    local-cluster tooling, tritonllm_dev; the in-pod zipapp carries build and launch only)."""
    if module.startswith("tritonllm_dev"):
        why = ("the local-cluster tooling is dev-only and the operator image leaves it out: run "
               "it from a source checkout (pip install -e . -e devcluster)")
    else:
        why = "the in-pod zipapp carries only `build` and `launch`"
    print(f"error: `tritonllm {verb}` needs {module}, which this installation does not include "
          f"({why})", file=sys.stderr)
    return 2


def _failed(verb: str, exc: Exception) -> int:
    """One line for an error, no traceback (``--debug`` shows it)."""
    text = str(exc).strip() or type(exc).__name__
    first, *rest = text.splitlines()
    print(f"error: tritonllm {verb}: {first}", file=sys.stderr)
    for line in rest[:20]:
        print(f"  {line}", file=sys.stderr)
    print("  (run with --debug for the traceback)", file=sys.stderr)
    return 1


def main(
    argv: Sequence[str] | None = None, table: Mapping[str, str] = VERBS, prog: str = "tritonllm",
    description: str = __doc__.splitlines()[0],
) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list or os.environ.get("TRITONLLM_DEBUG", "") not in ("", "0")
    args_list = [a for a in args_list if a != "--debug"]
    # Import only the requested verb when it is known: keeps in-pod start-up light.
    verbs = [args_list[0]] if args_list and args_list[0] in table else None
    if verbs:
        try:
            importlib.import_module(table[verbs[0]])
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("tritonllm"):
                return _left_out(verbs[0], exc.name)
            raise
    parser = build_parser(verbs, table, prog, description)
    args = parser.parse_args(args_list)
    try:
        result: int = args.func(args)
    except ModuleNotFoundError as exc:  # a verb that imports the left-out part when it runs
        if exc.name and exc.name.startswith("tritonllm_dev"):
            return _left_out(args.verb, exc.name)
        if debug:
            raise
        return _failed(args.verb, exc)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        return _failed(args.verb, exc)
    return result


if __name__ == "__main__":
    sys.exit(main())
