"""`tritonllm build --plan FILE`: execute a build plan (or a model-repository plan) step by step.

Build plans (rendered by tritonllm.triton.build) list download, convert or quantize, and
trtllm-build. Every completed step leaves a marker, <state>/<step>.done, holding the hash of the
step's definition and its timing; a rerun (the Job's next pod after a crash or eviction) skips steps
whose marker matches and whose output is still there, and redoes the rest. artifact.json is written
last, atomically, and only after the engine's own config.json confirms tp and pp: its presence with
the plan's engine key means "complete", and a complete engine is never rebuilt.

Checks run before the expensive work: the image's TensorRT-LLM version against the plan (the engine
key and the flag dialect depend on it), the visible GPUs against trtllm-build's --workers (ranks are
built in turn on that many GPUs), and free space on the store before each step that writes to it.

The state directory is the plan's stateDir, else <engineDir>/.tritonllm (engine builds) or
<weightsDir>/.tritonllm (download-only plans of older operators). Model-repository plans (a
single `repository` step) are handled by tritonllm.runtime.repository.

llmapi plans of kind `llmapi-checkpoint` download, then run ModelOpt's hf_ptq.py into the key's
directory (engineDir): there artifact.json records a pre-quantized Hugging Face checkpoint, once
its hf_quant_config.json declares the quantization the plan asked for, with the checksums of its
files, the same record, digest report and verification marker as an engine's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from . import hub, repository
from .children import mentions_enospc, run_child
from .engine_files import (
    ARTIFACT,
    STATE_DIR,
    engine_checksums,
    engine_file_paths,
    engine_mapping,
    read_artifact,
)
from .files import check_free_space, digest, dir_size, load_plan, read_json, write_json_atomic
from .probes import (
    gpu_product,
    product_label,
    require_gpus,
    same_version,
    trtllm_version,
    version_check_skipped,
    visible_gpus,
)
from .report import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_MISMATCH,
    EXIT_NO_CONVERTER,
    EXIT_NO_SPACE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_VERSION,
    Failure,
    log,
    run_main,
)
from .verified import fingerprints, report_engine, verify_engine, write_marker

ARTIFACT_SCHEMA = 2  # 2: `files`, the sha256 and size of every engine file
LLMAPI_CHECKPOINT = "llmapi-checkpoint"  # tritonllm.triton.build.LLMAPI_CHECKPOINT
# A directory of ModelOpt's examples tree (holding llm_ptq/hf_ptq.py), tried first.
ENV_MODELOPT_EXAMPLES = "TRITONLLM_MODELOPT_EXAMPLES"
# What ModelOpt's unified Hugging Face export writes beside config.json (ModelOpt 0.37.0,
# modelopt/torch/export/unified_export_hf.py): the quantization TensorRT-LLM reads.
HF_QUANT_CONFIG = "hf_quant_config.json"
# Model-directory files that must exist for a local (pvc://) source to count as present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def main(plan_path: str) -> int:
    return run_main("build", lambda: execute(load_plan(plan_path)))


def execute(plan: dict[str, Any]) -> int:
    steps = plan.get("steps") or []
    if steps and all(s.get("name") == "repository" for s in steps):
        for step in steps:
            repository.run(step)
        return EXIT_OK
    return Builder(plan).run()


class Builder:
    """One build plan's execution; its fields are what artifact.json reports."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.key: str = plan["engineKey"]
        self.engine_dir = Path(plan["engineDir"]) if plan.get("engineDir") else None
        self.weights_dir = Path(plan["weightsDir"])
        state = plan.get("stateDir")
        self.state = Path(state) if state else (self.engine_dir or self.weights_dir) / STATE_DIR
        self.records: list[dict[str, Any]] = []
        self.trtllm_version: str | None = None

    # --- the whole plan ----------------------------------------------------------------------

    def run(self) -> int:
        started = time.monotonic()
        if self.engine_dir is not None and self._complete():
            return EXIT_OK
        log("build", "plan", key=self.key, steps=[s["name"] for s in self.plan["steps"]],
            state=str(self.state))
        if self.engine_dir is not None:
            self._preflight()
        for step in self.plan["steps"]:
            self._run_step(step)
        if self.plan.get("kind") == LLMAPI_CHECKPOINT:
            self._write_checkpoint_artifact(time.monotonic() - started)
        elif self.engine_dir is not None:
            self._write_artifact(time.monotonic() - started)
        log("build", "done", key=self.key, seconds=round(time.monotonic() - started, 1))
        return EXIT_OK

    def _complete(self) -> bool:
        assert self.engine_dir is not None
        if not (self.engine_dir / ARTIFACT).exists():
            return False
        artifact, artifact_digest = read_artifact(self.engine_dir)
        if artifact.get("engineKey") != self.key:
            raise Failure(
                EXIT_MISMATCH,
                f"{self.engine_dir / ARTIFACT} belongs to engine {artifact.get('engineKey')!r}, "
                f"not {self.key!r}: the store holds a foreign engine at this path; remove it",
            )
        verified = verify_engine(self.engine_dir, artifact, artifact_digest)
        if verified.stable is not None:  # hashed in full (an engine built before the marker)
            write_marker(self.engine_dir, artifact_digest, verified.stable, by="build")
        # Not hashed: the marker showed the fingerprints unchanged since the hash.
        stable = verified.stable if verified.hashed else fingerprints(
            self.engine_dir, sorted(artifact.get("files") or {}))
        report_engine(artifact, stable)
        log("build", "cached", key=self.key, engine=str(self.engine_dir),
            trtllmVersion=artifact.get("trtllmVersion"), message=verified.message)
        return True

    def _preflight(self) -> None:
        """Version and GPU checks, before anything is downloaded."""
        planned = self.plan.get("trtllmVersion")
        found = trtllm_version()
        self.trtllm_version = found or planned
        if not version_check_skipped():
            if found is None:
                raise Failure(
                    EXIT_NOT_FOUND,
                    "TensorRT-LLM is not installed in this image (no tensorrt_llm package): "
                    "spec.image must be a Triton TensorRT-LLM image (…-trtllm-python-py3)",
                )
            if planned and not same_version(found, planned):
                raise Failure(
                    EXIT_VERSION,
                    f"the image has TensorRT-LLM {found} but the plan was rendered for {planned} "
                    "(from the image tag or spec.trtllmVersion): set spec.trtllmVersion to "
                    f"{found} so that flags, templates and the engine key match the image",
                )
        build = next((s for s in self.plan["steps"] if s["name"] == "build"), None)
        if build is not None:
            require_gpus(_workers(build["argv"]), "trtllm-build --workers")
        if self.plan.get("kind") == LLMAPI_CHECKPOINT:
            require_gpus(1, "ModelOpt's calibration (hf_ptq.py)")

    # --- steps -----------------------------------------------------------------------------------

    def _run_step(self, step: dict[str, Any]) -> None:
        name = step["name"]
        if name.startswith("download") and step.get("kind") == "local":
            self._check_local(step)
            return
        marker = self.state / f"{name}.done"
        want = digest({"engineKey": self.key, "step": step})
        done = read_json(marker)
        if done is not None and done.get("hash") == want and self._output_present(step):
            log("build", "skip", step=name, reason="done in an earlier run",
                seconds=done.get("seconds"))
            self.records.append({**done["record"], "skipped": True})
            return
        log("build", "start", step=name)
        t0 = time.monotonic()
        if name.startswith("download"):
            record: dict[str, Any] = {"name": name, "download": hub.download(step)}
        elif name in ("convert", "quantize", "build"):
            record = {"name": name, "argv": self._run_tool(step)}
        else:
            raise Failure(EXIT_INVALID, f"unknown build step {name!r}")
        seconds = round(time.monotonic() - t0, 1)
        record["seconds"] = seconds
        write_json_atomic(marker, {"hash": want, "seconds": seconds, "record": record})
        self.records.append(record)
        log("build", "end", step=name, seconds=seconds)

    def _check_local(self, step: dict[str, Any]) -> None:
        path = Path(step["localDir"])
        needs = ("config.json",) if step["name"] == "download" else TOKENIZER_FILES
        if not path.is_dir() or not any((path / f).is_file() for f in needs):
            what = "model" if step["name"] == "download" else "tokenizer"
            raise Failure(
                EXIT_NOT_FOUND,
                f"{what} directory {path} does not exist or has none of {', '.join(needs)}: "
                f"check the pvc:// path in spec.model",
            )
        log("build", "skip", step=step["name"], reason="local source present", path=str(path))
        self.records.append({"name": step["name"], "local": str(path), "seconds": 0.0})

    def _output_present(self, step: dict[str, Any]) -> bool:
        name = step["name"]
        if name.startswith("download"):
            out = Path(step["localDir"])
        elif name in ("convert", "quantize"):
            out = Path(self.plan["checkpointDir"])
        else:
            out = Path(self.plan["engineDir"])
        return (out / "config.json").is_file() if name != "download-tokenizer" else out.is_dir()

    def _run_tool(self, step: dict[str, Any]) -> list[str]:
        argv = self._resolve(step)
        checkpoint = Path(self.plan["checkpointDir"])
        if step["name"] == "build":
            assert self.engine_dir is not None
            needed = dir_size(checkpoint) - dir_size(self.engine_dir)
            check_free_space(self.engine_dir, needed, "trtllm-build (about the checkpoint's size)")
        else:
            needed = dir_size(self.weights_dir) - dir_size(checkpoint)
            check_free_space(checkpoint, needed, f"{step['name']} (about the weights' size)")
        log("build", "exec", step=step["name"], argv=argv)
        result = run_child(argv, capture=True)
        if result.returncode != 0:
            if mentions_enospc(result.tail):
                raise Failure(
                    EXIT_NO_SPACE,
                    f"{step['name']} ran out of disk space (exit {result.returncode}): enlarge the "
                    "model store (spec.storage) or free space on it",
                )
            last = next((line for line in reversed(result.tail) if line.strip()), "")
            raise Failure(
                EXIT_FAILED,
                f"{step['name']} failed with exit code {result.returncode}: {last[-500:]}",
            )
        return argv

    def _resolve(self, step: dict[str, Any]) -> list[str]:
        """The step's argv with {converter} / {examples} replaced by paths in this image."""
        roots = [Path(r) for r in self.plan.get("exampleRoots") or []]
        example_dir = None
        if step["name"] == "convert":
            example_dir = step.get("exampleDir") or self._example_dir(step)
            # Each converter has its own flags: the plan has one argv per converter, and why
            # a converter cannot convert this spec in this image's TensorRT-LLM version.
            why = (step.get("unsupported") or {}).get(example_dir)
            if why:
                raise Failure(
                    EXIT_NO_CONVERTER,
                    f"the model needs {example_dir}/convert_checkpoint.py, which cannot convert "
                    f"this spec: {why}",
                )
        by_dir = step.get("argvByDir") or {}
        argv: list[str] = list(by_dir[example_dir] if example_dir in by_dir else step["argv"])
        if "{converter}" in argv:
            example_dir = example_dir or step.get("exampleDir") or self._example_dir(step)
            candidates = [
                root / p.format(dir=example_dir) for root in roots for p in step["converterPaths"]
            ]
            script = next((c for c in candidates if c.is_file()), None)
            if script is None:
                raise Failure(
                    EXIT_NOT_FOUND,
                    f"no convert_checkpoint.py for {example_dir!r} in this image (looked at "
                    f"{', '.join(map(str, candidates))}): the image lacks TensorRT-LLM's examples "
                    "(newer TensorRT-LLM removed the engine path; use spec.runtime: llmapi)",
                )
            argv = [str(script) if a == "{converter}" else a for a in argv]
        if any("{modelopt}" in a for a in argv):
            argv = _modelopt_argv(step, argv)
        if any("{examples}" in a for a in argv):
            rel = step["script"]
            root = next((r for r in roots if (r / rel).is_file()), None)
            if root is None:
                raise Failure(
                    EXIT_NOT_FOUND,
                    f"{rel} not found under any of {', '.join(map(str, roots))}: the image lacks "
                    "TensorRT-LLM's examples",
                )
            argv = [a.replace("{examples}", str(root)) for a in argv]
        return argv

    def _example_dir(self, step: dict[str, Any]) -> str:
        """architecture auto: map config.json `architectures[0]` through the plan's converters."""
        cfg = read_json(self.weights_dir / "config.json") or {}
        archs = cfg.get("architectures") or []
        arch = archs[0] if archs else cfg.get("model_type", "<none>")
        converters: dict[str, str] = step.get("converters") or {}
        if arch not in converters:
            raise Failure(
                EXIT_NO_CONVERTER,
                f"model architecture {arch!r} ({self.weights_dir}/config.json) has no "
                "TensorRT-LLM converter known to tritonllm (known: "
                f"{', '.join(sorted(converters))}): set spec.model.architecture if it is a "
                "variant of a known one, or use spec.runtime: llmapi",
            )
        return converters[arch]

    # --- the result ------------------------------------------------------------------------------

    def _write_artifact(self, seconds: float) -> None:
        assert self.engine_dir is not None
        mapping = engine_mapping(self.engine_dir)
        tp, pp = int(self.plan["tensorParallel"]), int(self.plan["pipelineParallel"])
        if (mapping.tp, mapping.pp) != (tp, pp):
            raise Failure(
                EXIT_MISMATCH,
                f"the engine in {self.engine_dir} has tp={mapping.tp} pp={mapping.pp} in its "
                f"config.json but the plan asked for tp={tp} pp={pp}",
            )
        missing = [
            f"rank{r}.engine"
            for r in range(mapping.world_size)
            if not (self.engine_dir / f"rank{r}.engine").is_file()
        ]
        if missing:
            raise Failure(
                EXIT_MISMATCH,
                f"the engine in {self.engine_dir} is incomplete: missing {', '.join(missing)}",
            )
        product = gpu_product()
        requested = self.plan.get("gpuProduct")
        if product and requested and product_label(product) != requested:
            log("build", "warning", message=f"built on {product!r}, but the plan asks for "
                f"{requested!r}: the engine is tuned for the build GPU")
        gpus, _ = visible_gpus()
        report, stable = self._publish_artifact(seconds, {
            "schema": ARTIFACT_SCHEMA,
            "engineKey": self.key,
            "trtllmVersion": self.trtllm_version,
            "engineConfigVersion": mapping.version,
            "tensorParallel": mapping.tp,
            "pipelineParallel": mapping.pp,
            "worldSize": mapping.world_size,
            "gpuProduct": product,
            "gpuProductLabel": product_label(product) if product else None,
            "gpuProductRequested": requested,
            "gpuCount": gpus,
        })
        if not stable:
            log("build", "warning", message="an engine file changed while it was hashed: no "
                "verification marker, every serving pod hashes the engine in full")
        log("build", "artifact", path=str(self.engine_dir / ARTIFACT), tp=mapping.tp,
            pp=mapping.pp, trtllmVersion=self.trtllm_version, gpuProduct=product, gpus=gpus,
            digest=report["engineDigest"])

    def _write_checkpoint_artifact(self, seconds: float) -> None:
        """artifact.json of llmapi's quantized checkpoint: written only once the export declares
        what the plan asked for, with every file's checksum (engine_files.engine_checksums)."""
        assert self.engine_dir is not None
        declared = _declared_quantization(self.engine_dir)
        expected = self.plan.get("expectQuantization") or {}
        wrong = {k: declared.get(k) for k, v in expected.items() if declared.get(k) != v}
        if wrong:
            raise Failure(
                EXIT_MISMATCH,
                f"the checkpoint ModelOpt exported to {self.engine_dir} declares {wrong} in "
                f"{HF_QUANT_CONFIG}, not {expected} as the plan asked (spec.engine.quantization)",
            )
        report, _ = self._publish_artifact(seconds, {
            "schema": ARTIFACT_SCHEMA,
            "kind": LLMAPI_CHECKPOINT,
            "engineKey": self.key,
            "trtllmVersion": self.trtllm_version,
            "quantization": declared,
            "gpuProduct": gpu_product(),
        })
        log("build", "artifact", path=str(self.engine_dir / ARTIFACT), kind=LLMAPI_CHECKPOINT,
            quantization=declared, digest=report["engineDigest"])

    def _publish_artifact(self, seconds: float, fields: dict[str, Any]
                          ) -> tuple[dict[str, Any], bool]:
        """artifact.json of the engine directory (an engine or llmapi's checkpoint): `fields`,
        then when and how long it took, the steps and every file's checksum; the verification
        marker beside it when no file changed while it was hashed. Returns report_engine's
        report and whether the files held still (the marker was written).

        The files are hashed once, here; their fingerprints before and after go into the
        verification marker, so that serving pods need not hash them again (verified.py)."""
        assert self.engine_dir is not None
        names = engine_file_paths(self.engine_dir)
        before = fingerprints(self.engine_dir, names)
        files = engine_checksums(self.engine_dir)
        after = fingerprints(self.engine_dir, names)
        artifact = {
            **fields,
            "builtAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(seconds, 1),
            "steps": self.records,
            "files": files,
        }
        write_json_atomic(self.engine_dir / ARTIFACT, artifact)
        _, artifact_digest = read_artifact(self.engine_dir)
        stable = before == after and sorted(files) == names
        if stable:
            write_marker(self.engine_dir, artifact_digest, after, by="build")
        return report_engine(artifact, after if stable else None), stable


def _declared_quantization(directory: Path) -> dict[str, Any]:
    """quant_algo and kv_cache_quant_algo of an exported checkpoint (hf_quant_config.json)."""
    cfg = read_json(directory / HF_QUANT_CONFIG)
    if cfg is None or not (directory / "config.json").is_file():
        raise Failure(
            EXIT_NOT_FOUND,
            f"{directory} has no {HF_QUANT_CONFIG} or config.json: ModelOpt's export did not "
            "complete (hf_ptq.py --export_fmt hf writes both)",
        )
    q = cfg.get("quantization") or {}
    return {"quant_algo": q.get("quant_algo"), "kv_cache_quant_algo": q.get("kv_cache_quant_algo")}


def _modelopt_argv(step: dict[str, Any], argv: list[str]) -> list[str]:
    """{modelopt}: the first examples directory with the step's script (hf_ptq.py), trying
    TRITONLLM_MODELOPT_EXAMPLES first; ModelOpt's wheel does not ship its examples."""
    rel = step["script"]
    env = os.environ.get(ENV_MODELOPT_EXAMPLES)
    roots = [Path(r) for r in ([env] if env else []) + list(step.get("scriptRoots") or [])]
    root = next((r for r in roots if (r / rel).is_file()), None)
    if root is None:
        raise Failure(
            EXIT_NOT_FOUND,
            f"ModelOpt's {rel} is not in this image (looked under "
            f"{', '.join(map(str, roots))}): put NVIDIA/Model-Optimizer's examples tree of the "
            "image's nvidia-modelopt release into the image, or on the store and name it in "
            f"spec.podTemplate.env {ENV_MODELOPT_EXAMPLES}; or serve a checkpoint quantized "
            "elsewhere with engine.quantization.format none",
        )
    return [a.replace("{modelopt}", str(root)) for a in argv]


def _workers(argv: list[str]) -> int:
    """trtllm-build --workers N (1 when absent): how many GPUs it builds ranks on."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "--workers":
            return int(argv[i + 1])
    return 1
