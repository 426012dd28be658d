"""Autoscaling as rendered and planned: HPA or KEDA, scale to zero behind the HAProxy activator,
the PodMonitor, GPU-aware status.scaling (the autoscaling tier runs them against the real
components)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.cases import cr
from tests.helpers import free_ports
from tests.unit.test_plan import World, kinds
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.plan.scaling import replica_capacity
from tritonllm.render import RenderOptions, autoscaling, render_all
from tritonllm_dev.testing import wait_for

PROM = "http://prometheus.monitoring:9090"
KEDA = {"autoscaler": "KEDA", "maxReplicas": 4, "metric": "pendingRequests", "target": "3",
        "prometheusUrl": PROM}


def rendered(autoscaling_spec: dict[str, Any] | None, **opts: Any):
    spec: dict[str, Any] = {} if autoscaling_spec is None else {"autoscaling": autoscaling_spec}
    return render_all(parse_deployment(cr(spec)), RenderOptions(**opts))


def test_hpa_reads_the_adapter_metric_with_the_spec_windows() -> None:
    out = rendered({"maxReplicas": 5, "metric": "kvCacheUtilization", "target": "800m",
                    "scaleUpWindowSeconds": 5, "scaleDownWindowSeconds": 30})
    assert out.scaled_object is None and not out.activator
    spec = out.autoscaler.body["spec"]
    assert spec["metrics"][0]["pods"] == {
        "metric": {"name": "tritonllm_kv_cache_utilization"},
        "target": {"type": "AverageValue", "averageValue": "800m"},
    }
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 5
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 30
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "name": "demo"}


def test_keda_scales_the_workload_on_the_recorded_series_of_its_own_pods() -> None:
    out = rendered(KEDA)
    assert out.autoscaler is None  # KEDA creates and owns its HPA (keda-hpa-demo)
    spec = out.scaled_object.body["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 4)
    (trigger,) = spec["triggers"]  # no activator above zero
    meta = trigger["metadata"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert meta["serverAddress"] == PROM and meta["threshold"] == "3"
    assert meta["query"] == (
        'sum(tritonllm:pending_requests{namespace="default",app_kubernetes_io_instance="demo"})'
    )
    # the Service still selects the serving pods
    assert out.service.body["spec"]["selector"][c.LABEL_COMPONENT] == c.COMPONENT_SERVER


def test_operator_default_prometheus_is_used_when_the_cr_names_none() -> None:
    spec = {k: v for k, v in KEDA.items() if k != "prometheusUrl"}
    out = rendered(spec, settings=OperatorSettings(prometheus_url="http://prom.default:9090"))
    meta = out.scaled_object.body["spec"]["triggers"][0]["metadata"]
    assert meta["serverAddress"] == "http://prom.default:9090"


def test_a_multi_node_group_scales_as_one_unit() -> None:
    spec = cr({"autoscaling": KEDA, "gpu": {"perNode": 2},
               "engine": {"parallelism": {"tensor": 2, "pipeline": 2}}})
    out = render_all(parse_deployment(spec))
    ref = out.scaled_object.body["spec"]["scaleTargetRef"]
    assert ref["kind"] == "LeaderWorkerSet" and ref["name"] == "demo"
    hpa = render_all(parse_deployment(cr({**spec["spec"], "autoscaling": {"maxReplicas": 3}})))
    assert hpa.autoscaler.body["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_scale_to_zero_puts_the_activator_behind_the_service() -> None:
    out = rendered({**KEDA, "minReplicas": 0, "activationTarget": "0"})
    configmap, backend, policy, workload = out.activator
    assert (configmap.kind, backend.kind, policy.kind, workload.kind) == (
        "ConfigMap", "Service", "NetworkPolicy", "Deployment")
    # clients keep the same Service: it now selects the activator, which forwards to the
    # backend Service of the serving pods
    selector = out.service.body["spec"]["selector"]
    assert selector[c.LABEL_COMPONENT] == autoscaling.COMPONENT_ACTIVATOR
    assert backend.name == "demo-backend"
    assert backend.body["spec"]["selector"][c.LABEL_COMPONENT] == c.COMPONENT_SERVER
    config = configmap.body["data"]["haproxy.cfg"]
    assert "server serving demo-backend.default.svc.cluster.local:8000" in config
    assert f"retries {autoscaling.ACTIVATOR_HOLD_SECONDS}" in config
    # the activator's held requests are KEDA's second trigger: the first request activates
    spec = out.scaled_object.body["spec"]
    assert spec["minReplicaCount"] == 0
    held = spec["triggers"][1]["metadata"]
    assert "haproxy_backend_current_sessions" in held["query"]
    assert held["activationThreshold"] == "0"
    # the activator goes before the Service that switches to it
    names = [(o.kind, o.name) for o in out.objects]
    assert names.index(("Deployment", "demo-activator")) < names.index(("Service", "demo"))
    pod = workload.body["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_activator_retries_only_requests_no_backend_received() -> None:
    """A connection that never opened is retried (the request was never sent); an empty or late
    answer is not: the backend had the prompt, and resending it to the next replica could crash
    that one too. No L7 retry also means HAProxy keeps no copy of the request to replay."""
    config = rendered({**KEDA, "minReplicas": 0}).activator[0].body["data"]["haproxy.cfg"]
    (retry_on,) = [line.split() for line in config.splitlines()
                   if line.strip().startswith("retry-on")]
    assert retry_on == ["retry-on", "conn-failure"]
    assert "empty-response" not in config and "redispatch" not in config


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="scripts/test installs haproxy")
def test_the_activator_config_is_valid_for_real_haproxy(tmp_path: Path) -> None:
    out = rendered({**KEDA, "minReplicas": 0})
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(out.activator[0].body["data"]["haproxy.cfg"])
    done = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Configuration file is valid" in done.stdout + done.stderr


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _crashing_backend() -> tuple[socket.socket, list[bytes]]:
    """A backend that reads each request and closes the connection unanswered (a prompt that
    crashes the server); the requests it read."""
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                seen.append(conn.recv(65536))

    threading.Thread(target=serve, daemon=True).start()
    return server, seen


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="scripts/test installs haproxy")
def test_real_haproxy_sends_a_prompt_that_crashed_its_backend_once(tmp_path: Path) -> None:
    """The rendered config run by haproxy, its backend address and ports made local: a POST the
    backend took and closed unanswered is answered 502, not sent again (with empty-response it
    went out 601 times in 60 ms, each to whichever replica the Service picked)."""
    backend, seen = _crashing_backend()
    http, grpc, stats, openai = free_ports(4)
    config = rendered({**KEDA, "minReplicas": 0}).activator[0].body["data"]["haproxy.cfg"]
    local = {f"bind :{c.HTTP_PORT}": f"bind 127.0.0.1:{http}",
             f"bind :{c.GRPC_PORT}": f"bind 127.0.0.1:{grpc}",
             f"bind :{c.OPENAI_PORT}": f"bind 127.0.0.1:{openai}",
             f"bind :{autoscaling.ACTIVATOR_STATS_PORT}": f"bind 127.0.0.1:{stats}",
             f"demo-backend.default.svc.cluster.local:{c.HTTP_PORT}":
                 f"127.0.0.1:{backend.getsockname()[1]}"}
    for rendered_text, here in local.items():
        assert rendered_text in config
        config = config.replace(rendered_text, here)
    (tmp_path / "haproxy.cfg").write_text(config)
    proxy = subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _accepts(stats), timeout=5, interval=0.02, what="haproxy listening")
        prompt = urllib.request.Request(f"http://127.0.0.1:{http}/v2/models/ensemble/generate",
                                        b'{"text_input": "crash", "max_tokens": 4}')
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(prompt, timeout=5)
    finally:
        proxy.terminate()
        proxy.wait(timeout=5)
        backend.close()
    assert answer.value.code == 502
    assert [r.split(b" ", 1)[0] for r in seen] == [b"POST"]


def test_pod_monitor_only_where_the_cluster_serves_it() -> None:
    assert rendered(KEDA).pod_monitor is None
    monitor = rendered({**KEDA, "minReplicas": 0}, pod_monitors=True).pod_monitor.body
    assert monitor["spec"]["podTargetLabels"] == [c.LABEL_INSTANCE, c.LABEL_COMPONENT]
    ports = [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]]
    assert ports == ["metrics", "openai", "stats"]  # Triton's, the OpenAI frontend's, HAProxy's
    # The activator's pods have an `openai` port too, which forwards: a scrape there at zero
    # would be held as a request and wake the deployment. Only the frontends' is scraped.
    (openai,) = [e for e in monitor["spec"]["podMetricsEndpoints"] if e["port"] == "openai"]
    (drop,) = openai["relabelings"]
    assert drop["sourceLabels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_component"]
    assert (drop["regex"], drop["action"]) == ("activator", "drop")


def test_switching_autoscalers_removes_what_the_old_one_needed() -> None:
    w = World({"autoscaling": {**KEDA, "minReplicas": 0}, "storage": {"create": {"size": "1Gi"}}})
    w.bring_up()
    activator = {("ScaledObject", "demo"), ("Deployment", "demo-activator"),
                 ("Service", "demo-backend"), ("ConfigMap", "demo-activator"),
                 ("NetworkPolicy", "demo-activator")}
    assert activator <= set(w.objects)
    w.body["spec"]["autoscaling"] = {"maxReplicas": 4}
    p = w.step()
    deleted = {(ref.kind, ref.name) for ref in p.delete}
    assert deleted >= activator
    assert "HorizontalPodAutoscaler" in kinds(p)
    assert ("Deployment", "demo") not in deleted  # the serving workload stays


def test_the_activator_policy_goes_with_the_network_policy() -> None:
    w = World({"autoscaling": {**KEDA, "minReplicas": 0}, "storage": {"create": {"size": "1Gi"}}})
    w.bring_up()
    assert {("NetworkPolicy", "demo"), ("NetworkPolicy", "demo-activator")} <= set(w.objects)
    w.body["spec"]["networkPolicy"] = {"enabled": False}
    deleted = {(ref.kind, ref.name) for ref in w.step().delete}
    assert {("NetworkPolicy", "demo"), ("NetworkPolicy", "demo-activator")} <= deleted
    assert ("Deployment", "demo-activator") not in deleted  # still at zero: it stays


def test_keda_replicas_are_never_written_by_the_operator() -> None:
    w = World({"autoscaling": {**KEDA, "minReplicas": 0}, "storage": {"create": {"size": "1Gi"}}})
    w.bring_up()
    for replicas in (0, 3, 1):
        w.objects[("Deployment", "demo")]["spec"]["replicas"] = replicas  # KEDA's HPA
        p = w.step()
        assert p.scale is None
        assert all((o.kind, o.name) != ("Deployment", "demo") for o in p.apply)


def test_keda_without_its_crd_says_so_before_anything_is_built() -> None:
    w = World({"autoscaling": KEDA, "storage": {"create": {"size": "1Gi"}}}, keda_served=False)
    p = w.step()
    degraded = {x["type"]: x for x in p.status["conditions"]}[c.COND_DEGRADED]
    assert degraded["reason"] == r.AUTOSCALER_MISSING
    assert "scaledobjects.keda.sh" in degraded["message"]
    assert "Job" not in kinds(p)


def test_keda_without_a_prometheus_names_the_field_and_the_setting() -> None:
    spec = {k: v for k, v in KEDA.items() if k != "prometheusUrl"}
    w = World({"autoscaling": spec, "storage": {"create": {"size": "1Gi"}}})
    p = w.step()
    degraded = {x["type"]: x for x in p.status["conditions"]}[c.COND_DEGRADED]
    assert degraded["reason"] == r.AUTOSCALER_MISSING
    assert "spec.autoscaling.prometheusUrl" in degraded["message"]
    assert "TRITONLLM_PROMETHEUS_URL" in degraded["message"]


@pytest.mark.parametrize(
    ("gpus", "per_pod", "pods", "expected"),
    [
        ([8, 8], 2, 1, 8),  # two 8-GPU nodes, 2 GPUs a replica
        ([8, 4], 8, 1, 1),  # the 4-GPU node cannot hold a replica of 8
        ([8, 8, 8], 8, 2, 1),  # groups of two 8-GPU pods: three nodes hold one group
        ([], 1, 1, 0),
    ],
)
def test_replica_capacity_counts_whole_replicas(
    gpus: list[int], per_pod: int, pods: int, expected: int
) -> None:
    assert replica_capacity(gpus, per_pod, pods) == expected


def test_status_scaling_says_what_the_gpu_nodes_can_hold() -> None:
    # 32 x 2048 tokens: what Llama-2-7B's KV cache holds on one H100 (the fit planner)
    spec = {"autoscaling": {"maxReplicas": 6}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
            "engine": {"limits": {"maxBatchSize": 32}}, "storage": {"create": {"size": "1Gi"}}}
    w = World(spec, gpu_nodes=2, gpu_capacity=[4, 4])
    w.bring_up()
    w.objects[("Deployment", "demo")]["spec"]["replicas"] = 3
    w.step()
    scaling = w.body["status"]["scaling"]
    assert scaling["autoscaler"] == "HPA" and scaling["desired"] == 3
    assert scaling["capacity"] == 8 and scaling["possibleNow"] == 5  # 1 GPU a replica
    assert "limitedBy" not in scaling
    w.body["spec"]["autoscaling"]["maxReplicas"] = 9
    w.step()
    limited = w.body["status"]["scaling"]["limitedBy"]
    assert "maxReplicas 9 > 8 replica(s)" in limited and "NVIDIA-H100-80GB-HBM3" in limited


def test_status_scaling_quotes_the_scheduler_for_a_pending_replica() -> None:
    spec = {"autoscaling": {"maxReplicas": 2}, "gpu": {"product": "NVIDIA-L4"},
            "engine": {"limits": {"maxBatchSize": 4}}, "storage": {"create": {"size": "1Gi"}}}
    message = "demo-abc: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    w = World(spec, gpu_nodes=1, gpu_capacity=[8], unschedulable=message)
    w.bring_up()
    scaling = w.body["status"]["scaling"]
    assert scaling["possibleNow"] == 0 and message in scaling["limitedBy"]


def test_no_scaling_status_without_autoscaling() -> None:
    w = World()
    w.bring_up()
    assert "scaling" not in w.body["status"]


def _workload(managers: list[str]) -> dict[str, Any]:
    fields = {"f:spec": {"f:replicas": {}}}
    return {
        "metadata": {"name": "demo", "namespace": "default",
                     "managedFields": [{"manager": m, "fieldsV1": fields} for m in managers]},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {}}}},
    }


@pytest.mark.parametrize(
    ("managers", "kept"),
    [
        ([c.FIELD_MANAGER], 3),  # a fixed count the operator set: kept through the handover
        ([c.FIELD_MANAGER, "kube-controller-manager"], None),  # the HPA scaled it once
        (["keda-operator"], None),
        ([], None),
    ],
)
def test_replicas_are_handed_to_the_autoscaler_once(managers: list[str], kept: int | None) -> None:
    from tritonllm.handlers.cache import project_workload
    from tritonllm.handlers.observe import handover_replicas

    dep = parse_deployment(cr({"autoscaling": {"maxReplicas": 4}}))
    assert handover_replicas(dep, project_workload(_workload(managers))) == kept
    fixed = parse_deployment(cr({}))
    assert handover_replicas(fixed, project_workload(_workload(managers))) is None
