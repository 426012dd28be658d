"""`tritonllm build` against FAKE TensorRT-LLM tools (tests/fake_trtllm.py): exact commands for
every example, resumability, the engine cache, specific failures, and the model-repository step.

The entry point is the real one, run from the zipapp under `python -S`; only the tools are fakes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cases import EXAMPLES
from tests.fake_trtllm import GPU_NAME, FakeImage, image, relocate, write_plan
from tests.helpers import example, example_body, render_example
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import Rendered, render_all
from tritonllm.runtime import report

__all__ = ["image"]  # fixture (pyz: tests/conftest.py)

HF_TOKEN = "hf_fake_token"
DOWNLOADED = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]

# The exact commands each engine example runs, with {X} the examples root found in the image,
# {W} the weights, {C} the checkpoint and {E} the engine directory.
GOLDEN: dict[str, list[str]] = {
    "gpt2-medium": [
        "python3 {X}/gpt/convert_checkpoint.py --model_dir {W} --output_dir {C} --dtype float16 "
        "--tp_size 1 --pp_size 1",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 8 --max_input_len 512 "
        "--max_seq_len 1024 --max_num_tokens 4096 --max_beam_width 1 --gemm_plugin float16 "
        "--gpt_attention_plugin float16 --use_paged_context_fmha enable --kv_cache_type paged "
        "--workers 1",
    ],
    "llama3-8b-awq": [
        "python3 {X}/quantization/quantize.py --model_dir {W} --output_dir {C} --dtype bfloat16 "
        "--qformat int4_awq --calib_size 512 --tp_size 1 --pp_size 1 --awq_block_size 128",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 1 "
        "--max_input_len 1024 --max_seq_len 2048 --max_num_tokens 8192 --max_beam_width 1 "
        "--gemm_plugin bfloat16 --gpt_attention_plugin bfloat16 --use_paged_context_fmha enable "
        "--kv_cache_type paged --workers 1",
    ],
    # TensorRT-LLM 0.9: --max_output_len and --paged_kv_cache; the fake image has the llama
    # converter only in the newer examples/models/core/ layout.
    "llama2-7b-tp4": [
        "python3 {X}/models/core/llama/convert_checkpoint.py --model_dir {W} --output_dir {C} "
        "--dtype float16 --tp_size 4 --pp_size 1",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 64 "
        "--max_input_len 1024 --max_output_len 1024 --max_num_tokens 8192 --max_beam_width 1 "
        "--gemm_plugin float16 --gpt_attention_plugin float16 --use_paged_context_fmha enable "
        "--paged_kv_cache enable --workers 4",
    ],
    "llama2-7b-v1": [
        "python3 {X}/models/core/llama/convert_checkpoint.py --model_dir {W} --output_dir {C} "
        "--dtype float16 --tp_size 1 --pp_size 1",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 16 "
        "--max_input_len 1024 --max_seq_len 2048 --max_num_tokens 8192 --max_beam_width 1 "
        "--gemm_plugin float16 --gpt_attention_plugin float16 --use_paged_context_fmha enable "
        "--kv_cache_type paged --workers 1",
    ],
    # tp 2: what the fit planner chose (parallelism.auto).
    "llama2-7b-auto": [
        "python3 {X}/models/core/llama/convert_checkpoint.py --model_dir {W} --output_dir {C} "
        "--dtype float16 --tp_size 2 --pp_size 1",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 64 "
        "--max_input_len 1024 --max_seq_len 2048 --max_num_tokens 8192 --max_beam_width 1 "
        "--gemm_plugin float16 --gpt_attention_plugin float16 --use_paged_context_fmha enable "
        "--kv_cache_type paged --workers 2",
    ],
    # 16 ranks built in turn on one node's 8 GPUs; TensorRT-LLM 0.11 has --max_seq_len but not
    # yet --kv_cache_type (0.13).
    "llama-70b-multinode": [
        "python3 {X}/models/core/llama/convert_checkpoint.py --model_dir {W} --output_dir {C} "
        "--dtype bfloat16 --tp_size 8 --pp_size 2",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 32 "
        "--max_input_len 4096 --max_seq_len 8192 --max_num_tokens 16384 --max_beam_width 1 "
        "--gemm_plugin bfloat16 --gpt_attention_plugin bfloat16 --use_paged_context_fmha enable "
        "--paged_kv_cache enable --workers 8",
    ],
}


# Examples whose checkpoint is already on a claim (pvc://): no Hub call, the same commands.
GOLDEN_LOCAL: dict[str, list[str]] = {
    # The real node's example: a checkpoint on the store claim (pvc://), 2 ranks on 2 GPUs.
    "cpu-standin": [
        "python3 {X}/gpt/convert_checkpoint.py --model_dir {W} --output_dir {C} "
        "--dtype float16 --tp_size 2 --pp_size 1",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 4 "
        "--max_input_len 64 --max_seq_len 128 --max_num_tokens 256 --max_beam_width 1 "
        "--gemm_plugin float16 --gpt_attention_plugin float16 --use_paged_context_fmha enable "
        "--kv_cache_type paged --workers 2",
    ],
    # The autoscaling example: the same model at tp 1 (one stand-in GPU per replica).
    "cpu-standin-autoscaling": [
        "python3 {X}/gpt/convert_checkpoint.py --model_dir {W} --output_dir {C} "
        "--dtype float16 --tp_size 1 --pp_size 1",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 4 "
        "--max_input_len 64 --max_seq_len 128 --max_num_tokens 256 --max_beam_width 1 "
        "--gemm_plugin float16 --gpt_attention_plugin float16 --use_paged_context_fmha enable "
        "--kv_cache_type paged --workers 1",
    ],
    # The multi-node example: tp 2 across a group of two pods of one stand-in GPU each; the
    # build Job has one GPU, so one worker builds both ranks' engines.
    "cpu-standin-multinode": [
        "python3 {X}/gpt/convert_checkpoint.py --model_dir {W} --output_dir {C} "
        "--dtype float16 --tp_size 2 --pp_size 1",
        "trtllm-build --checkpoint_dir {C} --output_dir {E} --max_batch_size 4 "
        "--max_input_len 64 --max_seq_len 128 --max_num_tokens 256 --max_beam_width 1 "
        "--gemm_plugin float16 --gpt_attention_plugin float16 --use_paged_context_fmha enable "
        "--kv_cache_type paged --workers 1",
    ],
}


def build_plan_for(rendered: Rendered, img: FakeImage) -> dict[str, Any]:
    plan: dict[str, Any] = relocate(rendered.build_plan, img.root)
    if "exampleRoots" in plan:
        # The first root does not exist in this image: the runtime must take the second.
        plan["exampleRoots"] = [str(img.root / "opt/missing/examples"), str(img.examples)]
    return plan


def run_build(
    img: FakeImage, plan: dict[str, Any], token: str = HF_TOKEN, **env: str
) -> tuple[int, str]:
    """Run the plan; the token is the file the build pod mounts from the Secret."""
    path = write_plan(img.root / "etc/build.json", plan)
    for step in plan.get("steps", []):
        if step.get("tokenFile"):
            token_file = Path(step["tokenFile"])
            token_file.parent.mkdir(parents=True, exist_ok=True)
            token_file.write_text(token + "\n")
    version = plan.get("trtllmVersion", "0.13.0")
    base = img.env(FAKE_TRTLLM_VERSION=version)
    out = img.tritonllm("build", "--plan", str(path), env={**base, **env})
    return out.returncode, out.stdout + out.stderr


def prepared(img: FakeImage, name: str) -> tuple[Rendered, dict[str, Any]]:
    rendered = render_example(name)
    plan = build_plan_for(rendered, img)
    if plan.get("trtllmVersion"):
        img.set_trtllm_version(plan["trtllmVersion"])
    return rendered, plan


def engine_examples() -> list[str]:
    """Examples that build an engine (llmapi's quantized checkpoints: test_runtime_quantize)."""
    return [
        p.stem for p in EXAMPLES
        if render_example(p.stem).build_plan.get("engineDir")
        and example(p.stem).spec.runtime == "engine"
    ]


def test_every_engine_example_has_golden_commands() -> None:
    assert sorted(engine_examples()) == sorted([*GOLDEN, *GOLDEN_LOCAL])


@pytest.mark.parametrize("name", sorted(GOLDEN_LOCAL))
def test_build_from_a_checkpoint_on_the_claim_runs_the_exact_commands(
    image: FakeImage, name: str
) -> None:
    rendered, plan = prepared(image, name)
    weights = Path(plan["weightsDir"])
    weights.mkdir(parents=True)
    (weights / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    code, log = run_build(image, plan)
    assert code == 0, log
    assert "event=skip step=download" in log
    paths = {"X": str(image.examples), "W": plan["weightsDir"], "C": plan["checkpointDir"],
             "E": plan["engineDir"]}
    assert image.commands() == [line.format(**paths).split() for line in GOLDEN_LOCAL[name]]
    assert image.calls("huggingface_hub") == []
    artifact = json.loads((Path(plan["engineDir"]) / "artifact.json").read_text())
    assert artifact["engineKey"] == rendered.engine_key
    tp = rendered.launch_plan["worldSize"]
    assert (artifact["tensorParallel"], artifact["worldSize"]) == (tp, tp)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_build_with_fake_trtllm_tools_runs_the_exact_commands_of_each_example(
    image: FakeImage, name: str
) -> None:
    rendered, plan = prepared(image, name)
    code, log = run_build(image, plan)
    assert code == 0, log

    paths = {
        "X": str(image.examples),
        "W": plan["weightsDir"],
        "C": plan["checkpointDir"],
        "E": plan["engineDir"],
    }
    expected = [line.format(**paths).split() for line in GOLDEN[name]]
    assert image.commands() == expected

    hub = image.calls("huggingface_hub")
    token = HF_TOKEN if rendered.build_plan["steps"][0]["tokenFile"] else None
    assert [c["call"] for c in hub] == ["model_info", "snapshot_download"]
    assert hub[0]["token"] == token
    # One weight format only: no .bin/.h5 next to safetensors, no Meta original/ checkpoint.
    assert hub[1]["allow_patterns"] == DOWNLOADED
    assert hub[1]["local_dir"] == plan["weightsDir"]

    artifact = json.loads((Path(plan["engineDir"]) / "artifact.json").read_text())
    assert artifact["engineKey"] == rendered.engine_key
    assert artifact["trtllmVersion"] == plan["trtllmVersion"]
    assert (artifact["tensorParallel"], artifact["pipelineParallel"]) == (
        plan["tensorParallel"],
        plan["pipelineParallel"],
    )
    assert artifact["worldSize"] == plan["worldSize"]
    assert artifact["gpuProduct"] == GPU_NAME
    assert artifact["gpuProductLabel"] == "NVIDIA-H100-80GB-HBM3"  # as in nvidia.com/gpu.product
    assert artifact["gpuProductRequested"] == plan["gpuProduct"]
    assert artifact["gpuCount"] == 8  # the fake nvidia-smi -L lists FAKE_GPUS=8
    assert [s["name"] for s in artifact["steps"]] == [s["name"] for s in plan["steps"]]
    assert [s["argv"] for s in artifact["steps"] if "argv" in s] == expected
    assert all(s["seconds"] >= 0 for s in artifact["steps"])
    # Progress: one start and one end line per step, with the elapsed time.
    for step in plan["steps"]:
        assert f"event=start step={step['name']}" in log
        assert f"event=end step={step['name']} seconds=" in log


def test_download_only_plan_with_fake_hub_fetches_the_weights_and_needs_no_gpu(
    image: FakeImage,
) -> None:
    _, plan = prepared(image, "llmapi-llama3-8b")
    code, log = run_build(image, plan, FAKE_GPUS="0")
    assert code == 0, log
    assert image.commands() == []
    weights = Path(plan["weightsDir"])
    assert sorted(p.name for p in weights.iterdir() if p.is_file()) == DOWNLOADED
    # The step markers are under the key's own directory, not next to the weights.
    assert (Path(plan["stateDir"]) / "download.done").is_file()
    assert not (weights / ".tritonllm").exists()
    assert not (weights / "artifact.json").exists()


def test_build_with_fake_trtllm_tools_resumes_after_a_crash_in_trtllm_build(
    image: FakeImage,
) -> None:
    _, plan = prepared(image, "gpt2-medium")
    code, log = run_build(image, plan, FAKE_FAIL="trtllm-build")
    assert code == report.EXIT_FAILED, log
    assert "build failed with exit code 3: trtllm-build: simulated crash" in log
    assert not (Path(plan["engineDir"]) / "artifact.json").exists()

    code, log = run_build(image, plan)
    assert code == 0, log
    assert "event=skip step=download" in log
    assert "event=skip step=convert" in log
    tools = [Path(c[1] if c[0] == "python3" else c[0]).name for c in image.commands()]
    assert tools == ["convert_checkpoint.py", "trtllm-build", "trtllm-build"]
    assert len(image.calls("huggingface_hub")) == 2  # model_info + snapshot_download, once
    artifact = json.loads((Path(plan["engineDir"]) / "artifact.json").read_text())
    assert [s.get("skipped", False) for s in artifact["steps"]] == [True, True, False]


def test_build_with_fake_trtllm_tools_redoes_a_step_whose_output_vanished(
    image: FakeImage,
) -> None:
    _, plan = prepared(image, "gpt2-medium")
    assert run_build(image, plan, FAKE_FAIL="trtllm-build")[0] == report.EXIT_FAILED
    (Path(plan["checkpointDir"]) / "config.json").unlink()
    code, log = run_build(image, plan)
    assert code == 0, log
    assert [c["tool"] for c in image.calls() if c["tool"] != "huggingface_hub"] == [
        "convert_checkpoint.py", "trtllm-build", "convert_checkpoint.py", "trtllm-build",
    ]


def test_build_with_fake_trtllm_tools_never_rebuilds_a_complete_engine(image: FakeImage) -> None:
    _, plan = prepared(image, "llama3-8b-awq")
    assert run_build(image, plan)[0] == 0
    before = image.calls()
    code, log = run_build(image, plan, FAKE_GPUS="0", FAKE_FAIL="trtllm-build")
    assert code == 0, log
    assert "event=cached" in log
    assert image.calls() == before


def test_build_refuses_an_engine_directory_of_another_key(image: FakeImage) -> None:
    _, plan = prepared(image, "gpt2-medium")
    engine = Path(plan["engineDir"])
    engine.mkdir(parents=True)
    (engine / "artifact.json").write_text(json.dumps({"engineKey": "somebody-else"}))
    code, log = run_build(image, plan)
    assert code == report.EXIT_MISMATCH, log
    assert "foreign engine" in log


@pytest.mark.parametrize(
    ("arch", "converter"),
    [
        ("GPT2LMHeadModel", "gpt"),
        ("LlamaForCausalLM", "models/core/llama"),
        ("FalconForCausalLM", "models/contrib/falcon"),
    ],
)
def test_build_with_fake_trtllm_tools_maps_architecture_auto_through_converters(
    image: FakeImage, arch: str, converter: str
) -> None:
    _, plan = prepared(image, "gpt2-medium")
    plan["steps"][1]["exampleDir"] = None
    code, log = run_build(image, plan, FAKE_ARCH=arch)
    assert code == 0, log
    assert image.commands()[0][1] == f"{image.examples}/{converter}/convert_checkpoint.py"


def test_build_names_an_architecture_without_a_converter(image: FakeImage) -> None:
    _, plan = prepared(image, "gpt2-medium")
    plan["steps"][1]["exampleDir"] = None
    code, log = run_build(image, plan, FAKE_ARCH="MambaForCausalLM")
    assert code == report.EXIT_NO_CONVERTER, log
    assert "model architecture 'MambaForCausalLM'" in log
    assert "spec.runtime: llmapi" in log
    assert image.commands() == []


def test_build_says_when_the_image_has_no_converter_script(image: FakeImage) -> None:
    _, plan = prepared(image, "gpt2-medium")
    plan["exampleRoots"] = [str(image.root / "nowhere")]
    code, log = run_build(image, plan)
    assert code == report.EXIT_NOT_FOUND, log
    assert "no convert_checkpoint.py for 'gpt'" in log


@pytest.mark.parametrize("status", [401, 403])
def test_build_reports_a_hub_auth_failure_naming_the_credentials(
    image: FakeImage, status: int
) -> None:
    _, plan = prepared(image, "llama3-8b-awq")
    code, log = run_build(image, plan, FAKE_HF_STATUS=str(status))
    assert code == report.EXIT_AUTH, log
    assert "refused access to hf://meta-llama/Meta-Llama-3.1-8B-Instruct" in log
    assert "spec.model.credentials" in log
    assert [c["call"] for c in image.calls("huggingface_hub")] == ["model_info"]


def test_build_reports_an_empty_token_naming_the_credentials(image: FakeImage) -> None:
    _, plan = prepared(image, "llama3-8b-awq")
    code, log = run_build(image, plan, token="")
    assert code == report.EXIT_AUTH, log
    assert "token file" in log and "is empty" in log and "spec.model.credentials" in log


def test_build_refuses_when_the_visible_gpus_cannot_run_the_build_workers(
    image: FakeImage,
) -> None:
    _, plan = prepared(image, "llama2-7b-tp4")  # trtllm-build --workers 4
    code, log = run_build(image, plan, CUDA_VISIBLE_DEVICES="0,1")
    assert code == report.EXIT_GPUS, log
    assert "needs 4 visible GPU(s) but this container sees 2 (CUDA_VISIBLE_DEVICES='0,1')" in log
    assert image.calls() == []  # before anything is downloaded


def test_build_counts_gpus_with_nvidia_smi_without_cuda_visible_devices(image: FakeImage) -> None:
    _, plan = prepared(image, "llama2-7b-tp4")
    code, log = run_build(image, plan, FAKE_GPUS="3")
    assert code == report.EXIT_GPUS, log
    assert "sees 3 (nvidia-smi -L)" in log


def test_build_with_fake_trtllm_tools_rejects_an_engine_whose_tp_differs_from_the_plan(
    image: FakeImage,
) -> None:
    _, plan = prepared(image, "gpt2-medium")
    code, log = run_build(image, plan, FAKE_ENGINE_TP="2")
    assert code == report.EXIT_MISMATCH, log
    assert "has tp=2 pp=1 in its config.json but the plan asked for tp=1 pp=1" in log
    assert not (Path(plan["engineDir"]) / "artifact.json").exists()


def test_build_refuses_an_image_with_another_trtllm_version(image: FakeImage) -> None:
    _, plan = prepared(image, "llama3-8b-awq")
    image.set_trtllm_version("0.12.0")
    code, log = run_build(image, plan)
    assert code == report.EXIT_VERSION, log
    assert "the image has TensorRT-LLM 0.12.0 but the plan was rendered for 0.13.0" in log
    assert image.calls() == []


def test_build_maps_a_full_disk_in_a_tool_to_the_no_space_exit_code(image: FakeImage) -> None:
    _, plan = prepared(image, "gpt2-medium")
    code, log = run_build(image, plan, FAKE_ENOSPC="convert_checkpoint.py")
    assert code == report.EXIT_NO_SPACE, log
    assert "convert ran out of disk space" in log


def test_build_checks_free_space_before_downloading(image: FakeImage) -> None:
    _, plan = prepared(image, "gpt2-medium")
    huge = json.dumps({"config.json": 100, "model.safetensors": 2**60})
    code, log = run_build(image, plan, FAKE_HF_FILES=huge)
    assert code == report.EXIT_NO_SPACE, log
    assert "downloading hf://openai-community/gpt2-medium needs about" in log
    assert [c["call"] for c in image.calls("huggingface_hub")] == ["model_info"]


def test_build_from_a_local_source_checks_the_directory(image: FakeImage) -> None:
    _, plan = prepared(image, "gpt2-medium")
    weights = Path(plan["weightsDir"])
    plan["steps"][0] = {"name": "download", "kind": "local", "localDir": str(weights)}
    code, log = run_build(image, plan)
    assert code == report.EXIT_NOT_FOUND, log
    assert f"model directory {weights} does not exist or has none of config.json" in log

    weights.mkdir(parents=True)
    (weights / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    code, log = run_build(image, plan)
    assert code == 0, log
    assert image.calls("huggingface_hub") == []


def test_build_rejects_a_plan_of_another_version(image: FakeImage) -> None:
    code, log = run_build(image, {"version": 2, "steps": []})
    assert code == report.EXIT_INVALID
    assert "unsupported plan version 2" in log


# --- the model-repository step (repository.json) -----------------------------------------------


def repository_setup(
    img: FakeImage, artifact: dict[str, Any] | None
) -> tuple[Rendered, dict[str, Any]]:
    rendered = render_example("gpt2-medium")
    plan = json.loads(
        next(
            o["data"]["repository.json"]
            for o in rendered.objects
            if o["kind"] == "ConfigMap" and "repository.json" in o["data"]
        )
    )
    plan = relocate(plan, img.root)
    step = plan["steps"][0]
    src = Path(step["from"])
    for rel, body in rendered.repository.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(body)
    Path(step["weightsDir"]).mkdir(parents=True)
    if artifact is not None:  # a built engine: artifact.json and the engine's config.json
        engine = Path(step["engineDir"])
        engine.mkdir(parents=True)
        (engine / "artifact.json").write_text(json.dumps(artifact))
        mapping = {"tp_size": artifact["tensorParallel"], "pp_size": artifact["pipelineParallel"]}
        (engine / "config.json").write_text(json.dumps({"pretrained_config": {"mapping": mapping}}))
    return rendered, plan


GOOD_ARTIFACT = {"tensorParallel": 1, "pipelineParallel": 1, "trtllmVersion": "1.2.1"}


def test_repository_step_copies_the_repository_atomically_and_once(image: FakeImage) -> None:
    rendered, plan = repository_setup(image, GOOD_ARTIFACT)
    code, log = run_build(image, plan)
    assert code == 0, log
    dst = Path(plan["steps"][0]["to"])
    copied = {
        str(p.relative_to(dst)): p.read_text()
        for p in dst.rglob("*")
        if p.is_file() and p.name != ".tritonllm-content"
    }
    assert copied == rendered.repository
    assert (dst / ".tritonllm-content").is_file()
    assert [p.name for p in dst.parent.iterdir()] == [dst.name]  # no temporary left over
    code, log = run_build(image, plan)
    assert code == 0 and "event=skip" in log


def test_repository_step_replaces_a_directory_with_other_content(image: FakeImage) -> None:
    _, plan = repository_setup(image, GOOD_ARTIFACT)
    dst = Path(plan["steps"][0]["to"])
    (dst / "stale").mkdir(parents=True)
    assert run_build(image, plan)[0] == 0
    assert not (dst / "stale").exists()
    assert (dst / "ensemble" / "config.pbtxt").is_file()


@pytest.mark.parametrize(
    ("artifact", "code", "message"),
    [
        (None, report.EXIT_NOT_FOUND, "artifact.json does not exist"),
        ({**GOOD_ARTIFACT, "tensorParallel": 2}, report.EXIT_MISMATCH,
         "was built with tp=2 pp=1 but this repository is for tp=1 pp=1"),
        ({**GOOD_ARTIFACT, "trtllmVersion": "1.1.0"}, report.EXIT_VERSION,
         "was built with TensorRT-LLM 1.1.0 but this repository is for 1.2.1"),
    ],
)
def test_repository_step_refuses_an_engine_that_does_not_match(
    image: FakeImage, artifact: dict[str, Any] | None, code: int, message: str
) -> None:
    _, plan = repository_setup(image, artifact)
    got, log = run_build(image, plan)
    assert got == code, log
    assert message in log
    assert not Path(plan["steps"][0]["to"]).exists()


def test_built_engine_carries_the_sha256_of_every_file(image: FakeImage) -> None:
    _, plan = prepared(image, "llama2-7b-tp4")
    assert run_build(image, plan)[0] == 0
    engine = Path(plan["engineDir"])
    files = json.loads((engine / "artifact.json").read_text())["files"]
    assert sorted(files) == ["config.json", *(f"rank{r}.engine" for r in range(4))]
    for name, entry in files.items():
        data = (engine / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def test_build_refuses_a_cached_engine_changed_since_its_build(image: FakeImage) -> None:
    _, plan = prepared(image, "gpt2-medium")
    assert run_build(image, plan)[0] == 0
    (Path(plan["engineDir"]) / "rank0.engine").write_bytes(b"fake engin3")  # same size
    code, log = run_build(image, plan)
    assert code == report.EXIT_MISMATCH, log
    assert "was changed after its build (rank0.engine has another sha256" in log
    assert "kubectl delete tllme" in log


def _auto_kv_fp8_plan(img: FakeImage) -> dict[str, Any]:
    """gpt2-medium with architecture auto and an fp8 KV cache: llama's converter has
    --fp8_kv_cache, gpt's has none, so the plan carries an argv for one and a refusal for the
    other, and the build decides from config.json."""
    obj = example_body("gpt2-medium")
    obj["spec"]["model"]["architecture"] = "auto"
    obj["spec"]["engine"]["quantization"] = {"kvCacheDtype": "fp8"}
    plan = build_plan_for(render_all(parse_deployment(obj)), img)
    img.set_trtllm_version(plan["trtllmVersion"])
    return plan


def test_build_with_architecture_auto_runs_the_argv_of_the_converter_it_maps_to(
    image: FakeImage,
) -> None:
    plan = _auto_kv_fp8_plan(image)
    code, log = run_build(image, plan, FAKE_ARCH="LlamaForCausalLM")
    assert code == 0, log
    convert = image.commands()[0]
    assert convert[1] == f"{image.examples}/models/core/llama/convert_checkpoint.py"
    assert convert[-1] == "--fp8_kv_cache"


def test_build_with_architecture_auto_refuses_a_converter_that_lacks_a_flag(
    image: FakeImage,
) -> None:
    plan = _auto_kv_fp8_plan(image)
    code, log = run_build(image, plan, FAKE_ARCH="GPT2LMHeadModel")
    assert code == report.EXIT_NO_CONVERTER, log
    assert "gpt/convert_checkpoint.py of TensorRT-LLM 1.2.1 has no --fp8_kv_cache" in log
    assert image.commands() == []
