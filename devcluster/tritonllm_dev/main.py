"""The ``tritonllm-dev`` command: the repository's dev verbs, ``cluster`` and ``demo``.

The same dispatch, error lines and ``--debug`` as ``tritonllm`` (whose ``cluster`` and ``demo``
verbs are aliases of these when this package is installed).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tritonllm.cli.main import main as dispatch

VERBS: dict[str, str] = {"cluster": "tritonllm_dev.cli", "demo": "tritonllm_dev.demo"}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(argv, VERBS, prog="tritonllm-dev", description=__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
