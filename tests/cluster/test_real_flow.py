"""The whole flow on real containers: examples/cpu-standin.yaml applied with `kubectl apply`,
the operator running (as a host process), everything else real on the real node `real-0`.

The engine-build Job runs `tritonllm build` in the CPU stand-in image (its fake TensorRT-LLM
tools write the engine directory; `artifact.json` lands on the local-path claim), the repository
Job writes the model repository from the operator image, and the serving pod runs
`tritonllm launch` -> mpirun -> two tritonserver ranks from the pod spec the operator rendered,
becomes Ready through its own readiness probe, and answers through the operator's Service: from
the host (kube-proxy's rules) and from another pod by DNS name. A second deployment of the same
model finds the engine in the cache and runs no build. Nothing is faked but the GPUs.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import ROOT
from tests.cluster.operator_harness import (
    Operator,
    condition,
    get_cr,
    jobs,
    run_operator,
    wait_condition,
)
from tests.helpers import grpc_stream, prompt_inputs, ranks, stream_texts
from tritonllm_dev import images
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import NODE_NAME, REGISTRY_ADDR, tolerations
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

EXAMPLE = ROOT / "examples" / "cpu-standin.yaml"
SEED = ROOT / "examples" / "cpu-standin" / "seed.yaml"
PROMPT = "hello world"
# The stand-in's tensorrt_llm model repeats the prompt's tokens (<s> hello world ...); <s> is
# skipped when detokenizing.
EXPECTED_4 = "hello world"  # <s> hello world <s>
COUNT_TRITONSERVERS = (
    "import os\n"
    "print(sum(1 for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/cmdline', 'rb')"
    ".read().split(b'\\0')[0].endswith(b'/tritonserver')))"
)
COLD_TIMEOUT = 420  # typically 20-35 s: pulls, build, repository, two ranks on 2 shared cores
WARM_TIMEOUT = 300  # typically 15 s


RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"
# The securityContext a pod of ours needs in a `restricted` namespace (test clients, seeds).
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                  "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True}


def restrict(cluster: LocalCluster, ns: str) -> None:
    """Enforce Pod Security Admission `restricted` on the namespace: the API server refuses any
    pod (of the operator's, the seed's, a client's) that does not pass it."""
    cluster.kubectl("label", "namespace", ns, RESTRICTED,
                    "pod-security.kubernetes.io/enforce-version=latest", "--overwrite")


def seeded(cluster: LocalCluster, ns: str) -> dict[str, str]:
    """A `restricted` namespace whose store holds the seed's tiny model; the images' refs."""
    restrict(cluster, ns)
    refs = images.ensure_images(REGISTRY_ADDR)
    cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
    cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                    "--timeout=240s", timeout=270)
    return refs


def _diagnose(cluster: LocalCluster, ns: str, op: Operator | None = None) -> str:
    """Everything a person needs when the flow stalls: pods, Jobs, CR, describe and logs."""
    parts = []
    for args in (("get", "pods,jobs,pvc,svc,tllm,tllme", "-n", ns, "-o", "wide"),
                 ("describe", "pods", "-n", ns),
                 ("get", "tllm", "-n", ns, "-o", "yaml"),
                 ("get", "events", "-n", ns, "--sort-by=.lastTimestamp")):
        parts.append(cluster.kubectl(*args, check=False).stdout[-6000:])
    pods = cluster.kubectl_json("get", "pods", "-n", ns)["items"]
    for pod in pods:
        name = pod["metadata"]["name"]
        out = cluster.kubectl("logs", name, "-n", ns, "--all-containers", "--tail=80",
                              check=False)
        parts.append(f"--- logs {name}\n{out.stdout[-4000:]}{out.stderr[-500:]}")
    if op is not None:
        parts.append("--- operator\n" + op.logs()[-4000:])
    return "\n".join(parts)


def _post(url: str, body: dict[str, Any], timeout: float = 60) -> bytes:
    req = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return bytes(resp.read())


def _sse_events(body: bytes) -> list[dict[str, Any]]:
    """The events of a generate_stream answer (server-sent events), each one's JSON."""
    return [json.loads(line[len(b"data:"):]) for line in body.splitlines()
            if line.startswith(b"data:")]


def _service_ip(cluster: LocalCluster, ns: str, name: str) -> str:
    return str(cluster.kubectl_json("get", "svc", name, "-n", ns)["spec"]["clusterIP"])


def asks(body: dict[str, Any]) -> dict[str, str]:
    """How a client asks a deployment (a CR body) for tokens, as the operator's own smoke
    requests do: `model` (the ensemble, or llmapi's tensorrt_llm) and `length_input`."""
    from tritonllm.api.deployment import parse_deployment
    from tritonllm.render.serving import max_tokens_input, model_name

    dep = parse_deployment(body)
    return {"model": model_name(dep), "length_input": max_tokens_input(dep)}


def _first_answer(cluster: LocalCluster, ns: str, name: str, op: Operator | None,
                  timeout: float, *, model: str = "ensemble",
                  length_input: str = "max_tokens") -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait for the CR to be Ready, then for its model (the ensemble, or llmapi's
    tensorrt_llm with its own length input) to answer through the Service from the host;
    return (CR, answer)."""
    try:
        cr = wait_condition(cluster, ns, name, "Progressing", "False", reason="Deployed",
                            timeout=timeout)
    except Exception as exc:
        raise AssertionError(f"{name} not Ready: {exc}\n{_diagnose(cluster, ns, op)}") from exc
    url = f"http://{_service_ip(cluster, ns, name)}:8000/v2/models/{model}/generate"

    def answer() -> dict[str, Any] | None:
        try:
            return dict(json.loads(_post(url, {"text_input": PROMPT, length_input: 4}, 30)))
        except OSError:
            return None

    try:
        out = wait_for(answer, timeout=60, interval=1, what=f"{url} answers")
    except Exception as exc:
        raise AssertionError(f"{url}: {exc}\n{_diagnose(cluster, ns, op)}") from exc
    return cr, out


def _timeline(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    """status.phases once every phase has ended (the last one ends when the pod is Ready,
    which the operator may record a moment after the first answer)."""
    def ended() -> list[dict[str, Any]] | None:
        status = get_cr(cluster, ns, name).get("status") or {}
        phases = status.get("phases") or []
        done = phases and all(p.get("end") for p in phases) and not status.get("phase")
        return list(phases) if done and phases[-1]["name"] == "ModelLoad" else None

    return list(wait_for(ended, timeout=60, interval=1, what=f"{name}'s phases all ended"))


def _pods(cluster: LocalCluster, ns: str, component: str) -> list[dict[str, Any]]:
    return list(cluster.kubectl_json(
        "get", "pods", "-n", ns, "-l", f"app.kubernetes.io/component={component}")["items"])


def _volume_dir(cluster: LocalCluster, ns: str, claim: str) -> Path:
    """The host directory local-path made for the claim (the real node is this machine)."""
    pv = cluster.kubectl_json("get", "pvc", claim, "-n", ns)["spec"]["volumeName"]
    spec = cluster.kubectl_json("get", "pv", pv)["spec"]
    return Path((spec.get("hostPath") or spec["local"])["path"])


def _grpc_stream(address: str) -> list[str]:
    """The texts of one streamed request to the ensemble over gRPC."""
    return stream_texts(grpc_stream(address, "ensemble", prompt_inputs(PROMPT, 3)))


def _client_pod(image: str, url: str) -> dict[str, Any]:
    """A pod from the stand-in image (python3) that POSTs to the Service by its DNS name.

    The node's NetworkPolicy enforcer (kube-router) admits a new pod once it has learnt the
    pod's IP, a moment after the pod starts: until then the connection is refused. So the
    client tries again for up to 20 s, and prints each refusal (any real client behind a
    NetworkPolicy sees the same first moment)."""
    return script_pod(image, "generate-client", answer_script(url, PROMPT, 20, 60))


def answer_script(url: str, prompt: str, refused_seconds: float, timeout: float,
                  length_input: str = "max_tokens") -> str:
    """A Python script that POSTs one prompt to `url` and prints `ANSWER <body>`; a refused
    connection is tried again for `refused_seconds` (printed `REFUSED ...`), the answer waited
    for `timeout` seconds."""
    return (
        "import json, time, urllib.error, urllib.request\n"
        f"req = urllib.request.Request({url!r}, json.dumps({{'text_input': {prompt!r}, "
        f"{length_input!r}: 4}}).encode(), {{'Content-Type': 'application/json'}})\n"
        f"end = time.monotonic() + {refused_seconds}\n"
        "while True:\n"
        "    try:\n"
        f"        print('ANSWER', urllib.request.urlopen(req, timeout={timeout})"
        ".read().decode())\n"
        "        break\n"
        "    except urllib.error.URLError as exc:\n"
        "        if not isinstance(exc.reason, ConnectionRefusedError) "
        "or time.monotonic() > end:\n"
        "            raise\n"
        "        print('REFUSED', exc.reason, flush=True)\n"
        "        time.sleep(0.5)\n"
    )


def script_pod(image: str, name: str, script: str, *, namespace: str | None = None,
               container: str = "client") -> dict[str, Any]:
    """A one-shot pod on the real node, Pod Security restricted, that runs a Python script with
    the stand-in image's python3 (clients and probes of the real-node tests)."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
            "tolerations": tolerations(),
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": RESTRICTED_POD,
            "containers": [{"name": container, "image": image,
                            "command": ["python3", "-c", script],
                            "securityContext": RESTRICTED_CONTAINER,
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}],
        },
    }


def test_cpu_standin_example_serves_on_real_containers(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    refs = images.ensure_images(REGISTRY_ADDR)
    example = yaml.safe_load(EXAMPLE.read_text())
    # The example names the stand-in by its stable tag, the tag ensure_images pushed.
    assert refs["triton-standin"].split("@")[0] == example["spec"]["image"]

    restrict(cluster, ns)
    # What a newcomer types: seed the store, then apply the example (kubectl, not the API).
    cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
    try:
        cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                        "--timeout=240s", timeout=270)
    except Exception as exc:
        raise AssertionError(f"seed Job: {exc}\n{_diagnose(cluster, ns)}") from exc

    with run_operator(cluster, ns, tmp_path, tools_image=refs["operator"]) as op:
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
        cr, out = _first_answer(cluster, ns, "cpu-standin", op, COLD_TIMEOUT)
        cold = time.monotonic() - start
        print(f"\n[measure] cpu-standin cold (engine build): apply -> first answer {cold:.1f} s")
        diag = _diagnose(cluster, ns, op)
        assert out["model_name"] == "ensemble" and out["text_output"] == EXPECTED_4, out

        # Where the time went, phase by phase, from the objects' own timestamps.
        timeline = _timeline(cluster, ns, "cpu-standin")
        print("[measure] cpu-standin cold phases: " + ", ".join(
            f"{p['name']} {p['seconds']:.0f} s" for p in timeline))
        assert [p["name"] for p in timeline] == ["EngineBuild", "RepositoryWrite",
                                                 "WaitingForGpus", "PodStart", "ModelLoad"]
        assert all(p["seconds"] >= 0 and p["source"] for p in timeline), timeline

        # The build ran for real on real-0 and wrote its engine onto the local-path claim.
        key = cr["status"]["engine"]["key"]
        assert cr["status"]["engine"]["cached"] is False, cr["status"]
        assert jobs(cluster, ns, "tritonllm-build-") == [f"tritonllm-build-{key}"], diag
        (build_pod,) = _pods(cluster, ns, "engine-build")
        assert build_pod["spec"]["nodeName"] == NODE_NAME, diag
        (build_state,) = build_pod["status"]["containerStatuses"]
        assert build_state["state"]["terminated"]["exitCode"] == 0, diag
        store = _volume_dir(cluster, ns, "tritonllm-cpu-store")
        engine_dir = store / "engines" / key
        artifact = json.loads((engine_dir / "artifact.json").read_text())
        assert artifact["engineKey"] == key and artifact["worldSize"] == 2, artifact
        assert artifact["gpuProduct"] == "NVIDIA CPU STANDIN", artifact
        assert {p.name for p in engine_dir.glob("rank*.engine")} == {"rank0.engine",
                                                                      "rank1.engine"}
        (repo_pod,) = _pods(cluster, ns, "model-repository")
        assert repo_pod["spec"]["nodeName"] == NODE_NAME, diag
        repos = list((store / "repos" / ns / "_shared").glob("*/repository/ensemble/config.pbtxt"))
        assert len(repos) == 1, diag

        # The serving pod is the rendered one, Ready by its own probe, with world size 2.
        (server,) = _pods(cluster, ns, "server")
        assert server["spec"]["nodeName"] == NODE_NAME, diag
        # tritonserver's container (the OpenAI frontend runs beside it).
        (serving,) = [s for s in server["status"]["containerStatuses"] if s["name"] == "triton"]
        assert all(s["ready"] for s in server["status"]["containerStatuses"]), diag
        assert serving["ready"] is True and serving["restartCount"] == 0, diag
        # As rendered, restricted: the ranks run as UID 1000 on a read-only root filesystem.
        ids = cluster.kubectl(
            "exec", server["metadata"]["name"], "-n", ns, "-c", serving["name"], "--", "sh", "-c",
            "id -u; touch /probe 2>/dev/null && echo writable || echo read-only; "
            "touch /tmp/probe && echo tmp-writable").stdout.split()
        assert ids == ["1000", "read-only", "tmp-writable"], ids
        logs = cluster.kubectl("logs", server["metadata"]["name"], "-n", ns,
                               "-c", serving["name"]).stdout
        exec_line = next((line for line in logs.splitlines()
                          if "tritonllm launch event=exec" in line), "")
        match = re.search(r' argv="(.*)"$', exec_line)
        assert match, logs[:3000]
        argv = json.loads(match.group(1).replace('\\"', '"'))
        assert argv[0].endswith("mpirun") and ranks(argv) == 2, argv
        assert "tritonllm launch event=engine" in logs and " tp=2 pp=1" in logs, logs[:3000]
        assert logs.count("Started HTTPService at 0.0.0.0:8000") == 1, logs[-3000:]
        # Two tritonserver processes (the ranks) in the serving container.
        count = cluster.kubectl(
            "exec", server["metadata"]["name"], "-n", ns, "-c", serving["name"], "--",
            "python3", "-c", COUNT_TRITONSERVERS).stdout
        assert count.strip() == "2", count
        assert condition(cr, "Available")["status"] == "True"
        assert cr["status"]["endpoint"].startswith(f"http://cpu-standin.{ns}.svc:")

        # generate_stream (decoupled) and gRPC streaming, from the host through the ClusterIP.
        ip = _service_ip(cluster, ns, "cpu-standin")
        body = _post(f"http://{ip}:8000/v2/models/ensemble/generate_stream",
                     {"text_input": PROMPT, "max_tokens": 5, "stream": True})
        events = _sse_events(body)
        assert [e.get("text_output") for e in events] == ["", "hello", "world", "", "hello"], \
            body[-2000:]
        assert _grpc_stream(f"{ip}:8001") == ["", "hello", "world"]

        # From another pod, by the Service's DNS name (CoreDNS + kube-proxy in the pod network).
        url = f"http://cpu-standin.{ns}.svc.cluster.local:8000/v2/models/ensemble/generate"
        cluster.apply([_client_pod(refs["triton-standin"], url)], namespace=ns)
        wait_for(lambda: cluster.kubectl(
            "get", "pod", "generate-client", "-n", ns, "-o", "jsonpath={.status.phase}"
        ).stdout in ("Succeeded", "Failed"), timeout=180, what="generate-client done")
        client_log = cluster.kubectl("logs", "generate-client", "-n", ns).stdout
        assert f'"text_output":"{EXPECTED_4}"' in client_log, client_log + _diagnose(cluster, ns)

        # Warm: the first deployment goes (its pods and Jobs collected), a second one of
        # the same model finds the engine in the cache and runs no build.
        builds = op.metric("tritonllm_engine_builds_total")
        cluster.kubectl("delete", "tllm", "cpu-standin", "-n", ns, "--wait=true")
        cluster.kubectl("delete", "pod", "generate-client", "-n", ns, "--wait=true")
        wait_for(lambda: not _pods(cluster, ns, "server")
                 and not jobs(cluster, ns, "tritonllm-build-")
                 and not jobs(cluster, ns, "tritonllm-repo-"),
                 timeout=180, what="first deployment's pods and Jobs collected")
        # engineRetention Retain (the default): the engine's files stay on the claim.
        assert (engine_dir / "artifact.json").is_file() and not jobs(
            cluster, ns, "tritonllm-clean-")
        second = {**example, "metadata": {"name": "cpu-standin-warm"}}
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(second))
        cr2, out2 = _first_answer(cluster, ns, "cpu-standin-warm", op, WARM_TIMEOUT)
        warm = time.monotonic() - start
        print(f"[measure] cpu-standin warm (cached engine): apply -> first answer {warm:.1f} s")
        assert out2["text_output"] == EXPECTED_4, out2
        assert cr2["status"]["engine"]["key"] == key
        assert cr2["status"]["engine"]["cached"] is True, cr2["status"]
        assert condition(cr2, "EngineReady")["reason"] == "EngineCached"
        assert jobs(cluster, ns, "tritonllm-build-") == [], _diagnose(cluster, ns, op)
        assert _pods(cluster, ns, "engine-build") == [], _diagnose(cluster, ns, op)
        assert op.metric("tritonllm_engine_builds_total") == builds
        assert get_cr(cluster, ns, "cpu-standin-warm")["status"]["readyReplicas"] == 1


def test_demo_ends_with_the_cpu_standin_answering_for_real(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """The last step of scripts/demo (tritonllm_dev.demo.serve_for_real), on this cluster: a
    restricted namespace, the seed, an operator, `kubectl apply` of the example, one answer."""
    from tritonllm_dev.demo import serve_for_real

    prompt, answer, took = serve_for_real(cluster, namespace, EXAMPLE, tmp_path / "op.log",
                                          timeout=COLD_TIMEOUT)
    print(f"\n[measure] demo, for real: prompt {prompt!r} -> answer {answer!r}, apply -> first "
          f"answer {took:.1f} s")
    assert (prompt, answer) == (PROMPT, EXPECTED_4)
    labels = cluster.kubectl_json("get", "namespace", namespace)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    (server,) = _pods(cluster, namespace, "server")
    assert server["spec"]["nodeName"] == NODE_NAME
