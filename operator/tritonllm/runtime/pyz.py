"""Pack the in-pod entry points into one zipapp, tritonllm.pyz, run by the Triton image's python3.

`python3 tritonllm.pyz build|launch ...` must work with the standard library alone, so the archive
holds only the modules those verbs import (MODULES below), not the operator: a module that reached
for pydantic or kopf would fail at import inside the pod, and here it fails in the unit tests,
which run the archive under `python3 -S` (no site-packages). The operator image builds the archive
once (`scripts/build-pyz` or `python -m tritonllm.runtime.pyz --out PATH`) and its init container
copies it into every Job and serving pod.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import zipapp
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # .../tritonllm
MODULES = (
    "__init__.py",
    "api/__init__.py",
    "api/constants.py",
    "api/topology.py",
    "cli/__init__.py",
    "cli/main.py",
    "cli/build.py",
    "cli/launch.py",
    "runtime/*.py",
)
# zipapp's own `main=` discards the return value; the exit code is the contract, so keep it.
MAIN = "import sys\n\nfrom tritonllm.cli.main import main\n\nsys.exit(main())\n"


def build_pyz(out: Path) -> Path:
    """Write the zipapp to `out` (atomically) and return its path."""
    with tempfile.TemporaryDirectory(prefix="tritonllm-pyz-") as tmp:
        stage = Path(tmp) / "src"
        for pattern in MODULES:
            matches = sorted(PACKAGE_ROOT.glob(pattern))
            if not matches:
                raise FileNotFoundError(f"{PACKAGE_ROOT}/{pattern}")
            for src in matches:
                dst = stage / "tritonllm" / src.relative_to(PACKAGE_ROOT)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
        (stage / "__main__.py").write_text(MAIN)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".{out.name}.tmp")
        zipapp.create_archive(
            stage, partial, interpreter="/usr/bin/env python3", compressed=True
        )
        partial.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="dist/tritonllm.pyz", help="archive to write")
    args = parser.parse_args(argv)
    print(build_pyz(Path(args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
