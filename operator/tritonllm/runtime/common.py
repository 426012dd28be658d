"""What `build` and `launch` share: exit codes, progress lines, plans, child processes, probes.

Exit codes are distinct per failure class so that a Job's podFailurePolicy (and a human reading
`kubectl get pod`) can tell a retryable failure (a tool crashed, the network broke) from one that no
retry can fix (bad credentials, an architecture without a converter, a version mismatch). The last
error line also goes to /dev/termination-log, which the operator copies into the CR's conditions.

The probes (TensorRT-LLM version, visible GPUs, GPU product) ask the image itself and never import
TensorRT-LLM (its import initialises CUDA and takes seconds): the version comes from the installed
package metadata, the GPUs from CUDA_VISIBLE_DEVICES or nvidia-smi.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from tritonllm.api.topology import Topology, world_size

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
}

TERMINATION_LOG = Path("/dev/termination-log")
# Test and emergency override: do not compare TensorRT-LLM versions (engine vs image vs plan).
ENV_SKIP_VERSION_CHECK = "TRITONLLM_SKIP_VERSION_CHECK"
ENV_GPU_PRODUCT = "TRITONLLM_GPU_PRODUCT"

ENOSPC_PATTERNS = ("No space left on device", "ENOSPC", "Disk quota exceeded")


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


# --- plans and files -------------------------------------------------------------------------


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


# --- child processes ----------------------------------------------------------------------------


@dataclasses.dataclass
class ChildResult:
    returncode: int
    # Last output lines (only when captured), to classify failures such as ENOSPC.
    tail: list[str]
    signalled: int | None = None


def local_mpi_ranks(mpirun_pid: int) -> list[int]:
    """The ranks an mpirun started on this host: its direct children with an MPI rank
    (OMPI_COMM_WORLD_RANK or PMIX_RANK) in their environment. Not its ssh/orted helpers."""
    ranks = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces or parens.
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if any(v.startswith((b"OMPI_COMM_WORLD_RANK=", b"PMIX_RANK=")) for v in environ):
            ranks.append(int(entry.name))
    return sorted(ranks)


@contextlib.contextmanager
def forward_signals(
    proc: subprocess.Popen[Any],
    received: list[int],
    targets: Callable[[int], list[int]] | None = None,
) -> Iterator[None]:
    """While active, SIGTERM/SIGINT to us go to `proc` (a graceful drain), recorded in received.

    With `targets`, the first signal goes to the processes targets(proc.pid) names instead (when
    it names any), and a repeated one to `proc` itself.
    """

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if proc.poll() is not None:
            return
        pids = targets(proc.pid) if targets is not None and len(received) == 1 else []
        for pid in pids or [proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_child(
    argv: Sequence[str],
    *,
    capture: bool = False,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    signal_targets: Callable[[int], list[int]] | None = None,
) -> ChildResult:
    """Run a command in the foreground, forwarding SIGTERM/SIGINT to it (see forward_signals
    for signal_targets).

    With capture, its output is passed through line by line and the last lines are kept.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.STDOUT if capture else None,
            text=capture,
            errors="replace" if capture else None,
        )
    except FileNotFoundError as exc:
        raise Failure(EXIT_NOT_FOUND, f"{argv[0]}: command not found in this image") from exc
    tail: deque[str] = deque(maxlen=200)
    received: list[int] = []
    with forward_signals(proc, received, signal_targets):
        if capture and proc.stdout is not None:
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                tail.append(line.rstrip("\n"))
        code = proc.wait()
    return ChildResult(code, list(tail), received[0] if received else None)


def mentions_enospc(lines: Sequence[str]) -> bool:
    return any(p in line for line in lines for p in ENOSPC_PATTERNS)


# --- probes of the image and the node -----------------------------------------------------------


def trtllm_version() -> str | None:
    """The TensorRT-LLM version installed in this image (package metadata; no CUDA init)."""
    from importlib import metadata

    for name in ("tensorrt_llm", "tensorrt-llm", "tensorrt_llm_cu12"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(name)
    # Source installs without metadata: ask the module (slow, prints banners; last line wins).
    try:
        out = subprocess.run(
            ["python3", "-c", "import tensorrt_llm; print(tensorrt_llm.__version__)"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[-1].strip() if out.returncode == 0 and lines else None


def version_key(version: str) -> tuple[int, ...]:
    """Numeric release of a version, trailing zeros dropped: '0.13.0' == '0.13' == 'v0.13.0rc'."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    nums = [int(p) for p in m.group(1).split(".")] if m else []
    while nums and nums[-1] == 0:
        nums.pop()
    return tuple(nums)


def same_version(a: str, b: str) -> bool:
    return version_key(a) == version_key(b)


def version_check_skipped() -> bool:
    return os.environ.get(ENV_SKIP_VERSION_CHECK, "") == "1"


def _nvidia_smi(*args: str) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def visible_gpus() -> tuple[int, str]:
    """(count, how it was found). CUDA_VISIBLE_DEVICES wins, then `nvidia-smi -L`."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = [d for d in cvd.split(",") if d.strip() and d.strip() not in ("-1", "NoDevFiles")]
        return len(ids), f"CUDA_VISIBLE_DEVICES={cvd!r}"
    lines = _nvidia_smi("-L")
    if lines is not None:
        return sum(1 for line in lines if line.startswith("GPU ")), "nvidia-smi -L"
    return 0, "no CUDA_VISIBLE_DEVICES and no nvidia-smi in this container"


def require_gpus(needed: int, what: str) -> None:
    count, how = visible_gpus()
    if count < needed:
        raise Failure(
            EXIT_GPUS,
            f"{what} needs {needed} visible GPU(s) but this container sees {count} ({how}): "
            "check the pod's nvidia.com/gpu request and the node's device plugin",
        )


def gpu_product() -> str | None:
    """The GPU model as nvidia-smi names it (e.g. 'NVIDIA H100 80GB HBM3')."""
    override = os.environ.get(ENV_GPU_PRODUCT)
    if override:
        return override
    lines = _nvidia_smi("--query-gpu=name", "--format=csv,noheader")
    return lines[0] if lines else None


def product_label(name: str) -> str:
    """nvidia-smi's GPU name as GPU feature discovery writes it into nvidia.com/gpu.product."""
    return re.sub(r"\s+", "-", name.strip())


# --- engine directories -------------------------------------------------------------------------


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
