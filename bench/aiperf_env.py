"""NVIDIA's aiperf in a virtual environment of its own, made once and cached.

aiperf pins versions the operator does not run with (prometheus-client ~= 0.23, rich ~= 14.1)
and pulls in transformers, pandas, matplotlib and more: in the project's environment, tests
would check the operator against those versions instead of the ones it ships with. So it lives in
~/.cache/tritonllm/aiperf-venv (made from this interpreter, under a lock: one installer at a time
across test processes), like the triton tier's pytriton venv, and its `aiperf` executable is
called by path: `aiperf_executable()`.

    .venv/bin/python -m bench.aiperf_env      # make it now; prints the executable's path
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonllm"
VENV = CACHE / "aiperf-venv"
REQUIREMENTS = ("aiperf==0.13.0",)
INSTALL_TIMEOUT = 1200  # seconds: the wheels of aiperf and its dependencies, about 400 MB


def aiperf_executable() -> Path:
    """The cached aiperf's executable, installed on first use."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "aiperf-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = VENV / "tritonllm-requirements.txt"
        wanted = "\n".join(REQUIREMENTS)
        exe = VENV / "bin" / "aiperf"
        if not (stamp.exists() and stamp.read_text() == wanted and exe.exists()):
            shutil.rmtree(VENV, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            "--disable-pip-version-check", *REQUIREMENTS],
                           check=True, timeout=INSTALL_TIMEOUT)
            stamp.write_text(wanted)  # written last: a broken install is redone
    return exe


def offline_env() -> dict[str, str]:
    """The environment to run aiperf in with a local tokenizer directory: HF_HUB_OFFLINE unset,
    since aiperf 0.13.0 then resolves every name, a plain directory too, through the hub
    cache's snapshots and fails; unset, a local path is read from disk and nothing is fetched."""
    return {k: v for k, v in os.environ.items()
            if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}


if __name__ == "__main__":
    print(aiperf_executable())
