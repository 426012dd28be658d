"""`tritonllm build` of llmapi's ModelOpt quantization against the SIMULATED hf_ptq.py (the CPU
stand-in image's fake, images/triton-standin/fakes/hf_ptq.py, installed into tests'
fake image): the exact command, the exported checkpoint's markers, artifact.json with the
checksums, the digest report, the cache, the integrity check of the serving pods, and failures.

The entry point is the real one, run from the zipapp under `python -S`; only the tool is a fake.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fake_trtllm import FakeImage, image, relocate, write_plan
from tests.helpers import example_body, render_example
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import render_all
from tritonllm.runtime import report
from tritonllm.runtime.launch import verify_checkpoint
from tritonllm.runtime.report import Failure

__all__ = ["image"]  # fixture (pyz: tests/conftest.py)

EXAMPLE = "llmapi-llama3-8b-awq"
# The exact command, {M} ModelOpt's examples root, {W} the weights, {E} the key's directory.
GOLDEN = (
    "python3 {M}/llm_ptq/hf_ptq.py --pyt_ckpt_path {W} --export_path {E} --qformat int4_awq "
    "--kv_cache_qformat none --calib_size 512 --export_fmt hf --awq_block_size 128"
)


def _plan(img: FakeImage, obj: dict[str, Any] | None = None) -> dict[str, Any]:
    rendered = render_all(parse_deployment(obj)) if obj else render_example(EXAMPLE)
    plan: dict[str, Any] = relocate(rendered.build_plan, img.root)
    img.set_trtllm_version(plan["trtllmVersion"])
    return plan


def _run(img: FakeImage, plan: dict[str, Any], *, modelopt: bool = True,
         **env: str) -> tuple[int, str, dict[str, Any]]:
    """Run the plan (hf_ptq.py found through TRITONLLM_MODELOPT_EXAMPLES unless `modelopt` is
    False); returns the exit code, the log and the termination report."""
    for step in plan["steps"]:
        if step.get("tokenFile"):
            Path(step["tokenFile"]).parent.mkdir(parents=True, exist_ok=True)
            Path(step["tokenFile"]).write_text("hf_fake_token\n")
    term = img.root / "termination-log"
    term.write_text("")
    base = img.env(FAKE_TRTLLM_VERSION=plan["trtllmVersion"],
                   TRITONLLM_TERMINATION_LOG=str(term))
    if modelopt:
        base["TRITONLLM_MODELOPT_EXAMPLES"] = str(img.modelopt_examples)
    out = img.tritonllm("build", "--plan", str(write_plan(img.root / "etc/build.json", plan)),
                        env={**base, **env})
    said = term.read_text().strip()
    return out.returncode, out.stdout + out.stderr, json.loads(said) if said else {}


def test_quantization_runs_hf_ptq_and_records_the_exported_checkpoint(image: FakeImage) -> None:
    plan = _plan(image)
    code, log, said = _run(image, plan)
    assert code == 0, log
    out = Path(plan["engineDir"])
    paths = {"M": str(image.modelopt_examples), "W": plan["weightsDir"], "E": str(out)}
    assert image.commands() == [GOLDEN.format(**paths).split()]
    # What ModelOpt's unified export leaves, and what the PyTorch backend reads.
    hf_quant = json.loads((out / "hf_quant_config.json").read_text())
    assert hf_quant["producer"]["name"] == "modelopt"
    assert hf_quant["quantization"] == {
        "quant_algo": "W4A16_AWQ", "kv_cache_quant_algo": None, "group_size": 128,
        "has_zero_point": False, "pre_quant_scale": True, "exclude_modules": ["lm_head"]}
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "modelopt"
    assert config["quantization_config"]["quant_algo"] == "W4A16_AWQ"
    # artifact.json: the kind, what the export declares, every file's checksum.
    artifact = json.loads((out / "artifact.json").read_text())
    assert artifact["kind"] == "llmapi-checkpoint"
    assert artifact["quantization"] == {"quant_algo": "W4A16_AWQ", "kv_cache_quant_algo": None}
    assert artifact["trtllmVersion"] == plan["trtllmVersion"]
    assert [s["name"] for s in artifact["steps"]] == ["download", "quantize"]
    assert "hf_quant_config.json" in artifact["files"] and ".tritonllm" not in str(
        sorted(artifact["files"]))
    for name, entry in artifact["files"].items():
        data = (out / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    # The digest goes to the operator (the engine record and the deployment's anchor).
    assert said["engineDigest"].startswith("sha256:") and said["fingerprintDigest"]


def test_quantization_with_an_fp8_kv_cache_is_declared_by_the_export(image: FakeImage) -> None:
    obj = example_body(EXAMPLE)
    obj["spec"]["engine"]["quantization"] = {"format": "fp8", "kvCacheDtype": "fp8"}
    plan = _plan(image, obj)
    code, log, _ = _run(image, plan)
    assert code == 0, log
    argv = image.commands()[0]
    assert argv[argv.index("--qformat") + 1] == "fp8"
    assert argv[argv.index("--kv_cache_qformat") + 1] == "fp8"
    assert "--awq_block_size" not in argv
    out = Path(plan["engineDir"])
    q = json.loads((out / "hf_quant_config.json").read_text())["quantization"]
    assert (q["quant_algo"], q["kv_cache_quant_algo"]) == ("FP8", "FP8")
    scheme = json.loads((out / "config.json").read_text())["quantization_config"]
    assert scheme["kv_cache_scheme"] == {"dynamic": False, "num_bits": 8, "type": "float"}


def test_a_quantized_checkpoint_is_never_quantized_again(image: FakeImage) -> None:
    plan = _plan(image)
    assert _run(image, plan)[0] == 0
    code, log, said = _run(image, plan)
    assert code == 0, log
    assert "event=cached" in log
    assert len(image.calls("hf_ptq.py")) == 1
    assert said["engineDigest"].startswith("sha256:")  # reported again for a new record


def test_quantization_takes_the_first_examples_root_that_has_hf_ptq(image: FakeImage) -> None:
    plan = _plan(image)
    step = plan["steps"][-1]
    step["scriptRoots"] = [str(image.root / "opt/missing"), str(image.modelopt_examples)]
    code, log, _ = _run(image, plan, modelopt=False)
    assert code == 0, log
    assert image.calls("hf_ptq.py")[0]["argv"][0] == str(
        image.modelopt_examples / "llm_ptq" / "hf_ptq.py")


def test_quantization_says_where_to_put_modelopt_when_the_image_lacks_it(
    image: FakeImage,
) -> None:
    plan = _plan(image)  # the plan's roots are the image's absolute paths: none exists here
    code, log, _ = _run(image, plan, modelopt=False)
    assert code == report.EXIT_NOT_FOUND, log
    assert "llm_ptq/hf_ptq.py is not in this image" in log
    assert "TRITONLLM_MODELOPT_EXAMPLES" in log
    assert image.calls("hf_ptq.py") == []


def test_quantization_needs_a_gpu_for_calibration(image: FakeImage) -> None:
    code, log, _ = _run(image, _plan(image), FAKE_GPUS="0")
    assert code == report.EXIT_GPUS, log
    assert "ModelOpt's calibration" in log
    assert image.calls("hf_ptq.py") == []


def test_the_simulated_hf_ptq_refuses_an_option_the_real_one_lacks(image: FakeImage) -> None:
    plan = _plan(image)
    plan["steps"][-1]["argv"] += ["--dtype", "bfloat16"]  # quantize.py has it, hf_ptq.py not
    code, log, _ = _run(image, plan)
    assert code == report.EXIT_FAILED, log
    assert "unrecognized arguments: --dtype bfloat16" in log
    assert not (Path(plan["engineDir"]) / "artifact.json").exists()


def test_the_simulated_hf_ptq_refuses_a_dataset_modelopt_does_not_know(
    image: FakeImage,
) -> None:
    plan = _plan(image)
    plan["steps"][-1]["argv"] += ["--dataset", "my-org/my-dataset"]
    code, log, _ = _run(image, plan)
    assert code == report.EXIT_FAILED, log
    assert "dataset my-org/my-dataset is not supported" in log


def test_an_export_of_another_quantization_than_planned_is_not_recorded(
    image: FakeImage,
) -> None:
    plan = _plan(image)
    plan["expectQuantization"] = {"quant_algo": "FP8", "kv_cache_quant_algo": None}
    code, log, _ = _run(image, plan)
    assert code == report.EXIT_MISMATCH, log
    assert "declares {'quant_algo': 'W4A16_AWQ'}" in log
    assert not (Path(plan["engineDir"]) / "artifact.json").exists()


def test_a_crash_in_hf_ptq_is_retried_from_the_downloaded_weights(image: FakeImage) -> None:
    plan = _plan(image)
    code, log, _ = _run(image, plan, FAKE_FAIL="hf_ptq.py")
    assert code == report.EXIT_FAILED, log
    assert "quantize failed with exit code 3: hf_ptq.py: simulated crash" in log
    code, log, _ = _run(image, plan)
    assert code == 0, log
    assert "event=skip step=download" in log  # the weights are not fetched again
    assert (Path(plan["engineDir"]) / "artifact.json").is_file()


def test_serving_pods_refuse_a_quantized_checkpoint_changed_after_its_job(
    image: FakeImage,
) -> None:
    """runtime/launch.py's check of llmapi's checkpoint, with the digest the Job reported
    (what the launch plan carries once the operator anchored it)."""
    plan = _plan(image)
    code, log, said = _run(image, plan)
    assert code == 0, log
    launch = {"engineDir": plan["engineDir"], "engineKey": plan["engineKey"],
              "engineDigest": {"engine": said["engineDigest"]}}
    verify_checkpoint(launch)  # as built: accepted
    weights = Path(plan["engineDir"]) / "model.safetensors"
    weights.write_bytes(b"X" * weights.stat().st_size)  # same size, other bytes
    with pytest.raises(Failure) as err:
        verify_checkpoint(launch)
    assert err.value.code == report.EXIT_MISMATCH
    assert "model.safetensors has another sha256" in str(err.value)
    # A checkpoint whose artifact.json is not the one reported is refused before any hash.
    other = {**launch, "engineDigest": {"engine": "sha256:" + "0" * 64}}
    with pytest.raises(Failure) as err:
        verify_checkpoint(other)
    assert err.value.code == report.EXIT_TAMPERED
