"""Plans and files in the pod: reading a plan and its topology, JSON written atomically, sizes and
free space."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from tritonllm.api.topology import Topology

from .report import EXIT_INVALID, EXIT_MISMATCH, EXIT_NO_SPACE, Failure


def load_plan(path: str | Path) -> dict[str, Any]:
    try:
        plan = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise Failure(EXIT_INVALID, f"plan {path} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise Failure(EXIT_INVALID, f"plan {path} is not valid JSON: {exc}") from exc
    if not isinstance(plan, dict) or plan.get("version") != 1:
        found = plan.get("version") if isinstance(plan, dict) else plan
        raise Failure(EXIT_INVALID, f"plan {path}: unsupported plan version {found!r}")
    return plan


def plan_topology(plan: dict[str, Any]) -> Topology:
    """The topology the operator rendered into a plan (the pod never derives it)."""
    try:
        return Topology.from_wire(plan)
    except (KeyError, TypeError, ValueError) as exc:
        message = f"the plan's topology is incomplete or malformed: {exc}"
        raise Failure(EXIT_INVALID, message) from exc


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file, or None when the file does not exist."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise Failure(EXIT_MISMATCH, f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise Failure(EXIT_MISMATCH, f"{path} does not hold a JSON object")
    return data


def write_json_atomic(path: Path, data: Any) -> None:
    """Write temp + fsync + rename, so readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def existing_ancestor(path: Path) -> Path:
    """The nearest existing directory at or above `path` (for free-space checks)."""
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return Path("/")


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).stat().st_size
    return total


def check_free_space(target: Path, needed: int, what: str) -> None:
    """Refuse (EXIT_NO_SPACE) when the filesystem of `target` has less than `needed` bytes free."""
    where = existing_ancestor(target)
    free = shutil.disk_usage(where).free
    if free < needed:
        raise Failure(
            EXIT_NO_SPACE,
            f"{what} needs about {gib(needed)} but the filesystem of {where} has {gib(free)} "
            "free: enlarge the model store (spec.storage) or free space on it",
        )


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
