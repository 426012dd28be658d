"""How an in-pod entry point reports: exit codes, progress lines, the termination message.

Exit codes are distinct per failure class so that a Job's podFailurePolicy (and a human reading
`kubectl get pod`) can tell a retryable failure (a tool crashed, the network broke) from one that no
retry can fix (bad credentials, an architecture without a converter, a version mismatch). The last
error line also goes to /dev/termination-log, which the operator copies into the CR's conditions.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# --- exit codes (docs/in-pod.md lists them) --------------------------------------------------
EXIT_OK = 0
EXIT_FAILED = 1  # a tool failed or an unexpected error: retrying may help
EXIT_INVALID = 2  # the plan or the flags are malformed
EXIT_NO_SPACE = 10  # the target filesystem is (or would be) full
EXIT_AUTH = 11  # the Hugging Face Hub refused the credentials (401/403)
EXIT_GPUS = 12  # fewer visible GPUs than the plan needs
EXIT_NO_CONVERTER = 13  # a model architecture without a TensorRT-LLM converter
EXIT_MISMATCH = 14  # engine tp/pp (or world size) differs from the plan
EXIT_VERSION = 15  # TensorRT-LLM version of the image differs from the plan's / the engine's
EXIT_NOT_FOUND = 16  # a source directory, tool, engine or artifact is missing
EXIT_TIMEOUT = 17  # waited too long (model repository, worker pods)
EXIT_TAMPERED = 18  # the engine on the store is not the one its build reported (verified.py)

# Names of failure classes, printed in the error line ("error=auth ...").
EXIT_NAMES = {
    EXIT_FAILED: "failed",
    EXIT_INVALID: "invalid",
    EXIT_NO_SPACE: "no-space",
    EXIT_AUTH: "auth",
    EXIT_GPUS: "gpus",
    EXIT_NO_CONVERTER: "no-converter",
    EXIT_MISMATCH: "mismatch",
    EXIT_VERSION: "version",
    EXIT_NOT_FOUND: "not-found",
    EXIT_TIMEOUT: "timeout",
    EXIT_TAMPERED: "tampered",
}

TERMINATION_LOG = Path("/dev/termination-log")


class Failure(Exception):
    """A failure with a specific exit code and a message meant for the user."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- progress lines ---------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    if text == "" or re.search(r'[\s"=]', text):
        return json.dumps(text)
    return text


def log(component: str, event: str, **fields: Any) -> None:
    """One logfmt-style line: ``<UTC time> tritonllm <component> event=<event> k=v ...``."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    parts = [stamp, "tritonllm", component, f"event={event}"]
    parts += [f"{k}={_fmt(v)}" for k, v in fields.items() if v is not None]
    print(" ".join(parts), flush=True)


def report_failure(component: str, failure: Failure) -> int:
    """Log the failure, leave it as the container's termination message, return its exit code."""
    name = EXIT_NAMES.get(failure.code, "failed")
    log(component, "error", error=name, code=failure.code, message=failure.message)
    if TERMINATION_LOG.exists():
        with contextlib.suppress(OSError):
            TERMINATION_LOG.write_text(f"[{name}] {failure.message}\n")
    return failure.code


def run_main(component: str, body: Callable[[], int]) -> int:
    """Run an entry point, mapping Failure (and ENOSPC anywhere) to the documented exit codes."""
    try:
        return body()
    except Failure as exc:
        return report_failure(component, exc)
    except OSError as exc:
        if exc.errno == 28:  # ENOSPC
            return report_failure(component, Failure(EXIT_NO_SPACE, f"no space left: {exc}"))
        return report_failure(component, Failure(EXIT_FAILED, f"{type(exc).__name__}: {exc}"))
