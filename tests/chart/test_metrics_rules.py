"""The chart's autoscaling rules: rendered on and off, checked and EVALUATED by the real promtool.

`promtool test rules` runs Prometheus' own rule engine over input series shaped like what a
serving pod exports (Triton's per-model nv_inference_* metrics, the TensorRT-LLM backend's
nv_trt_llm_* gauges and nv_llm_output_token_len histogram, as tritonllm's CPU stand-in does, plus
the target labels a Kubernetes scrape adds), and compares the recorded series with values this
test derives from the same inputs. The prometheus-adapter rules are checked by filling in their
metricsQuery templates as the adapter does and evaluating them over the recorded series.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import cr
from tests.chart.test_chart import CHART, KUBE, helm, run_helm, template  # noqa: F401 (fixture)
from tritonllm.api.deployment import parse_deployment
from tritonllm.render.autoscaling import POD_METRICS, RECORDED_SERIES, metric_query

RECORDING = CHART / "files" / "recording-rules.yaml"
ADAPTER = CHART / "files" / "adapter-rules.yaml"
KEPT = ("namespace", "pod", "app_kubernetes_io_instance")  # what every recorded series keeps
TOKENS_PER_SECOND = "tritonllm_generated_tokens_per_second"
STEP = 2  # seconds between scrapes
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:  # scripts/test installs Debian's prometheus (preflight, tier metrics)
        pytest.fail("promtool not found: apt-get install prometheus (scripts/test does)")
    return found


def window_seconds() -> int:
    """The rules' rate() window, which the chart's default `metrics.rules.window` states."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    window = values["metrics"]["rules"]["window"]
    assert window.endswith("s"), window
    return int(window[:-1])


# --- rendering ----------------------------------------------------------------------------------


def rule_objects(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    names = ("-recording-rules", "-prometheus-adapter")
    return {d["kind"] + ":" + d["metadata"]["name"]: d for d in docs
            if d["kind"] == "PrometheusRule"
            or (d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(names))}


@pytest.mark.chart
def test_chart_ships_the_rule_files_as_they_are(helm: str) -> None:  # noqa: F811
    objs = rule_objects(template(helm))
    assert set(objs) == {"ConfigMap:demo-tritonllm-recording-rules",
                         "ConfigMap:demo-tritonllm-prometheus-adapter"}
    recording = objs["ConfigMap:demo-tritonllm-recording-rules"]
    adapter = objs["ConfigMap:demo-tritonllm-prometheus-adapter"]
    # The default window is the files' own: the cluster tests load the very same content.
    assert recording["data"] == {"tritonllm.rules.yaml": RECORDING.read_text()}
    assert adapter["data"] == {"config.yaml": ADAPTER.read_text()}
    assert recording["metadata"]["namespace"] == adapter["metadata"]["namespace"] == (
        "tritonllm-system")


@pytest.mark.chart
def test_each_rule_object_turns_off(helm: str) -> None:  # noqa: F811
    assert rule_objects(template(helm, "metrics.rules.recording.enabled=false",
                                 "metrics.rules.adapter.enabled=false")) == {}
    only = rule_objects(template(helm, "metrics.rules.adapter.enabled=false"))
    assert list(only) == ["ConfigMap:demo-tritonllm-recording-rules"]


def template_with_api(helm: str, *sets: str) -> list[dict[str, Any]]:  # noqa: F811
    args = ["template", "demo", str(CHART), "--namespace", "tritonllm-system", *KUBE,
            "--api-versions", PROMETHEUS_RULE_API]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run_helm(helm, *args).stdout) if d]


@pytest.mark.chart
def test_prometheus_rule_only_when_asked_and_the_api_exists(
    helm: str,  # noqa: F811
) -> None:
    ask = ("metrics.rules.prometheusRule.enabled=true",
           "metrics.rules.prometheusRule.labels.release=kube-prometheus")
    rules = [d for d in template_with_api(helm, *ask) if d["kind"] == "PrometheusRule"]
    assert len(rules) == 1
    assert rules[0]["spec"] == yaml.safe_load(RECORDING.read_text())
    assert rules[0]["metadata"]["labels"]["release"] == "kube-prometheus"
    assert not [d for d in template(helm, *ask) if d["kind"] == "PrometheusRule"]  # no API
    assert not [d for d in template_with_api(helm) if d["kind"] == "PrometheusRule"]  # not asked


@pytest.mark.chart
def test_window_value_sets_every_rate_window_and_promtool_accepts_it(
    helm: str, promtool: str, tmp_path: Path,  # noqa: F811
) -> None:
    default = f"[{window_seconds()}s]"
    plain = RECORDING.read_text()
    assert set(re.findall(r"\[[0-9]+[a-z]+\]", plain)) == {default}
    (cm,) = [d for d in template(helm, "metrics.rules.window=2m",
                                 "metrics.rules.recording.namespace=monitoring")
             if d["metadata"]["name"] == "demo-tritonllm-recording-rules"]
    text = cm["data"]["tritonllm.rules.yaml"]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert text == plain.replace(default, "[2m]")
    rendered = tmp_path / "rendered.rules.yaml"
    rendered.write_text(text)
    check_rules(promtool, rendered)


@pytest.mark.chart
def test_values_schema_refuses_a_bad_window(helm: str) -> None:  # noqa: F811
    args = ["template", "demo", str(CHART), *KUBE, "--set", "metrics.rules.window=30 seconds"]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and "window" in proc.stderr


# --- promtool: check and evaluate ---------------------------------------------------------------


def check_rules(promtool: str, path: Path) -> None:
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.chart
def test_promtool_checks_the_recording_rules(promtool: str) -> None:
    check_rules(promtool, RECORDING)


@dataclass
class Pod:
    """One serving pod's metrics from `start` seconds on: each counter rising by a fixed amount
    per scrape, each gauge at a fixed value (before `start`: counters flat, gauges 0)."""

    name: str
    instance: str  # app_kubernetes_io_instance
    queue_us: dict[str, int] = field(default_factory=dict)  # model -> increase per scrape
    compute_us: dict[str, int] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # model -> gauge
    output_tokens: int = 0  # nv_llm_output_token_len_sum increase per scrape
    kv_used: int = 0
    kv_max: int = 64
    waiting: int = 0
    start: int = 0


NAMESPACE = "llm"


def target_labels(pod: Pod) -> dict[str, str]:
    """What a Kubernetes pod scrape adds, the pod label map included."""
    return {"namespace": NAMESPACE, "pod": pod.name, "app_kubernetes_io_instance": pod.instance,
            "job": "tritonllm-serving", "instance": f"{pod.name}:8002", "container": "triton"}


def series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def counter(increase: int, start: int, steps: int) -> str:
    flat = start // STEP
    return " ".join(["0"] * flat + [str(increase * i) for i in range(steps + 1 - flat)])


def gauge(value: int, start: int, steps: int) -> str:
    flat = start // STEP
    return " ".join(["0"] * flat + [str(value)] * (steps + 1 - flat))


def input_series(pods: list[Pod], steps: int) -> list[dict[str, str]]:
    out = []
    for pod in pods:
        base = target_labels(pod)
        for model in sorted(set(pod.queue_us) | set(pod.compute_us) | set(pod.pending)):
            labels = {**base, "model": model, "version": "1"}
            out += [
                {"series": series("nv_inference_queue_duration_us", labels),
                 "values": counter(pod.queue_us.get(model, 0), pod.start, steps)},
                {"series": series("nv_inference_compute_infer_duration_us", labels),
                 "values": counter(pod.compute_us.get(model, 0), pod.start, steps)},
                {"series": series("nv_inference_pending_request_count", labels),
                 "values": gauge(pod.pending.get(model, 0), pod.start, steps)},
            ]
        trt = {**base, "model": "tensorrt_llm", "version": "1"}
        for kind, value in {"used": pod.kv_used, "max": pod.kv_max,
                            "free": pod.kv_max - pod.kv_used, "tokens_per": 32}.items():
            out.append({"series": series("nv_trt_llm_kv_cache_block_metrics",
                                         {**trt, "kv_cache_block_type": kind}),
                        "values": gauge(value, pod.start, steps)})
        for kind, value in {"waiting": pod.waiting, "active": pod.waiting + 1}.items():
            out.append({"series": series("nv_trt_llm_request_metrics",
                                         {**trt, "request_type": kind}),
                        "values": gauge(value, pod.start, steps)})
        out.append({"series": series("nv_llm_output_token_len_sum",
                                     {**trt, "response_metric_type": "total_output_tokens"}),
                    "values": counter(pod.output_tokens, pod.start, steps)})
    return out


def expected(pod: Pod) -> dict[str, float]:
    """What each recorded series must be for `pod` once its counters rose over a whole window:
    rates are increases per scrape / STEP; only the tensorrt_llm model's durations count."""
    queue = pod.queue_us.get("tensorrt_llm", 0) / STEP
    compute = pod.compute_us.get("tensorrt_llm", 0) / STEP
    return {
        "tritonllm:queue_compute_ratio": queue / compute if compute else 0.0,
        "tritonllm:pending_requests": float(sum(pod.pending.values())),
        "tritonllm:backend_waiting_requests": float(pod.waiting),
        "tritonllm:kv_cache_utilization": pod.kv_used / pod.kv_max,
        "tritonllm:generated_tokens_per_second": pod.output_tokens / STEP,
    }


def kept(pod: Pod) -> str:
    return ",".join(f'{k}="{v}"' for k, v in zip(KEPT, (NAMESPACE, pod.name, pod.instance),
                                                  strict=True))


def run_promtool_test(promtool: str, tmp_path: Path, tests: list[dict[str, Any]]) -> None:
    spec = {"rule_files": [str(RECORDING)], "evaluation_interval": f"{STEP}s", "tests": tests}
    path = tmp_path / "rules.test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


# A busy pod (its ensemble's compute repeats its composing models': the rules must not count it),
# a second pod of the same deployment, idle (nothing finished: ratio 0, not a division by zero),
# and a pod of another deployment.
BUSY = Pod("chat-0", "chat",
           queue_us={"tensorrt_llm": 3_000_000, "preprocessing": 2_000, "ensemble": 14},
           compute_us={"tensorrt_llm": 2_000_000, "preprocessing": 4_000,
                       "ensemble": 2_004_000},
           pending={"tensorrt_llm": 5, "preprocessing": 1, "ensemble": 0},
           output_tokens=64, kv_used=12, kv_max=48, waiting=3)
IDLE = Pod("chat-1", "chat", queue_us={"tensorrt_llm": 0}, compute_us={"tensorrt_llm": 0},
           pending={"tensorrt_llm": 0}, kv_max=48)
OTHER = Pod("summarize-0", "summarize", queue_us={"tensorrt_llm": 1_000_000},
            compute_us={"tensorrt_llm": 4_000_000}, pending={"tensorrt_llm": 2},
            output_tokens=10, kv_used=16, kv_max=64, waiting=1)


@pytest.mark.chart
def test_promtool_evaluates_every_recording_rule_per_pod(promtool: str, tmp_path: Path) -> None:
    pods = [BUSY, IDLE, OTHER]
    at = 2 * window_seconds()  # every window full of rising samples
    steps = at // STEP
    wanted = {pod.name: expected(pod) for pod in pods}
    exprs = [{"expr": name, "eval_time": f"{at}s",
              "exp_samples": [{"labels": f"{name}{{{kept(pod)}}}", "value": wanted[pod.name][name]}
                              for pod in pods]}
             for name in wanted[BUSY.name]]
    assert wanted[BUSY.name]["tritonllm:queue_compute_ratio"] == 1.5  # the inputs mean this
    run_promtool_test(promtool, tmp_path, [
        {"interval": f"{STEP}s", "input_series": input_series(pods, steps),
         "promql_expr_test": exprs}])


@pytest.mark.chart
def test_promtool_sees_a_load_within_a_few_scrapes(promtool: str, tmp_path: Path) -> None:
    """Load begins at 60 s; three scrapes later the ratio and the pending count show it."""
    start, at = 60, 66
    pod = Pod("chat-0", "chat", queue_us={"tensorrt_llm": 500_000},
              compute_us={"tensorrt_llm": 2_000_000}, pending={"tensorrt_llm": 4}, start=start)
    at_rest = Pod("chat-0", "chat", queue_us={"tensorrt_llm": 0},
                  compute_us={"tensorrt_llm": 0}, pending={"tensorrt_llm": 0})
    exprs = [{"expr": name, "eval_time": f"{t}s",
              "exp_samples": [{"labels": f"{name}{{{kept(pod)}}}", "value": value}]}
             for t, state in ((start - STEP, expected(at_rest)), (at, expected(pod)))
             for name, value in state.items()
             if name in ("tritonllm:queue_compute_ratio", "tritonllm:pending_requests")]
    run_promtool_test(promtool, tmp_path, [
        {"interval": f"{STEP}s", "input_series": input_series([pod], at // STEP),
         "promql_expr_test": exprs}])


# --- prometheus-adapter ---------------------------------------------------------------------------


def adapter_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load(ADAPTER.read_text())["rules"]
    return rules


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RECORDING.read_text())["groups"]
    return {r["record"] for g in groups for r in g["rules"]}


@pytest.mark.chart
def test_adapter_serves_every_metric_the_hpa_asks_for_from_recorded_series() -> None:
    served = {}
    for rule in adapter_rules():
        source = rule["seriesQuery"].split("{", 1)[0]
        assert source in recorded_names(), source
        assert re.fullmatch(rule["name"]["matches"], source), rule["name"]
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                                  "pod": {"resource": "pod"}}
        served[rule["name"]["as"]] = source
    assert set(POD_METRICS.values()) | {TOKENS_PER_SECOND} <= set(served)
    assert set(RECORDED_SERIES.values()) <= recorded_names()  # what KEDA's trigger queries


def fill_in(query: str, series_name: str, pods: list[Pod]) -> str:
    """A metricsQuery as prometheus-adapter fills it in for a Pods metric of the pods listed."""
    matchers = f'namespace="{NAMESPACE}",pod=~"{"|".join(p.name for p in pods)}"'
    return (query.replace("<<.Series>>", series_name).replace("<<.LabelMatchers>>", matchers)
            .replace("<<.GroupBy>>", "pod"))


@pytest.mark.chart
def test_promtool_evaluates_the_adapter_queries(promtool: str, tmp_path: Path) -> None:
    pods, asked = [BUSY, IDLE, OTHER], [BUSY, IDLE]  # the HPA of `chat` asks for its pods
    at = 2 * window_seconds()
    exprs = []
    for rule in adapter_rules():
        source = rule["seriesQuery"].split("{", 1)[0]
        exprs.append({"expr": fill_in(rule["metricsQuery"], source, asked), "eval_time": f"{at}s",
                      "exp_samples": [{"labels": f'{{pod="{p.name}"}}',
                                       "value": expected(p)[source]} for p in asked]})
    run_promtool_test(promtool, tmp_path, [
        {"interval": f"{STEP}s", "input_series": input_series(pods, at // STEP),
         "promql_expr_test": exprs}])


# --- KEDA -----------------------------------------------------------------------------------------


@pytest.mark.chart
@pytest.mark.parametrize("metric", sorted(RECORDED_SERIES))
def test_promtool_evaluates_the_keda_query_of_each_signal(
    promtool: str, tmp_path: Path, metric: str,
) -> None:
    """The operator's ScaledObject query sums the deployment's pods' recorded series."""
    body = cr({"autoscaling": {"autoscaler": "KEDA", "maxReplicas": 3, "metric": metric,
                               "prometheusUrl": "http://prometheus.monitoring:9090"}},
              metadata={"name": BUSY.instance, "namespace": NAMESPACE})
    query = metric_query(parse_deployment(body))
    pods, chat = [BUSY, IDLE, OTHER], [BUSY, IDLE]
    at = 2 * window_seconds()
    total = sum(expected(p)[RECORDED_SERIES[metric]] for p in chat)
    run_promtool_test(promtool, tmp_path, [
        {"interval": f"{STEP}s", "input_series": input_series(pods, at // STEP),
         "promql_expr_test": [{"expr": query, "eval_time": f"{at}s",
                               "exp_samples": [{"labels": "{}", "value": total}]}]}])


# --- the OpenAI frontend ------------------------------------------------------------------------

OPENAI_BUCKETS = ("0.1", "0.5", "1", "+Inf")


def openai_series(pod: Pod, *, ok: int, limited: int, prompt: int, completion: int,
                  steps: int) -> list[dict[str, str]]:
    """One frontend's counters (increase per scrape), as its /metrics names them, with every
    time to first token and inter-token latency observed in the (0.1, 0.5] bucket."""
    base = {**target_labels(pod), "instance": f"{pod.name}:9000", "container": "openai",
            "model": pod.instance}
    chat = {**base, "endpoint": "/v1/chat/completions"}
    out = [
        {"series": series("tritonllm_openai_requests_total", {**chat, "status": "200"}),
         "values": counter(ok, 0, steps)},
        {"series": series("tritonllm_openai_requests_total", {**chat, "status": "429"}),
         "values": counter(limited, 0, steps)},
        {"series": series("tritonllm_openai_prompt_tokens_total", base),
         "values": counter(prompt, 0, steps)},
        {"series": series("tritonllm_openai_completion_tokens_total", base),
         "values": counter(completion, 0, steps)},
    ]
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds"):
        for le in OPENAI_BUCKETS:
            out.append({"series": series(f"tritonllm_openai_{name}_bucket", {**base, "le": le}),
                        "values": counter(0 if le == "0.1" else ok, 0, steps)})
    return out


@pytest.mark.chart
def test_promtool_evaluates_the_openai_rules_per_deployment(
    promtool: str, tmp_path: Path
) -> None:
    a, b = Pod("chat-0", "chat"), Pod("chat-1", "chat")
    at = 2 * window_seconds()
    steps = at // STEP
    inputs = (openai_series(a, ok=4, limited=1, prompt=20, completion=8, steps=steps)
              + openai_series(b, ok=2, limited=0, prompt=20, completion=0, steps=steps))
    deployment = f'app_kubernetes_io_instance="chat",model="chat",namespace="{NAMESPACE}"'
    chat = 'endpoint="/v1/chat/completions"'
    # Linear interpolation inside (0.1, 0.5], as histogram_quantile does.
    wanted = {
        "tritonllm:openai_time_to_first_token_seconds:p50": [(deployment, 0.1 + 0.4 * 0.5)],
        "tritonllm:openai_time_to_first_token_seconds:p99": [(deployment, 0.1 + 0.4 * 0.99)],
        "tritonllm:openai_inter_token_latency_seconds:p50": [(deployment, 0.1 + 0.4 * 0.5)],
        "tritonllm:openai_prompt_tokens:rate": [(deployment, (20 + 20) / STEP)],
        "tritonllm:openai_completion_tokens:rate": [(deployment, (8 + 0) / STEP)],
        "tritonllm:openai_requests:rate": [
            (f'{deployment},{chat},status="200"', (4 + 2) / STEP),
            (f'{deployment},{chat},status="429"', 1 / STEP)],
    }
    exprs = [{"expr": name, "eval_time": f"{at}s",
              "exp_samples": [{"labels": f"{name}{{{labels}}}", "value": value}
                              for labels, value in samples]}
             for name, samples in wanted.items()]
    run_promtool_test(promtool, tmp_path, [
        {"interval": f"{STEP}s", "input_series": inputs, "promql_expr_test": exprs}])
