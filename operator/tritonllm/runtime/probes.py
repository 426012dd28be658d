"""Probes of the image and the node: the TensorRT-LLM version, the visible GPUs, the GPU product.

They ask the image itself and never import TensorRT-LLM (its import initialises CUDA and takes
seconds): the version comes from the installed package metadata, the GPUs from
CUDA_VISIBLE_DEVICES or nvidia-smi.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess

from .report import EXIT_GPUS, Failure

# Test and emergency override: do not compare TensorRT-LLM versions (engine vs image vs plan).
ENV_SKIP_VERSION_CHECK = "TRITONLLM_SKIP_VERSION_CHECK"
ENV_GPU_PRODUCT = "TRITONLLM_GPU_PRODUCT"



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
