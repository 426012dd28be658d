"""Autoscaling for real, proven with load: the CPU stand-in on the real node, its Triton metrics
scraped by Prometheus, the chart's recording and adapter rules, an HPA through
prometheus-adapter, KEDA from zero behind the HAProxy activator (which admits, under the node's
NetworkPolicy enforcer, only the sources the serving pods admit), and the operator never writing
a replica count.

Real: every pod of the serving path (tritonserver from the stand-in image, HAProxy from Debian),
kube-proxy's Service rules, Prometheus scraping the pods over the host's bridge, the chart's
rules files as shipped, Prometheus, prometheus-adapter and KEDA (built from their Go modules),
the HPA controller, the operator. Simulated: the GPUs (the stand-in answers on CPU, one token per
TRITONLLM_STANDIN_TOKEN_DELAY seconds so that requests queue), and in the multi-node case the
group's pods, which are kwok pods whose serving metric comes from an exporter in this test.

Both runtimes: the HPA, KEDA-from-zero and metrics scenarios run on `engine` (the stand-in's
tensorrt_llm backend model) and on `llmapi` (the llmapi Python model over the stand-in image's
SIMULATED LLM API, which exports the same nv_trt_llm_* families from the LLM's iteration
statistics), each with the signal that runtime is scaled on: Triton's pending requests for the
engine backend, the backend's own waiting requests and KV-cache utilization for llmapi (its model
takes requests from Triton at once, so they wait in the LLM, not in Triton's queue).
KEDA-from-zero sends its held burst to Triton's HTTP port on `engine` and, on `llmapi`, to the
OpenAI API's port (9000) with the official `openai` SDK: the activator holds and forwards that
port too, and the request reaches the backend whose signal KEDA reads.

Figures: each scenario prints `[measure]` lines (python -m pytest -s); docs/autoscaling.md
records them.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from bench.autoscaling import (
    ENSEMBLE,
    LLMAPI,
    PROMPT,
    REQUEST_TIMEOUT,
    Ask,
    Load,
    Outcome,
    burst,
    burst_of,
    summary,
)

from tests.autoscaling.helpers import replica_managers, replica_writes
from tests.cases import ROOT
from tests.cluster.operator_harness import Operator, run_operator, wait_condition
from tests.cluster.test_real_flow import answer_script, script_pod
from tests.cluster.test_real_multinode import _probe_pod
from tests.helpers import example_body, free_port
from tritonllm.api import constants as c
from tritonllm.render.autoscaling import POD_METRICS
from tritonllm_dev import images
from tritonllm_dev.autoscaling import AutoscalingStack
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import REGISTRY_ADDR, STANDIN_GPUS
from tritonllm_dev.testing import fresh_namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.autoscaling]

EXAMPLE = "cpu-standin-autoscaling"
SEED = ROOT / "examples" / "cpu-standin" / "seed.yaml"
RULES = ROOT / "charts" / "tritonllm" / "files"
READY_TIMEOUT = 420


def _accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _answer_ok(text: str) -> bool:
    return text.startswith("hello world")


def _openai_burst(address: str, model: str, n: int) -> list[Outcome]:
    """`n` completions sent at once with the official `openai` SDK to host:port (a Service's
    OpenAI port); their outcomes in send order. The stand-in repeats the prompt, so the answer
    begins with its words."""
    client = openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0,
                           timeout=REQUEST_TIMEOUT)

    def send() -> Outcome:
        t0 = time.monotonic()
        try:
            text = client.completions.create(model=model, prompt=PROMPT,
                                             max_tokens=8).choices[0].text
        except Exception as exc:  # every failure a client would see counts
            return Outcome(t0, time.monotonic() - t0, f"{type(exc).__name__}: {exc}"[:300])
        words = re.findall(r"[a-z]+", text)
        return Outcome(t0, time.monotonic() - t0,
                       None if words[:2] == ["hello", "world"] else f"wrong answer {text!r}")

    return burst_of(n, send)


class Env:
    def __init__(self, cluster: LocalCluster, ns: str, stack: AutoscalingStack, op: Operator,
                 refs: dict[str, str]) -> None:
        self.cluster, self.ns, self.stack, self.op, self.refs = cluster, ns, stack, op, refs

    def kubectl_json(self, *args: str) -> Any:
        return self.cluster.kubectl_json(*args, "-n", self.ns)

    def replicas(self, name: str) -> tuple[int, int]:
        """(spec.replicas, readyReplicas) of the serving Deployment."""
        dep = self.kubectl_json("get", "deployment", name)
        return int(dep["spec"].get("replicas", 0)), int(dep["status"].get("readyReplicas", 0))

    def url(self, name: str, port: int = c.HTTP_PORT) -> str:
        ip = self.kubectl_json("get", "svc", name)["spec"]["clusterIP"]
        return f"{ip}:{port}"

    def diagnose(self) -> str:
        parts = [self.cluster.kubectl("get", "pods,deploy,hpa,scaledobject,tllm", "-n", self.ns,
                                      "-o", "wide", check=False).stdout[-4000:],
                 self.cluster.kubectl("get", "events", "-n", self.ns,
                                      "--sort-by=.lastTimestamp", check=False).stdout[-4000:],
                 self.cluster.kubectl("describe", "hpa", "-n", self.ns,
                                      check=False).stdout[-3000:],
                 "--- operator\n" + self.op.logs()[-3000:]]
        return "\n".join(parts)

    def activator_logs(self, name: str) -> str:
        return self.cluster.kubectl("logs", "-n", self.ns, "-l",
                                    f"{c.LABEL_INSTANCE}={name},{c.LABEL_COMPONENT}=activator",
                                    "--tail=40", check=False).stdout[-4000:]

    def replica_writes(self) -> float:
        return replica_writes(self.op)

    def replica_managers(self, kind: str, name: str) -> set[str]:
        return replica_managers(self.kubectl_json("get", kind, name, "--show-managed-fields"))


@pytest.fixture(scope="module")
def env(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    refs = images.ensure_images(REGISTRY_ADDR)
    tmp = tmp_path_factory.mktemp("autoscaling")
    with fresh_namespace(cluster, "autoscaling-real") as ns:
        cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
        cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                        "--timeout=240s", timeout=270)
        # Prometheus scrapes the operator too (the dashboard's operator panels): its metrics
        # port is chosen first. The stack starts first: its URL has its port only then.
        metrics_port = free_port()
        stack = AutoscalingStack(cluster, recording_rules=RULES / "recording-rules.yaml",
                                 adapter_rules=RULES / "adapter-rules.yaml",
                                 operator_metrics=[f"127.0.0.1:{metrics_port}"])
        with stack:
            settings = {"TRITONLLM_PROMETHEUS_URL": stack.prometheus_url,
                        "TRITONLLM_ACTIVATOR_IMAGE": refs["activator"]}
            with run_operator(cluster, ns, tmp, tools_image=refs["operator"], env=settings,
                              metrics_port=metrics_port) as op:
                yield Env(cluster, ns, stack, op, refs)


# Per runtime: how clients ask, the spec changes from the engine example, and the metric each
# autoscaler scales on (HPA, KEDA). llmapi's batch is 2, so that 6 clients make 4 wait in the LLM.
RUNTIMES: dict[str, tuple[Ask, dict[str, Any], str, str]] = {
    "engine": (ENSEMBLE, {}, "pendingRequests", "pendingRequests"),
    "llmapi": (LLMAPI, {"runtime": "llmapi",
                        "engine": {"limits": {"maxBatchSize": 2, "maxInputLen": 64,
                                              "maxSeqLen": 128, "maxNumTokens": 256}}},
               "backendWaitingRequests", "kvCacheUtilization"),
}
HPA_TARGET = {"pendingRequests": "2", "backendWaitingRequests": "1"}
KEDA_TARGET = {"pendingRequests": "2", "kvCacheUtilization": "0.5"}


def _example(name: str, runtime: str = "engine", **autoscaling: Any) -> dict[str, Any]:
    obj = example_body(EXAMPLE, autoscaling=autoscaling, **RUNTIMES[runtime][1])
    obj["metadata"]["name"] = name
    return obj


def _named(base: str, runtime: str) -> str:
    return base if runtime == "engine" else f"{base}-{runtime}"


def _ready(env: Env, name: str) -> dict[str, Any]:
    try:
        return wait_condition(env.cluster, env.ns, name, "Progressing", "False",
                              reason="Deployed", timeout=READY_TIMEOUT)
    except Exception as exc:
        raise AssertionError(f"{name} not deployed: {exc}\n{env.diagnose()}") from exc


def _wait_replicas(env: Env, name: str, want: int, timeout: float, what: str) -> float:
    """Seconds until the Deployment has `want` replicas, all ready."""
    t0 = time.monotonic()
    try:
        wait_for(lambda: env.replicas(name) == (want, want), timeout=timeout, interval=0.5,
                 what=what)
    except Exception as exc:
        raise AssertionError(f"{what}: {exc}\n{env.diagnose()}") from exc
    return time.monotonic() - t0


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_hpa_scales_out_on_queued_requests_and_back_with_no_failed_request(
    env: Env, runtime: str
) -> None:
    name = _named("scale-hpa", runtime)
    ask, _, signal, _ = RUNTIMES[runtime]
    obj = _example(name, runtime, autoscaler="HPA", minReplicas=1, maxReplicas=2,
                   metric=signal, target=HPA_TARGET[signal])
    env.cluster.apply([{**obj, "metadata": {**obj["metadata"], "namespace": env.ns}}])
    cr = _ready(env, name)
    scaling = cr["status"]["scaling"]
    # The real node advertises STANDIN_GPUS stand-in GPUs: as many replicas of one GPU each.
    assert (scaling["autoscaler"], scaling["capacity"]) == ("HPA", STANDIN_GPUS), scaling
    # Prometheus scrapes the serving pod, the adapter serves the rule's metric for it.
    metric = POD_METRICS[signal]
    raw = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{env.ns}/pods/*/{metric}"

    def served() -> bool:
        out = env.cluster.kubectl("get", "--raw", raw, check=False)
        return out.returncode == 0 and bool(json.loads(out.stdout).get("items"))

    wait_for(served, timeout=90, interval=1, what=f"custom metric {metric} for the serving pod")
    url = env.url(name)

    with Load(url, clients=6, check=_answer_ok, ask=ask) as load:
        up = _wait_replicas(env, name, 2, 240, "HPA scales to 2 under load")
        print(f"\n[measure] HPA ({runtime}, {signal}): load start -> 2nd replica Ready "
              f"{up:.1f} s")
        time.sleep(5)  # both replicas answer
    hot = list(load.outcomes)
    # Light load while it scales back: the replica taken away drains what it holds.
    with Load(url, clients=1, check=_answer_ok, ask=ask) as light:
        down = _wait_replicas(env, name, 1, 240, "HPA scales back to 1")
        print(f"[measure] HPA ({runtime}): load drop -> back to 1 replica {down:.1f} s "
              f"(scaleDownWindowSeconds 20)")
        time.sleep(3)
    print(f"[measure] {summary(f'HPA under load ({runtime})', hot)}")
    print(f"[measure] {summary(f'HPA while scaling down ({runtime})', light.outcomes)}")
    assert len(hot) > 10 and not load.failed, [o.error for o in load.failed][:5]
    assert light.outcomes and not light.failed, [o.error for o in light.failed][:5]
    # The HPA wrote the count; the operator never did.
    assert env.replica_writes() == 0
    assert c.FIELD_MANAGER not in env.replica_managers("deployment", name)
    print(f"[measure] operator replica writes during autoscaling: {env.replica_writes():.0f}")


def test_every_dashboard_panel_returns_data_from_the_real_prometheus(env: Env) -> None:
    """The chart's Grafana dashboard: each panel's query, run against this Prometheus (which
    scrapes the operator, the serving pods and their OpenAI frontends, with the chart's recording
    rules), returns series. Runs after the HPA test, whose deployment served load and went
    through every phase.
    """
    # The OpenAI API panels read the frontends' metrics: requests through the OpenAI port of the
    # llmapi HPA scenario's deployment (still serving) give them series.
    name = _named("scale-hpa", "llmapi")
    sent = _openai_burst(env.url(name, c.OPENAI_PORT), name, 2)
    assert not [o.error for o in sent if o.error], [o.error for o in sent]
    dashboard = json.loads((RULES / "dashboard.json").read_text())
    queries = {p["title"]: t["expr"] for p in dashboard["panels"] for t in p["targets"]}
    assert len(queries) >= 8
    empty: dict[str, str] = {}

    def all_answer() -> bool:
        empty.clear()
        empty.update({title: q for title, q in queries.items() if not env.stack.query(q)})
        return not empty

    try:
        wait_for(all_answer, timeout=90, interval=3, what="every dashboard panel has data")
    except Exception as exc:
        raise AssertionError(f"panels without data: {empty}\n{env.diagnose()}") from exc
    phases = env.stack.query(queries["Lifecycle phases: mean seconds per phase"])
    print("\n[measure] dashboard phases: " + ", ".join(
        f"{r['metric']['phase']} {float(r['value'][1]):.1f} s" for r in phases))


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_keda_scales_from_zero_and_answers_every_held_request(env: Env, runtime: str) -> None:
    name = _named("scale-keda", runtime)
    ask, _, _, signal = RUNTIMES[runtime]
    # KEDA, minReplicas 0, the held-requests trigger beside the runtime's signal
    obj = _example(name, runtime, metric=signal, target=KEDA_TARGET[signal])
    env.cluster.apply([{**obj, "metadata": {**obj["metadata"], "namespace": env.ns}}])
    cr = _ready(env, name)
    assert cr["status"]["scaling"]["autoscaler"] == "KEDA"
    # KEDA made its own HPA; the operator made none.
    def hpas() -> set[str]:
        return {h["metadata"]["name"] for h in env.kubectl_json("get", "hpa")["items"]}

    wait_for(lambda: f"keda-hpa-{name}" in hpas(), timeout=60, interval=0.5,
             what="KEDA's HPA for the ScaledObject")
    assert name not in hpas()
    # Idle: KEDA takes it to zero after cooldownSeconds; the activator stays.
    _wait_replicas(env, name, 0, 180, "KEDA scales the idle deployment to zero")
    def activator_ready() -> bool:
        status = env.kubectl_json("get", "deployment", f"{name}-activator")["status"]
        return bool(status.get("readyReplicas") == 2)

    wait_for(activator_ready, timeout=120, interval=0.5, what="the activator's two pods Ready")
    # From zero: no serving pod left, not even one draining. (A request that arrives while the
    # last replica drains reaches that draining tritonserver: docs/autoscaling.md.)
    wait_for(lambda: not env.kubectl_json("get", "pods", "-l", f"{c.LABEL_INSTANCE}={name},"
                                          f"{c.LABEL_COMPONENT}={c.COMPONENT_SERVER}")["items"],
             timeout=120, interval=0.5, what="no serving pod left")
    # The Service clients always use, now the activator's pods: Triton's HTTP port (engine) or
    # the OpenAI API's (llmapi, the official SDK).
    url = env.url(name, c.HTTP_PORT if runtime == "engine" else c.OPENAI_PORT)
    # A deployment that KEDA takes to zero at once (its trigger idle when the ScaledObject is
    # made) has activator pods only seconds old: wait until the node routes the Service's
    # address to them (a connection accepted; no request is sent, so none is held), as for any
    # new Service, before the burst that must be held.
    wait_for(lambda: _accepts(url), timeout=30, interval=0.2,
             what="the Service's address routed to the activator")

    t0 = time.monotonic()
    outcomes = burst(url, 4, check=_answer_ok, ask=ask) if runtime == "engine" else \
        _openai_burst(url, name, 4)
    errors = [o.error for o in outcomes if o.error is not None]
    assert not errors, f"{errors}\n{env.activator_logs(name)}\n{env.diagnose()}"
    first = min(o.started + o.seconds for o in outcomes) - t0
    via = "Triton HTTP" if runtime == "engine" else "OpenAI API, port 9000"
    print(f"\n[measure] KEDA ({runtime}, {signal}, {via}): zero -> first answer {first:.1f} s "
          f"(engine or checkpoint on the store, pollingIntervalSeconds 2)")
    print(f"[measure] {summary(f'KEDA burst at zero ({runtime})', outcomes)}")
    assert env.replicas(name)[0] >= 1
    assert env.replica_writes() == 0
    assert c.FIELD_MANAGER not in env.replica_managers("deployment", name)
    # Its replica's CPU goes back to the 2-core node: the next scenario's replica would wait
    # for it (and time that wait, not its own start).
    env.cluster.kubectl("delete", "tllm", name, "-n", env.ns, "--wait=false")


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_kv_cache_and_pending_requests_reach_prometheus_from_the_real_pod(
    env: Env, runtime: str
) -> None:
    """The TensorRT-LLM metric families, scraped from the serving pod of the HPA scenario (the
    stand-in backend's, or the llmapi model's from the LLM's iteration statistics), recorded."""
    name = _named("scale-hpa", runtime)
    pod = f'namespace="{env.ns}",app_kubernetes_io_instance="{name}"'
    for rule in ("tritonllm:kv_cache_utilization", "tritonllm:backend_waiting_requests"):
        wait_for(lambda rule=rule: bool(env.stack.query(f"{rule}{{{pod}}}")), timeout=60,
                 interval=1, what=f"{rule} recorded for {name}'s serving pod")
    families = {
        "nv_trt_llm_kv_cache_block_metrics": ("kv_cache_block_type",
                                              {"max", "free", "used", "tokens_per"}),
        "nv_trt_llm_request_metrics": ("request_type", {"active", "max", "scheduled",
                                                        "context", "waiting"}),
    }
    for family, (label, values) in families.items():
        series = env.stack.query(f"{family}{{{pod}}}")
        kinds = {s["metric"].get(label) for s in series}
        assert values <= kinds, (family, kinds)


def _answer_pod(env: Env, ns: str, name: str, url: str) -> str:
    """A pod of `ns` that POSTs one prompt to `url` and prints the answer. A refused connection
    is tried again for 30 s (the policy enforcer admits a new pod a moment after it starts); the
    answer itself may take a cold start (300 s)."""
    script = answer_script(url, "hello world", 30, 300)
    pod = script_pod(env.refs["triton-standin"], name, script, namespace=ns)
    env.cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    wait_for(lambda: env.cluster.kubectl_json("get", "pod", name, "-n", ns)["status"].get(
        "phase") in ("Succeeded", "Failed"), timeout=360, interval=1, what=f"{name} done")
    return str(env.cluster.kubectl("logs", name, "-n", ns).stdout)


def test_at_zero_the_activator_answers_only_the_namespaces_the_policy_admits(env: Env) -> None:
    """Scale to zero with `networkPolicy.fromNamespaces`: the Service selects the activator's
    pods, and kube-router enforces their policy. A pod of a namespace the policy does not name
    opens no connection to the Service or to an activator pod; a pod of the named namespace is
    answered from zero, through the activator."""
    name = "scale-policy"
    gateway, other = f"{env.ns}-gw", f"{env.ns}-other"
    for ns in (gateway, other):
        env.cluster.kubectl("create", "namespace", ns, check=False)
    obj = example_body(EXAMPLE, networkPolicy={"fromNamespaces": [gateway]})
    obj["metadata"] = {"name": name, "namespace": env.ns}
    try:
        env.cluster.apply([obj])
        _ready(env, name)
        _wait_replicas(env, name, 0, 180, "KEDA scales the idle deployment to zero")
        wait_for(lambda: env.kubectl_json("get", "deployment", f"{name}-activator")["status"]
                 .get("readyReplicas") == 2, timeout=120, interval=0.5,
                 what="the activator's two pods Ready")
        wait_for(lambda: not env.kubectl_json(
            "get", "pods", "-l", f"{c.LABEL_INSTANCE}={name},"
            f"{c.LABEL_COMPONENT}={c.COMPONENT_SERVER}")["items"],
            timeout=120, interval=0.5, what="no serving pod left")
        service = env.kubectl_json("get", "svc", name)["spec"]
        assert service["selector"][c.LABEL_COMPONENT] == "activator", service
        activators = env.kubectl_json("get", "pods", "-l", f"{c.LABEL_INSTANCE}={name},"
                                      f"{c.LABEL_COMPONENT}=activator")["items"]
        targets = [(service["clusterIP"], c.HTTP_PORT), (service["clusterIP"], c.GRPC_PORT)]
        targets += [(p["status"]["podIP"], port) for p in activators
                    for port in (c.HTTP_PORT, c.GRPC_PORT)]

        outside = _probe_pod(env, other, "probe-outside", targets)
        print(f"\n[measure] activator policy: other namespace opened "
              f"{sum(outside.values())} of {len(outside)} targets in 15 s")
        assert not any(outside.values()), f"{outside}\n{env.diagnose()}"
        assert env.replicas(name)[0] == 0  # nothing reached the activator: still at zero

        t0 = time.monotonic()
        url = f"http://{name}.{env.ns}.svc.cluster.local:{c.HTTP_PORT}/v2/models/ensemble/generate"
        log = _answer_pod(env, gateway, "answer-gateway", url)
        took = time.monotonic() - t0
        print(f"[measure] activator policy: allowed namespace answered from zero in {took:.1f} s")
        assert '"text_output":"hello world"' in log, (
            f"{log}\n{env.activator_logs(name)}\n{env.diagnose()}")
        assert env.replicas(name)[0] >= 1  # the held request activated the deployment
    finally:
        env.cluster.kubectl("delete", "tllm", name, "-n", env.ns, "--wait=false", check=False)
        for ns in (gateway, other):
            env.cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
