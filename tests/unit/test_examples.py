"""Golden tests: what matters in each seed scenario, pinned on the rendered output."""

from __future__ import annotations

import json

import pytest

from tests.cases import EXAMPLES
from tests.helpers import container, params, pbtxt, ranks, render_example
from tritonllm.api import constants as c


def _step(rendered, name):
    return next(s for s in rendered.build_plan["steps"] if s["name"] == name)


def _flag(argv, flag):
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_without_placeholders(path) -> None:
    r = render_example(path.stem)
    assert r.objects
    for rel, body in r.repository.items():
        if rel.endswith(("config.pbtxt", ".yaml")):
            assert "${" not in body, rel
        if rel.endswith("config.pbtxt"):
            pbtxt(body)


def test_llama2_7b_tp4() -> None:
    r = render_example("llama2-7b-tp4")
    dep = r.one("Deployment")
    assert not r.by_kind("LeaderWorkerSet")
    res = container(dep)["resources"]
    assert res["limits"][c.GPU_RESOURCE] == "4"
    assert ranks(r.launch_plan["argv"]) == 4 and r.launch_plan["worldSize"] == 4
    trt = pbtxt(r.repository["tensorrt_llm/config.pbtxt"])
    assert trt.max_batch_size == 64
    assert trt.dynamic_batching.max_queue_delay_microseconds == 600
    p = params(trt)
    assert p["gpt_model_type"] == "inflight_batching"
    assert p["kv_cache_free_gpu_mem_fraction"] == "0.5"
    assert p["max_tokens_in_paged_kv_cache"] == "2560"
    assert p["max_attention_window_size"] == "2560"
    assert pbtxt(r.repository["preprocessing/config.pbtxt"]).max_batch_size == 64
    conv = _step(r, "convert")["argv"]
    assert _flag(conv, "--tp_size") == "4" and _flag(conv, "--dtype") == "float16"
    build = _step(r, "build")["argv"]
    assert _flag(build, "--gemm_plugin") == "float16"
    # TensorRT-LLM 0.9 has no --max_seq_len: output = seq - input.
    assert "--max_seq_len" not in build and _flag(build, "--max_output_len") == "1024"
    assert _flag(build, "--workers") == "4"
    job = r.build_job
    assert container(job, "build")["resources"]["limits"][c.GPU_RESOURCE] == "4"


def test_llama3_8b_awq() -> None:
    r = render_example("llama3-8b-awq")
    q = _step(r, "quantize")["argv"]
    assert _flag(q, "--qformat") == "int4_awq" and _flag(q, "--awq_block_size") == "128"
    assert _flag(q, "--dtype") == "bfloat16"
    build = _step(r, "build")["argv"]
    assert _flag(build, "--gemm_plugin") == "bfloat16"
    assert _flag(build, "--gpt_attention_plugin") == "bfloat16"
    trt = pbtxt(r.repository["tensorrt_llm/config.pbtxt"])
    assert trt.max_batch_size == 1
    p = params(trt)
    assert p["kv_cache_free_gpu_mem_fraction"] == "0.5"
    assert p["max_tokens_in_paged_kv_cache"] == "2560"
    assert p["exclude_input_in_output"].lower() == "true"
    assert p["enable_kv_cache_reuse"].lower() == "false"
    # The token is a file in the build pod only (the download step reads it), never an env var.
    build_pod = r.build_job["spec"]["template"]["spec"]
    (vol,) = [v for v in build_pod["volumes"] if v["name"] == "hf-token"]
    assert vol["secret"]["secretName"] == "hf-token"
    assert vol["secret"]["items"] == [{"key": "HF_TOKEN", "path": "token"}]
    assert {"name": "hf-token", "mountPath": c.HF_TOKEN_MOUNT, "readOnly": True} in container(
        r.build_job, "build")["volumeMounts"]
    assert _step(r, "download")["tokenFile"] == c.HF_TOKEN_FILE
    serving = r.workload["spec"]["template"]["spec"]
    for obj in (r.build_job["spec"]["template"]["spec"], serving):
        for ctr in obj["containers"] + obj.get("initContainers", []):
            assert all(e["name"] != "HF_TOKEN" and "secretKeyRef" not in e.get("valueFrom", {})
                       for e in ctr.get("env", [])), ctr["name"]
    assert all(v["name"] != "hf-token" for v in serving["volumes"])
    assert r.launch_plan["trtllmVersion"] == "0.13.0"


def test_llama2_7b_v1() -> None:
    r = render_example("llama2-7b-v1")
    trt = pbtxt(r.repository["tensorrt_llm/config.pbtxt"])
    p = params(trt)
    assert p["gpt_model_type"] == "V1"
    assert p["batch_scheduler_policy"] == "guaranteed_no_evict"
    assert trt.model_transaction_policy.decoupled is False
    affinity = r.one("Deployment")["spec"]["template"]["spec"]["affinity"]
    term = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "NVIDIA-A100-SXM4-80GB"
    ]


def test_llama2_7b_auto() -> None:
    r = render_example("llama2-7b-auto")  # the planner chose tp=2: two GPUs, two ranks
    assert container(r.one("Deployment"))["resources"]["limits"][c.GPU_RESOURCE] == "2"
    assert r.launch_plan["worldSize"] == 2 and ranks(r.launch_plan["argv"]) == 2
    conv = _step(r, "convert")["argv"]
    assert (_flag(conv, "--tp_size"), _flag(conv, "--pp_size")) == ("2", "1")


def test_llama_70b_multinode() -> None:
    r = render_example("llama-70b-multinode")
    assert not r.by_kind("Deployment")
    lws = r.one("LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        res = container(lws, template=role)["resources"]
        assert res["limits"][c.GPU_RESOURCE] == "8"
    assert r.launch_plan["worldSize"] == 16 and ranks(r.launch_plan["argv"]) == 16
    conv = _step(r, "convert")["argv"]
    assert (_flag(conv, "--tp_size"), _flag(conv, "--pp_size")) == ("8", "2")
    assert _flag(_step(r, "build")["argv"], "--workers") == "8"
    assert "startupProbe" in container(lws, template="leaderTemplate")
    assert "startupProbe" not in container(lws, template="workerTemplate")


def test_llmapi_example() -> None:
    r = render_example("llmapi-llama3-8b")
    job = r.build_job  # a download: no GPU
    assert job["metadata"]["name"].startswith("tritonllm-download-")
    assert c.GPU_RESOURCE not in json.dumps(container(job, "build")["resources"])
    assert "tensorrt_llm/1/model.yaml" in r.repository
    assert "ensemble/config.pbtxt" not in r.repository
    assert "tensor_parallel_size: 2" in r.repository["tensorrt_llm/1/model.yaml"]
    assert r.launch_plan["argv"][0].endswith("tritonserver")  # one process, LLM() spawns ranks
    hpa = r.one("HorizontalPodAutoscaler")
    assert hpa["spec"]["maxReplicas"] == 4
    assert "replicas" not in r.one("Deployment")["spec"]  # the HPA owns it
    assert r.endpoint.endswith("/v2/models/tensorrt_llm/generate_stream")


def test_gpt2_medium() -> None:
    r = render_example("gpt2-medium")
    conv = _step(r, "convert")
    assert conv["exampleDir"] == "gpt"
    assert _flag(_step(r, "build")["argv"], "--max_seq_len") == "1024"
    assert r.one("PersistentVolumeClaim")["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert ranks(r.launch_plan["argv"]) == 1
    assert params(pbtxt(r.repository["tensorrt_llm/config.pbtxt"]))["gpt_model_type"] == (
        "inflight_fused_batching"
    )


def test_cpu_standin() -> None:
    """The real-node example: world size 2 on the stand-in image and two stand-in GPUs,
    placed on real-0, its store a local-path claim that the repository Job reaches too."""
    r = render_example("cpu-standin")
    assert r.launch_plan["worldSize"] == 2 and ranks(r.launch_plan["argv"]) == 2
    assert r.launch_plan["trtllmVersion"] == "1.2.1"
    dep = r.one("Deployment")
    triton = container(dep)
    assert triton["image"] == "127.0.0.1:5000/tritonllm/triton-standin:26.07-trtllm-python-py3"
    assert triton["resources"]["limits"] == {"cpu": "900m", "memory": "4Gi", c.GPU_RESOURCE: "2"}
    # With the OpenAI frontend's request, the pod asks one of the real node's two CPUs.
    pod = r.one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert sum(int(k["resources"]["requests"]["cpu"].removesuffix("m")) for k in pod) == 1000
    pvc = r.one("PersistentVolumeClaim")["spec"]
    assert pvc["storageClassName"] == "local-path" and pvc["accessModes"] == ["ReadWriteOnce"]
    real = {"key": "tritonllm.io/real-node", "operator": "Exists", "effect": "NoSchedule"}
    gpu = {"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
    for spec in (dep["spec"]["template"]["spec"], r.build_job["spec"]["template"]["spec"],
                 r.repository_job["spec"]["template"]["spec"]):
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": "real-0"}
        assert real in spec["tolerations"] and gpu in spec["tolerations"]
        (store,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
        assert store["persistentVolumeClaim"]["claimName"] == "tritonllm-cpu-store"
    terms = dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["NVIDIA-CPU-STANDIN"]
    build = _step(r, "build")["argv"]
    assert _flag(build, "--workers") == "2"
    assert _step(r, "download")["kind"] == "local"
    assert r.build_plan["weightsDir"] == "/store/models/tiny-gpt2"
    trt = params(pbtxt(r.repository["tensorrt_llm/config.pbtxt"]))
    assert trt["gpt_model_type"] == "inflight_fused_batching"
    assert pbtxt(r.repository["tensorrt_llm/config.pbtxt"]).model_transaction_policy.decoupled


def test_cpu_standin_llmapi() -> None:
    """The real-node llmapi example: the fetch Job (no GPU) placed where the node-local store
    claim is, model.yaml loading the seeded checkpoint itself (not the key's directory, which
    holds only the fetch's step markers), one tritonserver holding both stand-in GPUs."""
    import yaml

    r = render_example("cpu-standin-llmapi")
    assert r.build_job["metadata"]["name"].startswith("tritonllm-download-")
    job = r.build_job["spec"]["template"]["spec"]
    assert job["nodeSelector"] == {"kubernetes.io/hostname": "real-0"}
    real = {"key": "tritonllm.io/real-node", "operator": "Exists", "effect": "NoSchedule"}
    assert real in job["tolerations"] and "affinity" not in job
    assert c.GPU_RESOURCE not in container(r.build_job, "build")["resources"].get("limits", {})
    assert [s["kind"] for s in r.build_plan["steps"]] == ["local"]
    llm = yaml.safe_load(r.repository["tensorrt_llm/1/model.yaml"])
    assert llm["model"] == llm["tokenizer"] == "/store/models/tiny-gpt2"
    assert llm["tensor_parallel_size"] == 2 and llm["backend"] == "pytorch"
    argv = r.launch_plan["argv"]
    assert argv[0].endswith("/tritonserver") and r.launch_plan["worldSize"] == 2
    assert container(r.one("Deployment"))["resources"]["limits"][c.GPU_RESOURCE] == "2"
    assert r.repository_job["spec"]["template"]["spec"]["nodeSelector"] == job["nodeSelector"]


@pytest.mark.parametrize(("cpu", "memory", "requests"), [
    ("1", "4Gi", {"cpu": "1", "memory": "4Gi"}),
    ("500m", "2Gi", {"cpu": "500m", "memory": "2Gi"}),
    ("8", "64Gi", {"cpu": "1", "memory": "4Gi"}),
])
def test_a_download_requests_no_more_than_the_pod_template_allows(cpu, memory, requests) -> None:
    """The fetch Job's pod (no GPU) asks for one CPU and 4 GiB at most, never more than the
    pod template's figures: a memory request above its limit would be refused at admission,
    and on a small node a CPU more than the serving pod's would keep it Pending."""
    from tests.helpers import example
    from tritonllm.render import render_all

    dep = example("cpu-standin-llmapi", podTemplate={"resources": {"cpu": cpu, "memory": memory}})
    res = container(render_all(dep).build_job, "build")["resources"]
    assert res == {"requests": requests, "limits": {"memory": memory}}


def test_repository_job_is_placed_only_when_the_pod_template_places_pods() -> None:
    """Examples without nodeSelector/tolerations keep a repository Job that runs anywhere."""
    spec = render_example("gpt2-medium").repository_job["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec and "tolerations" not in spec


def test_only_the_real_node_example_is_left_out_of_the_simulated_runs() -> None:
    """scripts/demo and test_example_reaches_ready (kwok) skip the real-node example."""
    import yaml

    from tests.cases import SIMULATED_EXAMPLES
    from tritonllm_dev.demo import needs_real_node

    real = {p.stem for p in EXAMPLES if needs_real_node(yaml.safe_load(p.read_text()))}
    assert real == {"cpu-standin", "cpu-standin-autoscaling", "cpu-standin-multinode",
                    "cpu-standin-llmapi", "cpu-standin-llmapi-multinode"}
    assert {p.stem for p in EXAMPLES} - {p.stem for p in SIMULATED_EXAMPLES} == real


def test_cpu_standin_multinode() -> None:
    """The real-node multi-node example: a LeaderWorkerSet group of two pods of one stand-in GPU,
    one headless Service per group (named after its leader pod, not the client Service's name),
    mpirun over SSH with the rank map printed."""
    r = render_example("cpu-standin-multinode")
    lws = r.one("LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["networkConfig"] == {"subdomainPolicy": "UniquePerReplica"}
    assert r.launch_plan["worldSize"] == 2 and ranks(r.launch_plan["argv"]) == 2
    argv = r.launch_plan["argv"]
    assert "--display-map" in argv and "--hostfile" in argv
    assert r.one("Service")["metadata"]["name"] == lws["metadata"]["name"]


def test_cpu_standin_llmapi_multinode() -> None:
    """The real-node llmapi group: the same two-pod group as the engine example (same size,
    subdomain policy, SSH plan, non-root user), no engine build (the fetch Job needs no GPU),
    every rank under trtllm-llmapi-launch, and model.yaml's tp 2 spanning the two pods."""
    import yaml

    r, engine = render_example("cpu-standin-llmapi-multinode"), render_example(
        "cpu-standin-multinode")
    lws, engine_lws = r.one("LeaderWorkerSet"), engine.one("LeaderWorkerSet")
    for field in ("networkConfig", "startupPolicy"):
        assert lws["spec"][field] == engine_lws["spec"][field]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert r.launch_plan["ssh"] == engine.launch_plan["ssh"]
    assert r.build_job["metadata"]["name"].startswith("tritonllm-download-")
    argv = r.launch_plan["argv"]
    segment = argv.index("-n")
    assert argv[:segment] == engine.launch_plan["argv"][:segment]
    assert argv[segment:segment + 4] == ["-n", "2", "trtllm-llmapi-launch",
                                         "/opt/tritonserver/bin/tritonserver"]
    llm = yaml.safe_load(r.repository["tensorrt_llm/1/model.yaml"])
    assert llm["tensor_parallel_size"] == 2 and llm["pipeline_parallel_size"] == 1
    for template in ("leaderTemplate", "workerTemplate"):
        pod = lws["spec"]["leaderWorkerTemplate"][template]["spec"]
        assert pod["securityContext"]["runAsUser"] == 1000
        assert container(lws, template=template)["resources"]["limits"][c.GPU_RESOURCE] == "1"
