"""The OpenAI frontend as the operator renders it: its configuration against the model
repository it calls, the sidecar, the ports around it, and the rule that upgrading the operator
restarts no running pods."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tests.cases import EXAMPLES, cr
from tests.helpers import container, example_body, pbtxt
from tests.unit.test_plan import World
from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, TritonLLMDeployment, parse_deployment
from tritonllm.api.versions import NGC_TRTLLM
from tritonllm.render import Rendered, RenderOptions, autoscaling, frontend, render_all, validate
from tritonllm.render.jobs import configmap_key
from tritonllm.render.pod import PLAN_VOLUME
from tritonllm.render.serving import template_revision
from tritonllm.triton.openai import FRONTEND_CONFIG_KEY, PARAMETERS, FrontendConfig

# Every TensorRT-LLM version the NGC table knows (the first NGC image of each), and one after
# the engine path (llmapi only) in an image whose tag names none.
IMAGES = {v: f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"
          for tag, v in sorted(NGC_TRTLLM.items(), reverse=True)}
IMAGES["1.3.0"] = "registry.example/tritonserver:custom"
VERSIONS = sorted(IMAGES)
WIRE_TYPE = {"BYTES": mc.TYPE_STRING, "BOOL": mc.TYPE_BOOL, "INT32": mc.TYPE_INT32,
             "INT64": mc.TYPE_INT64, "UINT64": mc.TYPE_UINT64, "FP32": mc.TYPE_FP32}


def _with_version(path: Any, version: str) -> TritonLLMDeployment | None:
    body = example_body(path.stem)
    body["spec"]["image"] = IMAGES[version]
    body["spec"]["trtllmVersion"] = version
    try:
        return parse_deployment(body)
    except InvalidDeployment:  # a version the example's runtime or quantization cannot use
        return None


CASES = [
    (path.stem, version, dep)
    for path in EXAMPLES
    for version in VERSIONS
    if (dep := _with_version(path, version)) is not None
]


def served_config(r: Rendered) -> FrontendConfig:
    """openai.json as the frontend reads it: from the plan ConfigMap the pods mount."""
    data = r.repository_configmap["data"]
    return FrontendConfig.model_validate_json(data[configmap_key(FRONTEND_CONFIG_KEY)])


def test_every_example_and_version_has_cases() -> None:
    # Each example renders under several versions; llmapi ones only from 0.19 on.
    per_example = {name for name, _, _ in CASES}
    assert per_example == {p.stem for p in EXAMPLES}
    assert len(CASES) > 3 * len(EXAMPLES)


@pytest.mark.parametrize(("name", "version", "dep"), CASES,
                         ids=[f"{n}-{v}" for n, v, _ in CASES])
def test_every_input_the_frontend_sends_is_in_the_model_it_calls(
    name: str, version: str, dep: TritonLLMDeployment
) -> None:
    r = render_all(dep)
    cfg = served_config(r)
    model = pbtxt(r.repository[f"{cfg.triton_model}/config.pbtxt"])
    inputs = {t.name: t for t in model.input}
    outputs = {t.name for t in model.output}
    assert set(cfg.inputs) <= set(PARAMETERS)
    assert {"prompt", "max_tokens"} <= set(cfg.inputs)
    for parameter, tensor in cfg.inputs.items():
        assert tensor.name in inputs, (parameter, tensor.name)
        assert inputs[tensor.name].data_type == WIRE_TYPE[tensor.dtype], (parameter, tensor)
    assert set(cfg.outputs.values()) <= outputs
    assert cfg.batched == (model.max_batch_size > 0)
    # An ensemble streams when the model that generates is decoupled (Triton's ensembles take
    # it from their steps); llmapi's model is that model.
    generator = pbtxt(r.repository["tensorrt_llm/config.pbtxt"])
    assert cfg.decoupled == generator.model_transaction_policy.decoupled
    assert ("stream" in cfg.inputs) == cfg.decoupled
    limits = dep.spec.engine.limits
    assert (cfg.max_input_len, cfg.max_seq_len) == (limits.maxInputLen, limits.maxSeqLen)
    assert cfg.max_input_len + cfg.default_max_tokens <= cfg.max_seq_len


@pytest.mark.parametrize(("name", "version", "dep"), CASES[::7],
                         ids=[f"{n}-{v}" for n, v, _ in CASES[::7]])
def test_the_frontend_reads_the_tokenizer_the_model_reads(
    name: str, version: str, dep: TritonLLMDeployment
) -> None:
    r = render_all(dep)
    cfg = served_config(r)
    if dep.spec.runtime == "llmapi":
        assert f"tokenizer: {json.dumps(cfg.tokenizer_dir)}" in r.repository[
            "tensorrt_llm/1/model.yaml"]
        assert cfg.add_special_tokens  # the LLM API's own default
    else:
        pre = pbtxt(r.repository["preprocessing/config.pbtxt"])
        assert pre.parameters["tokenizer_dir"].string_value == cfg.tokenizer_dir
        flag = pre.parameters["add_special_tokens"].string_value
        assert cfg.add_special_tokens == (flag == "true")
    # ... at the same path in the frontend's container, the store mounted read-only
    sidecar = container(r.workload.body, c.OPENAI_CONTAINER,
                        "leaderTemplate" if dep.spec.topology.multi_node else "template")
    store = next(m for m in sidecar["volumeMounts"] if m["mountPath"] == c.STORE_MOUNT)
    assert store["readOnly"] is True
    assert cfg.tokenizer_dir.startswith(c.STORE_MOUNT + "/") or any(
        cfg.tokenizer_dir.startswith(m["mountPath"]) for m in sidecar["volumeMounts"])


def test_engine_versions_name_the_seed_as_their_templates_do() -> None:
    old = render_all(parse_deployment(cr({"image": IMAGES["0.13.0"]})))
    new = render_all(parse_deployment(cr({"image": IMAGES["1.2.1"]})))
    assert served_config(old).inputs["seed"].name == "random_seed"
    assert served_config(new).inputs["seed"].name == "seed"


def test_llmapi_calls_its_single_model_unbatched() -> None:
    dep = parse_deployment(cr({"image": IMAGES["1.2.1"], "runtime": "llmapi",
                               "serving": {"streaming": True}}))
    cfg = served_config(render_all(dep))
    assert (cfg.triton_model, cfg.batched, cfg.decoupled) == ("tensorrt_llm", False, True)
    assert cfg.inputs["max_tokens"].name == "sampling_param_max_tokens"
    assert cfg.inputs["stream"].name == "streaming"
    assert cfg.outputs == {"text": "text_output", "log_probs": "output_log_probs",
                           "num_output_tokens": "num_output_tokens"}
    assert cfg.inputs["return_num_output_tokens"].name == "return_num_output_tokens"


def test_an_ensemble_that_echoes_the_prompt_says_so() -> None:
    echo = parse_deployment(cr({"serving": {"excludeInputInOutput": False}}))
    r = render_all(echo)
    assert served_config(r).output_includes_prompt
    tensorrt_llm = pbtxt(r.repository["tensorrt_llm/config.pbtxt"])
    assert tensorrt_llm.parameters["exclude_input_in_output"].string_value == "false"
    assert not served_config(render_all(parse_deployment(cr()))).output_includes_prompt


def test_the_spec_reaches_the_config() -> None:
    dep = parse_deployment(cr({"openai": {"servedModelName": "meta-llama/Llama-2-7b",
                                          "chatTemplate": "{{ messages[0].content }}",
                                          "maxConcurrentRequests": 8}}))
    cfg = served_config(render_all(dep))
    assert cfg.served_model_name == "meta-llama/Llama-2-7b"
    assert cfg.chat_template == "{{ messages[0].content }}"
    assert cfg.max_concurrent_requests == 8
    assert served_config(render_all(parse_deployment(cr()))).served_model_name == "demo"


@pytest.mark.parametrize("name", ["a b", "/x", "x/", "x//y", "-x", "x" * 129, "x?y", "x%2f"])
def test_served_names_a_url_path_cannot_carry_are_refused(name: str) -> None:
    with pytest.raises(InvalidDeployment) as err:
        parse_deployment(cr({"openai": {"servedModelName": name}}))
    assert "openai.servedModelName" in str(err.value)


def test_a_memory_request_above_its_limit_is_reported() -> None:
    dep = parse_deployment(cr({"openai": {"resources": {"memory": "2Gi", "memoryLimit": "1Gi"}}}))
    assert [p.field for p in validate(dep)] == ["spec.openai.resources.memory"]
    assert validate(parse_deployment(cr())) == []


# --- the sidecar and the ports ---------------------------------------------------------------


def test_the_sidecar_runs_the_frontend_beside_triton() -> None:
    dep = parse_deployment(cr())
    r = render_all(dep, RenderOptions())
    pod = r.workload["spec"]["template"]["spec"]
    assert [x["name"] for x in pod["containers"]] == ["triton", c.OPENAI_CONTAINER]
    sidecar = pod["containers"][1]
    assert sidecar["image"] == RenderOptions().settings.tools_image
    assert sidecar["args"] == ["openai", "--config", f"{c.PLAN_MOUNT}/{FRONTEND_CONFIG_KEY}"]
    assert sidecar["ports"] == [{"name": "openai", "containerPort": 9000, "protocol": "TCP"}]
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "openai"}
    assert sidecar["lifecycle"] == pod["containers"][0]["lifecycle"]  # drains with Triton
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"memory": "1Gi"}}
    plan = next(v for v in pod["volumes"] if v["name"] == PLAN_VOLUME)
    assert {i["path"] for i in plan["configMap"]["items"]} == {"launch.json", FRONTEND_CONFIG_KEY}
    assert plan["configMap"]["name"] == r.repository_configmap.name
    assert r.openai.served and r.openai.url == "http://demo.default.svc:9000/v1"


def test_multi_node_leaders_run_it_and_workers_do_not() -> None:
    r = render_all(parse_deployment(example_body("llama-70b-multinode")))
    lwt = r.workload["spec"]["leaderWorkerTemplate"]
    names = {t: [x["name"] for x in lwt[t]["spec"]["containers"]]
             for t in ("leaderTemplate", "workerTemplate")}
    assert names == {"leaderTemplate": ["triton", "openai"], "workerTemplate": ["triton"]}


def test_the_verification_pod_serves_it_too() -> None:
    r = render_all(parse_deployment(cr()))
    assert r.verify_workload is not None
    pod = r.verify_workload["spec"]["template"]["spec"]
    assert [x["name"] for x in pod["containers"]] == ["triton", c.OPENAI_CONTAINER]


def test_the_smoke_requests_reach_the_openai_port_from_the_operator_namespace() -> None:
    from tritonllm.api.settings import OperatorSettings

    opts = RenderOptions(settings=OperatorSettings(operator_namespace="tritonllm-system"))
    np = render_all(parse_deployment(cr()), opts).network_policy
    assert np is not None
    smoke = np["spec"]["ingress"][1]
    assert [p["port"] for p in smoke["ports"]] == [c.HTTP_PORT, c.OPENAI_PORT]


def test_off_means_no_container_port_or_config() -> None:
    r = render_all(parse_deployment(cr({"openai": {"enabled": False}})))
    pod = r.workload["spec"]["template"]["spec"]
    assert [x["name"] for x in pod["containers"]] == ["triton"]
    assert FRONTEND_CONFIG_KEY not in r.repository_configmap["data"]
    assert "openai" not in {p["name"] for p in r.service["spec"]["ports"]}
    assert r.network_policy is not None
    assert c.OPENAI_PORT not in {p["port"] for p in r.network_policy["spec"]["ingress"][0]["ports"]}
    assert not r.openai.served and r.openai.message == frontend.OFF_BY_SPEC


def test_deployments_differing_only_by_name_share_their_repository() -> None:
    a = render_all(parse_deployment(cr()))
    b = render_all(parse_deployment(cr(metadata={"name": "other"})))
    assert a.repository_key == b.repository_key  # one repository Job and directory
    assert served_config(a).served_model_name == "demo"
    assert served_config(b).served_model_name == "other"
    assert a.repository_configmap.name != b.repository_configmap.name


def test_a_change_of_the_frontend_settings_is_a_new_revision() -> None:
    a = render_all(parse_deployment(cr()))
    b = render_all(parse_deployment(cr({"openai": {"maxConcurrentRequests": 8}})))
    assert a.repository_key != b.repository_key
    assert template_revision(a.workload.body) != template_revision(b.workload.body)


def test_the_activator_forwards_and_holds_the_openai_port() -> None:
    spec = {"autoscaling": {"autoscaler": "KEDA", "minReplicas": 0, "maxReplicas": 2,
                            "prometheusUrl": "http://prometheus.monitoring:9090"}}
    dep = parse_deployment(cr(spec))
    r = render_all(dep)
    config, backend, policy, workload = (o.body for o in r.activator)
    cfg = config["data"]["haproxy.cfg"]
    assert "frontend openai\n  bind :9000\n  default_backend openai" in cfg
    assert "backend openai\n  server serving demo-backend.default.svc.cluster.local:9000" in cfg
    assert "openai" in {p["name"] for p in backend["spec"]["ports"]}
    assert c.OPENAI_PORT in {p["port"] for p in policy["spec"]["ingress"][0]["ports"]}
    ports = workload["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert {"name": "openai", "containerPort": 9000, "protocol": "TCP"} in ports
    # the Service at zero selects the activator's pods: its openai port must exist there
    named = {p["name"]: p["targetPort"] for p in r.service["spec"]["ports"]}
    assert named["openai"] == "openai"
    assert 'proxy=~"http|grpc|openai"' in autoscaling.held_requests_query(dep)


# --- upgrading the operator restarts no pods ---------------------------------------------------


def _live_workload(w: World) -> dict[str, Any]:
    return w.objects[("Deployment", "demo")]


def _containers(w: World) -> list[str]:
    return [x["name"] for x in _live_workload(w)["spec"]["template"]["spec"]["containers"]]


def _step(w: World) -> Any:
    """One pass, with the live workload's revision observed (tritonllm.handlers.observe)."""
    live = w.objects.get(("Deployment", "demo"))
    return w.step(RenderOptions(live_revision=template_revision(live)))


def _roll(w: World) -> None:
    """A change of the serving pods: its repository Job runs, then the workload moves."""
    _step(w)
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo")
    _step(w)


def _upgraded_world() -> World:
    """A deployment whose pods were created by an operator without the frontend (rendered
    here as enabled: false, whose pod templates are the same), then spec.openai left empty as
    it is after the upgrade."""
    w = World({"storage": {"create": {"size": "10Gi"}}, "openai": {"enabled": False},
               "rollout": {"strategy": "Immediate"}})
    w.bring_up()
    assert _containers(w) == ["triton"]
    del w.body["spec"]["openai"]
    return w


def test_a_new_deployment_gets_the_frontend() -> None:
    w = World()
    w.bring_up()
    assert _containers(w) == ["triton", c.OPENAI_CONTAINER]
    assert w.body["status"]["openai"]["served"] is True


def test_running_pods_without_the_frontend_keep_running_after_an_upgrade() -> None:
    w = _upgraded_world()
    before = json.dumps(_live_workload(w), sort_keys=True)
    for _ in range(3):
        p = _step(w)
        assert not any(o.kind == "Deployment" and o.name == "demo" for o in p.apply)
        assert not any(o.kind == "Job" for o in (*p.apply, *p.create_shared))
    assert json.dumps(_live_workload(w), sort_keys=True) == before
    assert w.body["status"]["openai"] == {"served": False, "message": frontend.OFF_UNTIL_ROLLOUT}


def test_the_next_rollout_for_another_reason_adds_it() -> None:
    w = _upgraded_world()
    _step(w)
    w.body["spec"]["serving"] = {"maxQueueDelayMicroseconds": 100}
    _roll(w)
    assert _containers(w) == ["triton", c.OPENAI_CONTAINER]
    assert w.body["status"]["openai"]["url"] == "http://demo.default.svc:9000/v1"


def test_enabled_true_adds_it_now() -> None:
    w = _upgraded_world()
    w.body["spec"]["openai"] = {"enabled": True}
    _roll(w)
    assert _containers(w) == ["triton", c.OPENAI_CONTAINER]


def test_pods_that_run_it_keep_it() -> None:
    w = World()
    w.bring_up()
    before = json.dumps(_live_workload(w), sort_keys=True)
    _step(w)
    assert json.dumps(_live_workload(w), sort_keys=True) == before
    assert w.body["status"]["openai"]["served"] is True


def test_the_read_phase_passes_the_live_revision_to_rendering() -> None:
    """What the reconciler reads (tritonllm.handlers.observe.read_before_render, over the watch
    cache's projection of the workload) is what keeps the frontend off."""
    from tests.fake_kube import FakeKube
    from tritonllm.api.settings import OperatorSettings
    from tritonllm.handlers.observe import read_before_render
    from tritonllm.render import naming

    body = cr(metadata={"uid": "uid-demo"})
    dep = parse_deployment(body)
    old = render_all(parse_deployment(cr({"openai": {"enabled": False}},
                                         metadata={"uid": "uid-demo"}))).workload.body
    kube = FakeKube([body, old])
    opts = read_before_render(kube.cache(), OperatorSettings(), dep, naming.engine_key(dep)).opts
    assert opts.live_revision == template_revision(old)
    kept = render_all(dep, opts)
    assert template_revision(kept.workload.body) == template_revision(old)
    assert kept.openai.message == frontend.OFF_UNTIL_ROLLOUT
    # a deployment without a workload yet gets it
    fresh = read_before_render(FakeKube([body]).cache(), OperatorSettings(), dep,
                               naming.engine_key(dep)).opts
    assert fresh.live_revision is None and render_all(dep, fresh).openai.served


def test_real_haproxy_holds_an_openai_request_until_a_serving_pod_answers(tmp_path: Any) -> None:
    """The rendered activator config run by haproxy (addresses made local): a request to the
    OpenAI port while no serving pod listens waits in the activator, and is answered once one
    does (a scale from zero)."""
    import http.server
    import shutil
    import subprocess
    import threading
    import time
    import urllib.request

    from tests.helpers import free_ports
    from tritonllm_dev.testing import wait_for

    assert shutil.which("haproxy"), "scripts/test installs haproxy"
    spec = {"autoscaling": {"autoscaler": "KEDA", "minReplicas": 0, "maxReplicas": 2,
                            "prometheusUrl": "http://prometheus.monitoring:9090"}}
    config = render_all(parse_deployment(cr(spec))).activator[0].body["data"]["haproxy.cfg"]
    http_, grpc, stats, openai, backend = free_ports(5)
    local = {f"bind :{c.HTTP_PORT}": f"bind 127.0.0.1:{http_}",
             f"bind :{c.GRPC_PORT}": f"bind 127.0.0.1:{grpc}",
             f"bind :{c.OPENAI_PORT}": f"bind 127.0.0.1:{openai}",
             f"bind :{autoscaling.ACTIVATOR_STATS_PORT}": f"bind 127.0.0.1:{stats}",
             f"demo-backend.default.svc.cluster.local:{c.OPENAI_PORT}": f"127.0.0.1:{backend}"}
    for rendered_text, here in local.items():
        assert rendered_text in config
        config = config.replace(rendered_text, here)
    (tmp_path / "haproxy.cfg").write_text(config)
    seen: list[str] = []

    class Frontend(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"choices": [{"text": "hi"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    proxy = subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server: http.server.HTTPServer | None = None
    try:
        wait_for(lambda: _accepts(stats), timeout=5, interval=0.02, what="haproxy listening")
        answers: list[tuple[int, bytes, float]] = []

        def ask() -> None:
            start = time.monotonic()
            req = urllib.request.Request(f"http://127.0.0.1:{openai}/v1/completions",
                                         b'{"model": "demo", "prompt": "hi"}')
            with urllib.request.urlopen(req, timeout=30) as resp:
                answers.append((resp.status, resp.read(), time.monotonic() - start))

        client = threading.Thread(target=ask)
        client.start()
        time.sleep(1.5)  # nothing listens: the activator holds the request
        assert answers == [] and seen == []
        server = http.server.HTTPServer(("127.0.0.1", backend), Frontend)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        client.join(timeout=20)
    finally:
        proxy.terminate()
        proxy.wait(timeout=5)
        if server is not None:
            server.shutdown()
    (status, body, seconds), = answers
    assert (status, json.loads(body)) == (200, {"choices": [{"text": "hi"}]})
    assert seen == ["/v1/completions"] and seconds >= 1.5


def _accepts(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
