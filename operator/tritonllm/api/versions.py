"""Which TensorRT-LLM version an NGC Triton image carries, and what each version supports.

An engine loads only under the TensorRT-LLM version that built it, and the model templates,
launcher flags and parameter names changed between versions; everything version-dependent is keyed
on the version found here (or on spec.trtllmVersion, which overrides it). Source: the NGC
compatibility matrix in shared/reference/tensorrt-llm-triton.md, section 5.1.
"""

from __future__ import annotations

import re
from functools import total_ordering
from typing import Final

# NGC `tritonserver:<yy.mm>-trtllm-python-py3` tag -> TensorRT-LLM version.
NGC_TRTLLM: Final[dict[str, str]] = {
    "24.04": "0.9.0",
    "24.05": "0.9.0",
    "24.06": "0.10.0",
    "24.07": "0.11.0",
    "24.08": "0.12.0",
    "24.09": "0.13.0",
    "24.10": "0.14.0",
    "24.11": "0.15.0",
    "24.12": "0.16.0",
    "25.01": "0.17.0",
    "25.02": "0.17.0.post1",
    "25.03": "0.18.0",
    "25.04": "0.18.2",
    "25.05": "0.19.0",
    "25.06": "0.20.0",
    "25.07": "0.20.0",
    "25.08": "0.21.0",
    "25.09": "1.0.0",
    "25.10": "1.0.0",
    "25.11": "1.0.3.2510",
    "25.12": "1.1.0",
    "26.01": "1.1.0",
    "26.02": "1.1.0",
    "26.03": "1.2.0",
    "26.04": "1.2.1",
    "26.05": "1.2.1",
    "26.06": "1.2.1",
    "26.07": "1.2.1",
}

_NGC_TAG = re.compile(r"^(\d\d\.\d\d)-trtllm-python-py3$")


@total_ordering
class TrtllmVersion:
    """A TensorRT-LLM version, compared on (major, minor, patch); suffixes are kept for display."""

    __slots__ = ("major", "minor", "patch", "text")

    def __init__(self, text: str) -> None:
        m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text)
        if not m:
            raise ValueError(f"not a TensorRT-LLM version: {text!r}")
        self.major, self.minor = int(m.group(1)), int(m.group(2))
        self.patch = int(m.group(3) or 0)
        self.text = text

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrtllmVersion) and self.key == other.key

    def __lt__(self, other: TrtllmVersion) -> bool:
        return self.key < other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __ge__(self, other: object) -> bool:  # total_ordering needs a consistent >=
        if isinstance(other, str):
            other = TrtllmVersion(other)
        assert isinstance(other, TrtllmVersion)
        return self.key >= other.key

    def at_least(self, text: str) -> bool:
        return self.key >= TrtllmVersion(text).key

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"TrtllmVersion({self.text!r})"


# Oldest version we render templates for; the engine path exists up to the newest NGC release
# listed (TensorRT-LLM main removed it in July 2026: PR #15907 deleted Triton's C++
# inflight_batcher_llm backend and its templates, #15918 the TensorRT Python modules); llmapi
# needs 0.19.
OLDEST_SUPPORTED: Final = TrtllmVersion("0.9.0")
NEWEST_ENGINE_PATH: Final = TrtllmVersion("1.2.1")
NEWEST_ENGINE_RELEASE: Final = "26.07"  # the last NGC Triton release with NEWEST_ENGINE_PATH
LLMAPI_SINCE: Final = TrtllmVersion("0.19.0")
# LLM() takes enable_iter_perf_stats (the llmapi model's metrics) from this version on.
LLMAPI_ITER_STATS_SINCE: Final = TrtllmVersion("0.21.0")

ENGINE_PATH_REMOVED: Final = (
    f"TensorRT-LLM after {NEWEST_ENGINE_PATH} (NGC tritonserver after {NEWEST_ENGINE_RELEASE}) has "
    "no engine path: upstream removed trtllm-build and Triton's inflight_batcher_llm backend "
    "(TensorRT-LLM PR #15907, July 2026)"
)

# The same two tests as has_engine_path, for CEL at admission (RE2, unanchored `matches`):
# a version after 1.2.1, and an NGC Triton TensorRT-LLM tag after 26.07. tests/unit check that
# they agree with the Python functions.
NEWER_THAN_ENGINE_PATH_RE: Final = (
    r"^([2-9]|[1-9][0-9]+)\.|^1\.([3-9]|[1-9][0-9]+)([.]|$)|^1\.2\.([2-9]|[1-9][0-9]+)"
)
NGC_TAG_AFTER_ENGINE_PATH_RE: Final = (
    r":((2[7-9]|[3-9][0-9])\.[0-9][0-9]|26\.(0[89]|1[0-2]))-trtllm-python-py3(@|$)"
)


def image_tag(image: str) -> str | None:
    """The tag of an image reference (None when it has only a digest or nothing)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def version_for_image(image: str) -> TrtllmVersion | None:
    """TensorRT-LLM version of an NGC Triton TRT-LLM image, from its tag; None if unknown."""
    tag = image_tag(image)
    if tag is None:
        return None
    m = _NGC_TAG.match(tag)
    if not m or m.group(1) not in NGC_TRTLLM:
        return None
    return TrtllmVersion(NGC_TRTLLM[m.group(1)])


def ngc_release(image: str) -> str | None:
    """The NGC release (yy.mm) of an image whose tag is `<yy.mm>-trtllm-python-py3`, known to our
    table or not; None for any other tag."""
    tag = image_tag(image)
    m = _NGC_TAG.match(tag) if tag else None
    return m.group(1) if m else None


def has_engine_path(image: str, trtllm_version: str | None) -> bool | None:
    """Whether the image's TensorRT-LLM still has the engine path (trtllm-build and the
    inflight_batcher_llm backend): from spec.trtllmVersion when set, else from an NGC tag (one
    newer than our table is known to be after the removal); None when it cannot be told."""
    if trtllm_version:
        return not TrtllmVersion(trtllm_version) > NEWEST_ENGINE_PATH
    release = ngc_release(image)
    return None if release is None else release <= NEWEST_ENGINE_RELEASE


def default_runtime(image: str, trtllm_version: str | None) -> str:
    """The runtime an empty spec.runtime resolves to: llmapi where the engine path is gone,
    engine otherwise (what every deployment resolved to before the choice existed, so an
    operator upgrade changes no running deployment)."""
    return "llmapi" if has_engine_path(image, trtllm_version) is False else "engine"
