"""The model-repository step: copy the rendered repository onto the store, atomically, after
checking that the engine it points at is the one it was rendered for.

Serving pods wait for the repository directory to exist and then load it, so it must appear whole
or not at all: the copy goes to a hidden sibling first and is renamed into place (rename is atomic
within one filesystem). A content hash, kept in a top-level *file* of the repository (Triton treats
every top-level directory as a model, files are ignored), makes reruns no-ops.

Before copying, the engine must pass the one engine check (engine_files.check_engine, the same the
serving pods make): artifact.json exists (the build finished) and matches what the repository was
rendered for, tp and pp (so world size = tp x pp holds at launch) and the TensorRT-LLM version (an
engine only loads under the version that built it), and the engine's config.json agrees. This runs
in the operator image, where the check is cheap, instead of failing minutes later on a GPU node.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from .engine_files import check_engine
from .files import plan_topology
from .report import EXIT_NOT_FOUND, Failure, log

CONTENT_MARKER = ".tritonllm-content"


def _is_ours(name: str) -> bool:
    # ConfigMap volumes keep their own bookkeeping in "..data" and "..<timestamp>" entries.
    return not name.startswith("..")


def tree_digest(root: Path) -> str:
    """sha256 over relative paths and contents (symlinks followed, as a ConfigMap needs)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if _is_ours(d))
        for name in sorted(f for f in filenames if _is_ours(f) and f != CONTENT_MARKER):
            path = Path(dirpath) / name
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def run(step: dict[str, Any]) -> None:
    src, dst = Path(step["from"]), Path(step["to"])
    weights = step.get("weightsDir")
    if weights and not Path(weights).is_dir():
        raise Failure(EXIT_NOT_FOUND, f"model directory {weights} does not exist on the store")
    if step.get("engineDir"):
        expect = step["expect"]
        check_engine(
            Path(step["engineDir"]),
            plan_topology(expect),
            version=expect.get("trtllmVersion"),
            subject="repository",
            against="this repository is for",
        )
    if not src.is_dir():
        raise Failure(EXIT_NOT_FOUND, f"rendered repository {src} does not exist")
    content = tree_digest(src)
    if _matches(dst, content):
        log("repository", "skip", to=str(dst), reason="present with the same content")
        return
    log("repository", "start", to=str(dst), content=content[:16])
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=lambda _d, names: [n for n in names if not _is_ours(n)])
    (tmp / CONTENT_MARKER).write_text(content + "\n")
    old = dst.parent / f".{dst.name}.old-{os.getpid()}"
    if dst.exists():
        os.rename(dst, old)  # a different content under the same key: replace it
    try:
        os.rename(tmp, dst)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not _matches(dst, content):
            raise
        # Another Job won the race with the same content.
        shutil.rmtree(tmp, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(old)
    log("repository", "end", to=str(dst))


def _matches(dst: Path, content: str) -> bool:
    marker = dst / CONTENT_MARKER
    return marker.is_file() and marker.read_text().strip() == content
