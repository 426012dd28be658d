"""An engine directory on the store: its tp/pp mapping, artifact.json, file checksums, and the one
engine check that build, repository and launch all run before using an engine."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tritonllm.api.topology import Topology, world_size

from .files import read_json
from .probes import same_version, version_check_skipped
from .report import EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_VERSION, Failure


@dataclasses.dataclass(frozen=True)
class EngineMapping:
    tp: int
    pp: int
    version: str | None

    @property
    def world_size(self) -> int:
        return world_size(self.tp, self.pp)


def engine_mapping(engine_dir: Path) -> EngineMapping:
    """tp/pp from <engine>/config.json `.pretrained_config.mapping` (pp defaults to 1), as the
    C++ runtime reads them; the building TensorRT-LLM version from `.version`."""
    path = engine_dir / "config.json"
    cfg = read_json(path)
    if cfg is None:
        raise Failure(EXIT_NOT_FOUND, f"{path} does not exist: the engine is missing or incomplete")
    mapping = (cfg.get("pretrained_config") or {}).get("mapping")
    if not isinstance(mapping, dict) or "tp_size" not in mapping:
        raise Failure(
            EXIT_MISMATCH, f"{path} has no .pretrained_config.mapping.tp_size (not an engine?)"
        )
    version = cfg.get("version")
    return EngineMapping(
        int(mapping["tp_size"]), int(mapping.get("pp_size", 1)), str(version) if version else None
    )


ARTIFACT = "artifact.json"
STATE_DIR = ".tritonllm"  # the build's step markers and the verification marker (verified.py)
# Not part of the engine: the record of it, and the build's own state.
ENGINE_UNHASHED = (ARTIFACT, STATE_DIR)
HASH_CHUNK = 8 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def files_sha256(paths: list[Path]) -> list[str]:
    """sha256 of each file, hashed in parallel threads (hashlib releases the GIL, and an engine
    is one file per rank: tp x pp files hash about as fast as the largest one alone)."""
    if len(paths) <= 1:
        return [file_sha256(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1, 16)) as pool:
        return list(pool.map(file_sha256, paths))


def engine_file_paths(engine_dir: Path) -> list[str]:
    """Every file of an engine directory (relative, sorted), artifact.json and the build's
    state directory left out. A symbolic link counts as a file (its target is hashed)."""
    out: list[str] = []
    for root, dirs, files in os.walk(engine_dir):
        rel = Path(root).relative_to(engine_dir)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in ENGINE_UNHASHED]
            files = [f for f in files if f not in ENGINE_UNHASHED]
        out += [str(rel / f) if rel != Path(".") else f for f in files]
    return sorted(out)


def engine_checksums(engine_dir: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every engine file, as artifact.json records them."""
    names = engine_file_paths(engine_dir)
    digests = files_sha256([engine_dir / n for n in names])
    return {
        name: {"sha256": digest, "size": (engine_dir / name).stat().st_size}
        for name, digest in zip(names, digests, strict=True)
    }


def verify_engine_files(engine_dir: Path, artifact: dict[str, Any]) -> None:
    """Refuse an engine whose files are not exactly those the build recorded in artifact.json:
    one missing, added, of another size or with another sha256 (sizes first, then hashes)."""
    recorded = artifact.get("files")
    fix = (
        f"delete the TritonLLMEngine {artifact.get('engineKey')} (kubectl delete tllme) and "
        f"the directory {engine_dir}, so that the operator builds it again"
    )
    if not isinstance(recorded, dict) or not recorded:
        raise Failure(
            EXIT_MISMATCH,
            f"{engine_dir}/artifact.json records no checksums of the engine files (built by an "
            f"older tritonllm), so the engine cannot be verified: {fix}",
        )
    present = set(engine_file_paths(engine_dir))
    problems = [f"{n} missing" for n in sorted(set(recorded) - present)]
    problems += [f"{n} not written by the build" for n in sorted(present - set(recorded))]
    if not problems:
        for name in sorted(recorded):
            want = recorded[name] if isinstance(recorded[name], dict) else {}
            path = engine_dir / name
            if path.stat().st_size != want.get("size"):
                problems.append(f"{name} has {path.stat().st_size} bytes, not {want.get('size')}")
        names = sorted(recorded) if not problems else []
        digests = files_sha256([engine_dir / n for n in names])
        for name, digest in zip(names, digests, strict=True):
            if digest != recorded[name].get("sha256"):
                problems.append(f"{name} has another sha256 than the build recorded")
    if problems:
        raise Failure(
            EXIT_MISMATCH,
            f"the engine in {engine_dir} was changed after its build ("
            + "; ".join(problems[:5])
            + (f"; {len(problems) - 5} more" if len(problems) > 5 else "")
            + f"): refusing to serve it; {fix}",
        )


def read_artifact(engine_dir: Path) -> tuple[dict[str, Any], str]:
    """<engineDir>/artifact.json and the sha256 of its bytes, from one read (what is checked is
    what the digest names)."""
    path = engine_dir / ARTIFACT
    try:
        blob = path.read_bytes()
    except FileNotFoundError as exc:
        raise Failure(
            EXIT_NOT_FOUND,
            f"{path} does not exist: the engine was not (completely) built",
        ) from exc
    try:
        artifact = json.loads(blob)
    except ValueError as exc:
        raise Failure(EXIT_MISMATCH, f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(artifact, dict):
        raise Failure(EXIT_MISMATCH, f"{path} does not hold a JSON object")
    return artifact, hashlib.sha256(blob).hexdigest()


def check_engine(
    engine_dir: Path, topology: Topology, *, version: str | None, subject: str, against: str,
    artifact: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The one engine check, made by the repository Job and by every serving pod: the engine's
    artifact.json exists (the build finished), its tp and pp are the topology's, the engine's own
    config.json agrees with it (nothing changed it since), and, unless `version` is None or the
    check is skipped, it was built by TensorRT-LLM `version`. The messages name who expects
    what: `subject` the topology ("repository", "deployment"), `against` the version ("this
    repository is for", "this image has"). `artifact`: the one the caller read (read_artifact),
    else it is read here. The files themselves are verified by verified.verify_engine (serving
    pods) and verify_engine_files (the build). Returns the artifact."""
    if artifact is None:
        artifact, _ = read_artifact(engine_dir)
    tp, pp = int(artifact.get("tensorParallel", 0)), int(artifact.get("pipelineParallel", 0))
    if (tp, pp) != (topology.tensor, topology.pipeline):
        raise Failure(
            EXIT_MISMATCH,
            f"the engine in {engine_dir} was built with tp={tp} pp={pp} but this {subject} is "
            f"for tp={topology.tensor} pp={topology.pipeline}: built for tp={tp} x pp={pp} = "
            f"{world_size(tp, pp)} ranks but this deployment runs world size "
            f"{topology.world_size} (MPI would abort with 'mpiSize == tp * pp')",
        )
    mapping = engine_mapping(engine_dir)
    if (mapping.tp, mapping.pp) != (tp, pp):
        raise Failure(
            EXIT_MISMATCH,
            f"{engine_dir}/config.json says tp={mapping.tp} pp={mapping.pp} but artifact.json "
            f"says tp={tp} pp={pp}: the engine directory was changed after the build",
        )
    built = artifact.get("trtllmVersion")
    if version and not version_check_skipped() and not (built and same_version(built, version)):
        raise Failure(
            EXIT_VERSION,
            f"the engine in {engine_dir} was built with TensorRT-LLM {built} but {against} "
            f"{version}: an engine only loads under the version that built it (serve with the "
            "build's image, or let the operator rebuild for this one)",
        )
    return artifact
