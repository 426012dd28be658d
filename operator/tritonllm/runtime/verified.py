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
import os
import time
from pathlib import Path
from typing import Any

from .engine_files import STATE_DIR, engine_file_paths, verify_engine_files
from .files import read_json, write_json_atomic
from .report import Failure

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
