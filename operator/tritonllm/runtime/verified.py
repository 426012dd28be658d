"""Verify an engine once per artifact digest, not once per serving pod.

Every serving pod refuses an engine whose files are not those its build recorded in artifact.json
(engine_files.verify_engine_files: every file read and hashed, about 20 s per 5 GB). The files do
not change between pod starts, so the hash is done once per engine and remembered in a marker:

    <engineDir>/.tritonllm/verified-<sha256 of artifact.json>.json
    {"artifactDigest": "…", "verifiedAt": "…", "by": "build",
     "files": {"rank0.engine": [size, mtime_ns, ctime_ns, inode], …}}

Who writes it: the build Job, the only pod that mounts the engine directory writable. It writes
it right after it hashed the files for artifact.json (or, rerun over a complete engine, after it
verified them in full), with each file's fingerprint taken before and after the hash (no marker if
they differ: a file changed while it was read). Serving pods mount the store read-only and only
read it.

What a serving pod checks instead of the hash: the marker of exactly this artifact.json (its name
and its `artifactDigest` are the sha256 of the bytes the pod read), the engine directory holds
exactly the files artifact.json lists, and each file's fingerprint (size, mtime, ctime, inode) is
the recorded one. Any difference, or no marker, and it hashes every file as before. A file's
content cannot change without its ctime changing, and no file API sets ctime back (it is the
kernel's or the file server's clock at the change), so a file altered after the verification is
hashed and refused. Whoever can write the engine directory can also write a new marker: exactly
as they could always rewrite artifact.json's checksums; docs/hardening.md has the trade-off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from .engine_files import STATE_DIR, engine_file_paths, verify_engine_files
from .files import digest, read_json, write_json_atomic
from .report import EXIT_TAMPERED, TERMINATION_LOG, Failure

MARKER_PREFIX = "verified-"
MARKER_SCHEMA = 1

Fingerprint = list[int]  # [size, mtime_ns, ctime_ns, inode]


def marker_path(engine_dir: Path, artifact_digest: str) -> Path:
    return engine_dir / STATE_DIR / f"{MARKER_PREFIX}{artifact_digest}.json"


def fingerprint(path: Path) -> Fingerprint:
    """What changes whenever a file's content does: size, mtime, ctime (which no file API can set
    back) and inode (a replaced file). stat follows a symbolic link, as the hash does."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def fingerprints(engine_dir: Path, names: list[str]) -> dict[str, Fingerprint]:
    return {name: fingerprint(engine_dir / name) for name in names}


@dataclasses.dataclass(frozen=True)
class Verified:
    """How an engine's files were found to be the ones its artifact.json records."""

    files: int
    bytes: int
    seconds: float
    digest: str  # sha256 of artifact.json
    hashed: bool  # False: an earlier verification of this digest still holds, no file was read
    why: str  # why every file was hashed, or when the earlier verification was made
    stable: dict[str, Fingerprint] | None = None  # hashed: fingerprints unchanged while hashing

    @property
    def message(self) -> str:
        size = f"{self.bytes / 2**30:.2f} GiB"
        if self.hashed:
            return (f"engine verified: {self.files} files, {size} in {self.seconds:.1f} s "
                    f"(full hash: {self.why})")
        return (f"engine verified earlier (digest {self.digest[:16]}, {self.why}), skipped full "
                f"hash of {self.files} files, {size} in {self.seconds:.2f} s")


def verify_engine(engine_dir: Path, artifact: dict[str, Any], artifact_digest: str) -> Verified:
    """Refuse an engine whose files are not those artifact.json records
    (engine_files.verify_engine_files), unless the marker of this artifact digest shows they have
    not changed since they were last hashed."""
    started = time.monotonic()
    recorded = artifact.get("files")
    names = sorted(recorded) if isinstance(recorded, dict) else []
    size = sum(v["size"] for v in (recorded or {}).values()
               if isinstance(v, dict) and isinstance(v.get("size"), int))
    earlier, why = _earlier(engine_dir, artifact, artifact_digest)
    if earlier:
        return Verified(len(names), size, time.monotonic() - started, artifact_digest,
                        hashed=False, why=why)
    before = _fingerprints_or_none(engine_dir, names)
    verify_engine_files(engine_dir, artifact)  # raises when a file differs
    after = _fingerprints_or_none(engine_dir, names)
    return Verified(len(names), size, time.monotonic() - started, artifact_digest, hashed=True,
                    why=why, stable=after if before is not None and before == after else None)


def _fingerprints_or_none(engine_dir: Path, names: list[str]) -> dict[str, Fingerprint] | None:
    try:
        return fingerprints(engine_dir, names)
    except OSError:
        return None


def _earlier(engine_dir: Path, artifact: dict[str, Any], artifact_digest: str) -> tuple[bool, str]:
    """(the marker of this digest holds for every file?, why not / when it was written)."""
    try:
        marker = read_json(marker_path(engine_dir, artifact_digest))
    except (Failure, OSError):
        return False, "its verification marker is unreadable"
    if marker is None:
        return False, "no earlier verification of this artifact.json"
    recorded = artifact.get("files")
    marked = marker.get("files")
    if (
        marker.get("artifactDigest") != artifact_digest
        or not isinstance(recorded, dict)
        or not isinstance(marked, dict)
        or set(marked) != set(recorded)
    ):
        return False, "its verification marker is not this artifact's"
    if set(engine_file_paths(engine_dir)) != set(recorded):
        return False, "the engine's files are not those artifact.json lists"
    for name in sorted(recorded):
        want = recorded[name] if isinstance(recorded[name], dict) else {}
        try:
            now = fingerprint(engine_dir / name)
        except OSError:
            return False, f"{name} cannot be read"
        if now != marked[name] or now[0] != want.get("size"):
            return False, f"{name} changed since it was verified"
    return True, f"at {marker.get('verifiedAt')} by the {marker.get('by')}"


def write_marker(
    engine_dir: Path, artifact_digest: str, files: dict[str, Fingerprint], *, by: str
) -> Path:
    """Record that the files with these fingerprints were hashed and matched this artifact
    digest (the build Job only: serving pods cannot write the store). Markers of other digests
    (an earlier artifact.json in this directory) are removed."""
    path = marker_path(engine_dir, artifact_digest)
    write_json_atomic(path, {
        "schema": MARKER_SCHEMA,
        "artifactDigest": artifact_digest,
        "verifiedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "by": by,
        "files": files,
    })
    for old in path.parent.glob(f"{MARKER_PREFIX}*.json"):
        if old != path:
            with contextlib.suppress(OSError):
                os.unlink(old)
    return path


# --- the digest anchored outside the store --------------------------------------------------
#
# artifact.json and the verification marker live on the store, so whoever can write the engine
# directory can rewrite them with the files. The build therefore also reports two digests to
# the operator, as its container's termination message (a pod cannot rewrite another pod's
# status): the engine digest, over the name, size and sha256 of every file artifact.json lists,
# and the fingerprint digest, over the files' fingerprints when they were hashed. The operator
# records them in the TritonLLMEngine's status and renders them into the launch plan (a
# ConfigMap); a serving pod refuses an artifact.json whose engine digest is not the reported
# one, and skips the full hash only when the files' fingerprints give the reported digest (the
# marker on the store is not consulted then).

ENV_REPORT = "TRITONLLM_TERMINATION_LOG"  # where the report goes (the kubelet's default path)
DIGEST_PREFIX = "sha256:"


def engine_digest(artifact: dict[str, Any]) -> str:
    """The digest of what artifact.json says the engine is: every file's name, size, sha256."""
    return DIGEST_PREFIX + digest(artifact.get("files") or {})


def fingerprint_digest(files: dict[str, Fingerprint]) -> str:
    return DIGEST_PREFIX + digest(files)


def report_engine(
    artifact: dict[str, Any], files: dict[str, Fingerprint] | None
) -> dict[str, str]:
    """Leave the engine's digests as the build container's termination message (JSON, about
    160 bytes: the kubelet keeps up to 4 KiB), for the operator to record. `files`: the
    fingerprints the hash was made at (None when a file changed meanwhile: no fingerprint
    digest, so every serving pod hashes in full)."""
    report = {"engineDigest": engine_digest(artifact)}
    if files is not None:
        report["fingerprintDigest"] = fingerprint_digest(files)
    path = Path(os.environ.get(ENV_REPORT) or TERMINATION_LOG)
    if path.exists():
        with contextlib.suppress(OSError):
            path.write_text(json.dumps(report, sort_keys=True) + "\n")
    return report


def check_reported(engine_dir: Path, artifact: dict[str, Any], expected: dict[str, Any]) -> None:
    """Refuse an artifact.json that is not the one the build reported to the operator
    (`expected`: the launch plan's engineDigest)."""
    found, want = engine_digest(artifact), str(expected.get("engine") or "")
    if found != want:
        raise Failure(
            EXIT_TAMPERED,
            f"engine digest mismatch: the engine in {engine_dir} is not the one its build "
            f"reported to the operator (artifact.json lists files of digest {found[:23]}, the "
            f"build reported {want[:23]}, anchored in the deployment's status.engineAnchor "
            f"for engine {artifact.get('engineKey')}): the store was changed after the "
            "build; refusing to serve it; delete the TritonLLMEngine (kubectl delete tllme) and "
            f"the directory {engine_dir}, so that the operator builds it again, then accept the "
            "digest the build reports (the deployment's Degraded condition names it)",
        )


def verify_anchored(
    engine_dir: Path, artifact: dict[str, Any], artifact_digest: str, expected: dict[str, Any]
) -> Verified:
    """check_reported, then the files as verify_engine checks them, except that the full hash
    is skipped only when the files' fingerprints give the digest the build reported (the
    marker on the store is not consulted)."""
    started = time.monotonic()
    check_reported(engine_dir, artifact, expected)
    recorded = artifact.get("files")
    names = sorted(recorded) if isinstance(recorded, dict) else []
    size = sum(v["size"] for v in (recorded or {}).values()
               if isinstance(v, dict) and isinstance(v.get("size"), int))
    now = _fingerprints_or_none(engine_dir, names)
    same_files = set(engine_file_paths(engine_dir)) == set(names)
    anchored = expected.get("fingerprints")
    if same_files and now is not None and anchored and fingerprint_digest(now) == anchored:
        return Verified(len(names), size, time.monotonic() - started, artifact_digest,
                        hashed=False, why="fingerprints as the build reported them")
    verify_engine_files(engine_dir, artifact)  # raises when a file differs
    return Verified(len(names), size, time.monotonic() - started, artifact_digest, hashed=True,
                    why="the files' fingerprints are not those the build reported")
