"""Quantization on runtime llmapi: what admission accepts, the key of the quantized checkpoint
(exactly the inputs of its Job), the rendered Job, model.yaml and plans, and the planner's cache
and integrity anchor for it, as for engines. Pure; the in-pod side is test_runtime_quantize.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.cases import cr
from tests.helpers import render_example
from tests.unit.test_engine_anchor import BUILT, BUILT_PRINTS, opts, report
from tests.unit.test_engine_digest import build_pod
from tests.unit.test_plan import World
from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, parse_deployment
from tritonllm.render import RenderOptions, naming, render_all
from tritonllm.render.jobs import build_writable_dirs
from tritonllm.render.naming import ENGINE_KEY_SCHEMA, build_pod_inputs, stable_hash

IMAGE = "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"


def llmapi(quantization: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    patch: dict[str, Any] = {"runtime": "llmapi", "image": IMAGE, **spec}
    if quantization is not None:
        patch["engine"] = {**patch.get("engine", {}), "quantization": quantization}
    return cr(patch)


def key(obj: dict[str, Any]) -> str:
    return naming.engine_key(parse_deployment(obj))


@pytest.mark.parametrize("fmt", ["fp8", "int4_awq", "w4a8_awq", "nvfp4"])
def test_llmapi_accepts_the_formats_the_pytorch_backend_loads(fmt: str) -> None:
    dep = parse_deployment(llmapi({"format": fmt, "kvCacheDtype": "fp8"}))
    assert dep.spec.engine.quantization.format == fmt


@pytest.mark.parametrize("fmt", ["int8_wo", "int4_wo", "int8_sq"])
def test_llmapi_refuses_engine_only_formats_naming_the_supported_ones(fmt: str) -> None:
    with pytest.raises(InvalidDeployment) as err:
        parse_deployment(llmapi({"format": fmt}))
    text = str(err.value)
    assert "engine.quantization.format" in text
    assert "none, fp8, int4_awq, w4a8_awq, nvfp4" in text and "runtime engine" in text


@pytest.mark.parametrize(("tag", "fmt", "ok"), [
    ("25.08", "fp8", True),  # TensorRT-LLM 0.21: the PyTorch backend loads FP8 and NVFP4
    ("25.08", "nvfp4", True),
    ("25.08", "int4_awq", False),
    ("25.08", "w4a8_awq", False),
    ("25.09", "int4_awq", True),  # 1.0.0: W4A16 and W4A8 AWQ too
    ("25.09", "w4a8_awq", True),
])
def test_awq_on_llmapi_needs_tensorrt_llm_1_0(tag: str, fmt: str, ok: bool) -> None:
    obj = llmapi({"format": fmt}, image=f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3")
    if ok:
        assert parse_deployment(obj).spec.engine.quantization.format == fmt
        return
    with pytest.raises(InvalidDeployment) as err:
        parse_deployment(obj)
    assert "spec.engine.quantization.format" in str(err.value)
    assert f"loads {fmt} checkpoints from TensorRT-LLM 1.0.0" in str(err.value)
    assert "the image has 0.21.0" in str(err.value)


def test_llmapi_calibrates_only_with_a_dataset_modelopt_knows() -> None:
    """hf_ptq.py --dataset takes ModelOpt's dataset names, not a Hub id or a path."""
    assert parse_deployment(llmapi({"format": "fp8", "calibrationDataset": "pile"}))
    with pytest.raises(InvalidDeployment) as err:
        parse_deployment(llmapi({"format": "fp8", "calibrationDataset": "my-org/my-dataset"}))
    assert "spec.engine.quantization.calibrationDataset" in str(err.value)
    assert "cnn_dailymail" in str(err.value) and "(no path)" in str(err.value)


def test_llmapi_refuses_an_fp8_kv_cache_without_a_quantization_job() -> None:
    """ModelOpt calibrates the KV cache with the weights; with format none no Job runs, so an
    fp8 KV cache would be ignored."""
    with pytest.raises(InvalidDeployment) as err:
        parse_deployment(llmapi({"format": "none", "kvCacheDtype": "fp8"}))
    assert "fp8 only with a format other than none" in str(err.value)


def test_an_unquantized_llmapi_key_is_the_one_earlier_operators_computed() -> None:
    """Upgrading the operator must not move a deployment to a new key (no new download, no
    rollout): the inputs of an unquantized llmapi key are unchanged."""
    dep = parse_deployment(llmapi())
    spec = dep.spec
    earlier = stable_hash({
        "schema": ENGINE_KEY_SCHEMA, "image": spec.image, "buildPod": build_pod_inputs(dep),
        "runtime": "llmapi", "model": {"source": spec.model.source,
                                       "revision": spec.model.revision, "tokenizer": None},
    })
    assert naming.engine_key(dep) == earlier


@pytest.mark.parametrize(
    "change",
    [
        {"engine": {"quantization": {"format": "fp8"}}},
        {"engine": {"quantization": {"format": "int4_awq", "awqBlockSize": 64}}},
        {"engine": {"quantization": {"format": "int4_awq", "calibrationSize": 128}}},
        {"engine": {"quantization": {"format": "int4_awq", "calibrationDataset": "pile"}}},
        {"engine": {"quantization": {"format": "int4_awq", "kvCacheDtype": "fp8"}}},
        {"model": {"source": "hf://meta-llama/Llama-2-7b-hf", "revision": "abc"}},
        {"model": {"source": "hf://meta-llama/Llama-2-7b-hf", "trustRemoteCode": True}},
    ],
)
def test_every_input_of_the_quantization_job_changes_the_key(change: dict[str, Any]) -> None:
    base = llmapi({"format": "int4_awq"})
    changed = copy.deepcopy(base)
    for field, value in change.items():
        current = changed["spec"].get(field)
        if field == "engine":
            changed["spec"]["engine"]["quantization"] = {**value["quantization"]}
        else:
            changed["spec"][field] = {**current, **value} if isinstance(current, dict) else value
    assert key(changed) != key(base)


def test_the_images_tensorrt_llm_version_is_in_the_key() -> None:
    """The same image reference with another TensorRT-LLM (and so ModelOpt) in it."""
    custom = {"image": "registry.example.com/triton:custom"}
    one = llmapi({"format": "int4_awq"}, **custom, trtllmVersion="1.2.1")
    other = llmapi({"format": "int4_awq"}, **custom, trtllmVersion="1.1.0")
    assert key(one) != key(other)


@pytest.mark.parametrize(
    "change",
    [
        {"engine": {"parallelism": {"tensor": 2}}},  # the Hugging Face export is not split
        {"serving": {"kvCache": {"freeGpuMemFraction": 0.5}, "streaming": True}},
        {"engine": {"limits": {"maxBatchSize": 8}}},
        {"engine": {"dtype": "bfloat16"}},  # hf_ptq.py has no --dtype
    ],
)
def test_what_the_quantization_job_does_not_read_leaves_the_key(change: dict[str, Any]) -> None:
    base = llmapi({"format": "int4_awq"})
    changed = copy.deepcopy(base)
    for field, value in change.items():
        if field == "engine":
            changed["spec"]["engine"].update(value)
        else:
            changed["spec"][field] = value
    assert key(changed) == key(base)


def test_the_quantization_job_has_the_serving_gpus_and_writes_only_its_key() -> None:
    dep = parse_deployment(llmapi({"format": "fp8"}, engine={"parallelism": {"tensor": 2}}))
    r = render_all(dep)
    assert r.build_job.name == f"tritonllm-quantize-{r.engine_key}"
    assert r.build_configmap.name == r.build_job.name
    pod = r.build_job.body["spec"]["template"]["spec"]
    build = pod["containers"][0]
    assert build["resources"]["limits"][c.GPU_RESOURCE] == "2"  # calibration on the GPUs
    assert build_writable_dirs(dep, r.engine_key) == sorted(
        [naming.engine_dir(r.engine_key), naming.weights_dir(dep)])
    assert [s["name"] for s in r.build_plan["steps"]] == ["download", "quantize"]
    assert r.build_plan["expectQuantization"] == {"quant_algo": "FP8",
                                                  "kv_cache_quant_algo": None}


def test_model_yaml_loads_the_quantized_checkpoint_and_the_original_tokenizer() -> None:
    dep = parse_deployment(llmapi({"format": "int4_awq"}))
    r = render_all(dep)
    llm = yaml.safe_load(r.repository["tensorrt_llm/1/model.yaml"])
    assert llm["model"] == naming.engine_dir(r.engine_key)
    assert llm["tokenizer"] == naming.weights_dir(dep)
    assert r.launch_plan["verifyCheckpoint"] is True
    assert r.launch_plan["engineDir"] == naming.engine_dir(r.engine_key)


def test_the_reported_digest_is_rendered_only_where_a_checkpoint_is_recorded() -> None:
    digest = RenderOptions(engine_digest=BUILT, engine_fingerprints=BUILT_PRINTS)
    quantized = render_all(parse_deployment(llmapi({"format": "fp8"})), digest)
    assert quantized.launch_plan["engineDigest"] == {"engine": BUILT, "fingerprints": BUILT_PRINTS}
    plain = render_all(parse_deployment(llmapi()), digest)
    assert "engineDigest" not in plain.launch_plan and "verifyCheckpoint" not in plain.launch_plan
    assert plain.build_job.name.startswith("tritonllm-download-")
    assert plain.build_plan["steps"][-1]["name"] == "download"


def test_the_example_quantizes_seed_001s_awq_on_the_llmapi_path() -> None:
    r = render_example("llmapi-llama3-8b-awq")
    argv = r.build_plan["steps"][-1]["argv"]
    assert argv[argv.index("--qformat") + 1] == "int4_awq"
    assert argv[argv.index("--awq_block_size") + 1] == "128"
    assert r.build_plan["trtllmVersion"] == "1.2.1"
    assert yaml.safe_load(r.repository["tensorrt_llm/1/model.yaml"])["model"] == (
        naming.engine_dir(r.engine_key))


# --- the planner: the record, the cache and the anchor, as for engines ----------------------


def quantized_world(**obs: Any) -> World:
    return World({"storage": {"create": {"size": "10Gi"}}, "runtime": "llmapi", "image": IMAGE,
                  "engine": {"quantization": {"format": "fp8"}}}, **obs)


def test_the_quantization_digest_is_anchored_before_the_repository_is_written() -> None:
    w = quantized_world(build_pods=[build_pod(report(BUILT, BUILT_PRINTS))])
    w.step(opts(w))
    name = w.render.build_job.name
    assert name.startswith("tritonllm-quantize-") and ("Job", name) in w.objects
    w.finish_job(name)
    w.step(opts(w))  # records the report
    assert w.engine_status["digest"] == BUILT
    assert w.cond(c.COND_ENGINE_READY)["status"] == "True"
    assert ("Job", w.render.repository_job.name) not in w.objects  # waits for the digest
    w.step(opts(w))  # renders it: now the repository Job
    assert w.render.launch_plan["engineDigest"] == {"engine": BUILT, "fingerprints": BUILT_PRINTS}
    assert ("Job", w.render.repository_job.name) in w.objects
    assert w.body["status"]["engineAnchor"] == {
        "key": w.render.engine_key, "digest": BUILT, "fingerprintDigest": BUILT_PRINTS}


def test_a_second_deployment_with_the_same_inputs_starts_no_quantization_job() -> None:
    w = quantized_world()
    w.step()
    w.engine_status = {"state": "Ready", "attempts": 0, "builtFor": "someone-else",
                       "digest": BUILT}
    w.objects.pop(("Job", w.render.build_job.name))
    p = w.step(opts(w))
    assert not any(o["metadata"]["name"].startswith("tritonllm-quantize") for o in p.apply)
    assert w.cond(c.COND_ENGINE_READY)["reason"] == "EngineCached"
    assert w.body["status"]["engine"]["cached"] is True
