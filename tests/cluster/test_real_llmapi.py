"""The LLM API runtime on real containers: examples/cpu-standin-llmapi.yaml applied with
`kubectl apply`, the operator running (as a host process), everything else real on the real node
`real-0`.

No engine is built. The fetch Job runs `tritonllm build` in the CPU stand-in image, GPU-less but
placed where the node-local store claim is, and only checks the seeded checkpoint; the repository
Job writes the llmapi model (model.yaml naming that checkpoint, tensor_parallel_size 2); the
serving pod runs `tritonllm launch` -> one tritonserver, whose llmapi model builds
`tensorrt_llm.LLM`, which spawns its second rank itself; the pod becomes Ready through its own
probe under Pod Security `restricted`, answers through the operator's Service from the host and,
by DNS name through the rendered NetworkPolicy, from another pod, and exports the TensorRT-LLM
metric families the autoscaling signals read. A second deployment of the same checkpoint finds it
fetched and runs no Job.

SIMULATED: the GPUs and TensorRT-LLM (the stand-in image's `tensorrt_llm` package: the LLM API's
surface over a deterministic CPU "model", one process per rank; images/README.md). Real: the
node, containers, tritonserver and its Python backend, the llmapi model as the operator renders
it, DNS, kube-proxy, the policy enforcer.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.cases import ROOT
from tests.cluster.operator_harness import condition, jobs, run_operator
from tests.cluster.test_real_flow import (
    COUNT_TRITONSERVERS,
    EXPECTED_4,
    PROMPT,
    _diagnose,
    _first_answer,
    _pods,
    _post,
    _service_ip,
    _sse_events,
    _timeline,
    _volume_dir,
    answer_script,
    asks,
    script_pod,
    seeded,
)
from tritonllm.api import constants as c
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import NODE_NAME
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

EXAMPLE = ROOT / "examples" / "cpu-standin-llmapi.yaml"
NAME = "cpu-standin-llmapi"
COLD_TIMEOUT = 420
WARM_TIMEOUT = 300
# The line each SIMULATED rank process prints when it starts (the stand-in's _standin/ranks.py).
RANK_LINE = re.compile(r"tensorrt_llm SIMULATED rank=(\d+) world=(\d+) pid=(\d+)")
# The metric families of TensorRT-LLM's C++ backend that the llmapi model exports, with label
# values the autoscaling rules and the dashboard select.
FAMILIES = {
    "nv_trt_llm_kv_cache_block_metrics": ("kv_cache_block_type", {"max", "free", "used",
                                                                  "tokens_per"}),
    "nv_trt_llm_request_metrics": ("request_type", {"active", "max", "scheduled", "context",
                                                    "waiting"}),
    "nv_trt_llm_inflight_batcher_metrics": ("inflight_batcher_specific_metric",
                                            {"micro_batch_id", "generation_requests"}),
}


def _labels(metrics: str, family: str, label: str) -> set[str]:
    return set(re.findall(rf'^{family}{{[^}}]*{label}="([^"]+)"', metrics, re.M))


def test_cpu_standin_llmapi_example_serves_on_real_containers(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    t0 = time.monotonic()
    refs = seeded(cluster, ns)  # restricted namespace; the store holds the tiny checkpoint
    example = yaml.safe_load(EXAMPLE.read_text())
    assert refs["triton-standin"].split("@")[0] == example["spec"]["image"]
    ask = asks(example)
    assert ask == {"model": "tensorrt_llm", "length_input": "sampling_param_max_tokens"}

    with run_operator(cluster, ns, tmp_path, tools_image=refs["operator"]) as op:
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
        cr, out = _first_answer(cluster, ns, NAME, op, COLD_TIMEOUT, **ask)
        cold = time.monotonic() - start
        print(f"\n[measure] cpu-standin-llmapi cold (tp 2, no engine build): apply -> first "
              f"answer {cold:.1f} s")
        diag = _diagnose(cluster, ns, op)
        assert out["model_name"] == "tensorrt_llm" and out["text_output"] == EXPECTED_4, out
        timeline = _timeline(cluster, ns, NAME)
        print("[measure] cpu-standin-llmapi cold phases: " + ", ".join(
            f"{p['name']} {p['seconds']:.0f} s" for p in timeline))
        assert [p["name"] for p in timeline] == ["EngineBuild", "RepositoryWrite",
                                                 "WaitingForGpus", "PodStart", "ModelLoad"]

        # No engine: the fetch Job, on real-0 and without a GPU, only checked the checkpoint.
        key = cr["status"]["engine"]["key"]
        assert jobs(cluster, ns, "tritonllm-build-") == [], diag
        assert jobs(cluster, ns, "tritonllm-download-") == [f"tritonllm-download-{key}"], diag
        (fetch,) = _pods(cluster, ns, c.COMPONENT_BUILD)
        assert fetch["spec"]["nodeName"] == NODE_NAME, diag
        (fetch_state,) = fetch["status"]["containerStatuses"]
        assert fetch_state["state"]["terminated"]["exitCode"] == 0, diag
        assert c.GPU_RESOURCE not in (fetch["spec"]["containers"][0]["resources"]
                                      .get("limits") or {})
        store = _volume_dir(cluster, ns, "tritonllm-cpu-store")
        assert not list((store / "engines" / key).glob("rank*.engine"))
        (model_yaml,) = (store / "repos" / ns / "_shared").glob(
            "*/repository/tensorrt_llm/1/model.yaml")
        llm_args = yaml.safe_load(model_yaml.read_text())
        assert llm_args["model"] == "/store/models/tiny-gpt2", llm_args
        assert llm_args["tensor_parallel_size"] == 2 and llm_args["backend"] == "pytorch"

        # One serving pod, Ready by its own probe, restricted: one tritonserver (no mpirun),
        # whose LLM started both ranks of tp 2 as processes of their own.
        (server,) = _pods(cluster, ns, c.COMPONENT_SERVER)
        pod = server["metadata"]["name"]
        assert server["spec"]["nodeName"] == NODE_NAME, diag
        # tritonserver's container (the OpenAI frontend runs beside it).
        (serving,) = [s for s in server["status"]["containerStatuses"] if s["name"] == "triton"]
        assert all(s["ready"] for s in server["status"]["containerStatuses"]), diag
        assert serving["ready"] is True and serving["restartCount"] == 0, diag
        ids = cluster.kubectl(
            "exec", pod, "-n", ns, "-c", serving["name"], "--", "sh", "-c",
            "id -u; touch /probe 2>/dev/null && echo writable || echo read-only").stdout.split()
        assert ids == ["1000", "read-only"], ids
        logs = cluster.kubectl("logs", pod, "-n", ns, "-c", serving["name"]).stdout
        exec_line = next((line for line in logs.splitlines()
                          if "tritonllm launch event=exec" in line), "")
        match = re.search(r' argv="(.*)"$', exec_line)
        assert match, logs[:3000]
        argv = json.loads(match.group(1).replace('\\"', '"'))
        assert argv[0].endswith("/tritonserver") and "mpirun" not in " ".join(argv), argv
        assert logs.count("Started HTTPService at 0.0.0.0:8000") == 1, logs[-3000:]
        count = cluster.kubectl("exec", pod, "-n", ns, "-c", serving["name"], "--",
                                "python3", "-c", COUNT_TRITONSERVERS).stdout
        assert count.strip() == "1", count
        ranks = {(int(r), int(w)): int(p) for r, w, p in RANK_LINE.findall(logs)}
        assert set(ranks) == {(0, 2), (1, 2)}, logs[-3000:]
        assert len(set(ranks.values())) == 2, ranks  # one process per rank
        assert condition(cr, "Available")["status"] == "True"
        assert cr["status"]["endpoint"] == (
            f"http://{NAME}.{ns}.svc:8000/v2/models/tensorrt_llm/generate_stream")

        # Streaming (decoupled) through the Service: the pieces add up to the whole answer.
        ip = _service_ip(cluster, ns, NAME)
        base = f"http://{ip}:8000/v2/models/tensorrt_llm"
        whole = json.loads(_post(f"{base}/generate", {"text_input": PROMPT,
                                                       ask["length_input"]: 5}))["text_output"]
        body = _post(f"{base}/generate_stream", {"text_input": PROMPT, "streaming": True,
                                                 ask["length_input"]: 5})
        pieces = [e["text_output"] for e in _sse_events(body)]
        assert whole.startswith(EXPECTED_4) and len(pieces) > 1, (whole, body[-2000:])
        assert "".join(pieces) == whole, (pieces, whole)

        # The metric families of TensorRT-LLM's C++ backend, from the pod's metrics port.
        with urllib.request.urlopen(f"http://{server['status']['podIP']}:{c.METRICS_PORT}"
                                    "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        for family, (label, values) in FAMILIES.items():
            assert values <= _labels(metrics, family, label), (family, metrics[-3000:])

        # From another pod, by the Service's DNS name, through the rendered NetworkPolicy.
        url = f"http://{NAME}.{ns}.svc.cluster.local:8000/v2/models/tensorrt_llm/generate"
        script = answer_script(url, PROMPT, 20, 60, ask["length_input"])
        cluster.apply([script_pod(refs["triton-standin"], "generate-client", script)],
                      namespace=ns)
        wait_for(lambda: cluster.kubectl(
            "get", "pod", "generate-client", "-n", ns, "-o", "jsonpath={.status.phase}"
        ).stdout in ("Succeeded", "Failed"), timeout=180, what="generate-client done")
        client_log = cluster.kubectl("logs", "generate-client", "-n", ns).stdout
        assert f'"text_output":"{EXPECTED_4}"' in client_log, client_log + _diagnose(cluster, ns)

        # Warm: a second deployment of the same checkpoint finds it fetched: no Job runs.
        cluster.kubectl("delete", "tllm", NAME, "-n", ns, "--wait=true")
        wait_for(lambda: not _pods(cluster, ns, c.COMPONENT_SERVER)
                 and not jobs(cluster, ns, "tritonllm-download-"),
                 timeout=180, what="first deployment's pods and Jobs collected")
        second = {**example, "metadata": {"name": f"{NAME}-warm"}}
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(second))
        cr2, out2 = _first_answer(cluster, ns, f"{NAME}-warm", op, WARM_TIMEOUT, **ask)
        warm = time.monotonic() - start
        print(f"[measure] cpu-standin-llmapi warm (checkpoint fetched): apply -> first answer "
              f"{warm:.1f} s")
        assert out2["text_output"] == EXPECTED_4, out2
        assert cr2["status"]["engine"]["key"] == key
        assert cr2["status"]["engine"]["cached"] is True, cr2["status"]
        assert jobs(cluster, ns, "tritonllm-download-") == [], _diagnose(cluster, ns, op)
    print(f"[measure] test_cpu_standin_llmapi_example_serves_on_real_containers wall "
          f"{time.monotonic() - t0:.1f} s")
