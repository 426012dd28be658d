"""Hugging Face Hub downloads for the build and download Jobs.

huggingface_hub ships with TensorRT-LLM (through transformers) in the Triton images, so it is
imported lazily here and nowhere else; the operator image never needs it. Before downloading we
ask the Hub for the file list, which does three things: credentials are checked before any byte
moves (401/403 become a message naming spec.model.credentials), the download size is known so a
too-small store fails at once instead of after an hour, and only what TensorRT-LLM's converters
read is fetched. Model repositories often carry the same weights several times (PyTorch .bin and
.safetensors, TensorFlow, Flax, ONNX, Meta's original/ checkpoint); a GPT-2 medium snapshot is
four times the size of what convert_checkpoint.py reads.

snapshot_download resumes partial downloads by itself, so a rerun after a crash continues.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .files import check_free_space
from .report import EXIT_AUTH, EXIT_NOT_FOUND, Failure, log

# Weight formats: only safetensors (preferred) or PyTorch pickles are read by the converters.
SAFETENSORS = (".safetensors",)
PYTORCH = (".bin", ".pt", ".pth")
OTHER_WEIGHTS = (".h5", ".msgpack", ".ckpt", ".ot", ".tflite", ".onnx", ".onnx_data", ".gguf")
# Subdirectories holding alternative formats of the same model.
SKIPPED_DIRS = ("original/", "onnx/", "coreml/", "openvino/", "flax/", "tf/")


def select_files(files: list[str], *, tokenizer_only: bool) -> list[str]:
    """The files to fetch: configs, tokenizer and one weight format (none for a tokenizer)."""
    kept = [f for f in files if not f.startswith(SKIPPED_DIRS)]
    weights = SAFETENSORS + PYTORCH + OTHER_WEIGHTS
    if tokenizer_only:
        return [f for f in kept if not f.endswith(weights)]
    has_safetensors = any(f.endswith(SAFETENSORS) for f in kept)
    dropped = (PYTORCH if has_safetensors else ()) + OTHER_WEIGHTS
    return [f for f in kept if not f.endswith(dropped)]


def _token(step: dict[str, Any]) -> str | None:
    """The token from the file the build pod mounts from spec.model.credentials' Secret."""
    path = step.get("tokenFile")
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise Failure(
            EXIT_AUTH,
            f"cannot read the Hugging Face token file {path} ({exc.strerror}): the Secret named "
            "by spec.model.credentials must hold a Hugging Face token under its key",
        ) from exc
    if not token:
        raise Failure(
            EXIT_AUTH,
            f"the Hugging Face token file {path} is empty: the Secret named by "
            "spec.model.credentials must hold a Hugging Face token under its key",
        )
    return token


def _classify(exc: Exception, step: dict[str, Any]) -> Failure | None:
    """Hub errors that no retry fixes, as Failures; None for the rest (network, 5xx)."""
    name = type(exc).__name__
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    repo, revision = step["repo"], step.get("revision", "main")
    if name == "RevisionNotFoundError":
        return Failure(
            EXIT_NOT_FOUND,
            f"revision {revision!r} of hf://{repo} does not exist: check spec.model.revision",
        )
    if status in (401, 403) or name in ("GatedRepoError", "RepositoryNotFoundError"):
        how = (
            "check the token in the Secret named by spec.model.credentials and that its account "
            "has accepted the model's license"
            if step.get("tokenFile")
            else "the model is gated or private and no token was given: set "
            "spec.model.credentials to a Secret holding a Hugging Face token"
        )
        code = f" (HTTP {status})" if status else ""
        return Failure(
            EXIT_AUTH,
            f"the Hugging Face Hub refused access to hf://{repo}{code}: {how} "
            "(a misspelled repository name is answered the same way)",
        )
    return None


def download(step: dict[str, Any]) -> dict[str, Any]:
    """Fetch `repo` at `revision` into `localDir`; returns what was fetched (for artifact.json)."""
    try:
        import huggingface_hub
    except ImportError as exc:
        raise Failure(
            EXIT_NOT_FOUND,
            "huggingface_hub is not installed in this image: use a pvc:// model source, or an "
            "image that ships TensorRT-LLM with its Python dependencies",
        ) from exc
    repo, revision, local_dir = step["repo"], step.get("revision", "main"), Path(step["localDir"])
    token = _token(step)
    try:
        info = huggingface_hub.HfApi().model_info(
            repo, revision=revision, files_metadata=True, token=token
        )
        sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
        files = select_files(sorted(sizes), tokenizer_only=step["name"] == "download-tokenizer")
        total = sum(sizes[f] for f in files)
        present = sum(
            (local_dir / f).stat().st_size for f in files if (local_dir / f).is_file()
        )
        log("build", "download-plan", step=step["name"], repo=repo, revision=revision,
            files=len(files), bytes=total, present=present)
        check_free_space(local_dir, total - present, f"downloading hf://{repo}")
        huggingface_hub.snapshot_download(
            repo_id=repo,
            revision=revision,
            local_dir=str(local_dir),
            token=token,
            allow_patterns=files,
        )
    except Failure:
        raise
    except Exception as exc:
        failure = _classify(exc, step)
        if failure is None:
            raise
        raise failure from exc
    return {"repo": repo, "revision": revision, "sha": getattr(info, "sha", None),
            "files": len(files), "bytes": total}
