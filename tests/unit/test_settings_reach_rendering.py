"""The operator's settings reach what it renders, whole.

Read from the chart as installed: every TRITONLLM_* variable the chart's Deployment sets is an
OperatorSettings field, and each setting that shapes objects changes the objects of a pass as the
reconciler renders them (`read_before_render`, then `render_all`), the engine cleanup Job of a
deletion, and `tritonllm render`. The smoke requests' NetworkPolicy rule is read as a network
plugin reads it, against the labels the chart puts on the operator's pods.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from typing import Any

import pytest

from tests.cases import ROOT
from tests.fake_kube import FakeKube
from tests.helpers import example_body
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.cli.main import main
from tritonllm.handlers.observe import read_before_render
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.plan.deletion import FINALIZER
from tritonllm.render import RenderOptions, naming, render_all

TEMPLATES = ROOT / "charts" / "tritonllm" / "templates"
NAMESPACE = "models"
# A value other than its default for each setting that shapes rendered objects.
RENDERING = {
    "operator_namespace": "tritonllm-system",
    "tools_image": "registry.example:5000/tritonllm/operator:9.9.9",
    "activator_image": "registry.example:5000/library/haproxy:9.9",
    "prometheus_url": "http://prometheus.monitoring:9090",
}


def chart_settings() -> list[str]:
    """The settings the chart's operator Deployment sets (TRITONLLM_<NAME> -> name)."""
    text = (TEMPLATES / "deployment.yaml").read_text()
    return [name.lower() for name in re.findall(r"name: TRITONLLM_([A-Z0-9_]+)", text)]


def chart_operator_pod_labels() -> dict[str, str]:
    """The labels the chart puts on the operator's pods that do not depend on the release
    (its pod template's labels are the `tritonllm.selector` helper)."""
    deployment = (TEMPLATES / "deployment.yaml").read_text()
    template = deployment[deployment.index("  template:"):]
    assert re.match(r'  template:\s+metadata:\s+labels: \{\{- include "tritonllm\.selector"',
                    template), "the operator's pod labels are no longer the selector helper"
    helpers = (TEMPLATES / "_helpers.tpl").read_text()
    block = helpers.split('{{- define "tritonllm.selector" -}}', 1)[1].split("{{- end -}}", 1)[0]
    pairs = (line.split(": ", 1) for line in block.strip().splitlines())
    return {k: v for k, v in pairs if "{{" not in v}


def scale_to_zero_body() -> dict[str, Any]:
    """A deployment that renders everything a setting shapes: build and repository Jobs,
    serving pods under a verified rollout and a NetworkPolicy, KEDA with no prometheusUrl of
    its own, the activator (minReplicas 0)."""
    body = example_body("cpu-standin-autoscaling")
    body["metadata"]["namespace"] = NAMESPACE
    return body


def rendered_by_a_pass(settings: OperatorSettings) -> tuple[RenderOptions, str]:
    """The objects a reconcile pass renders with these settings, as one JSON text."""
    body = scale_to_zero_body()
    dep = parse_deployment(body)
    kube = FakeKube([body])
    before = read_before_render(kube.cache(), settings, dep, naming.engine_key(dep))
    r = render_all(dep, before.opts)
    assert r.verify_workload is not None and r.network_policy is not None and r.activator
    return before.opts, json.dumps([o.body for o in [*r.objects, r.verify_workload]])


def test_every_setting_the_chart_sets_is_an_operator_setting() -> None:
    names = chart_settings()
    assert set(RENDERING) - {"prometheus_url"} <= set(names), names
    # prometheus_url is set only when the chart's value is (a `with` block around it)
    assert "prometheus_url" in names
    assert [n for n in names if n not in OperatorSettings.model_fields] == []


def test_render_options_declare_no_setting_of_their_own() -> None:
    """A setting re-declared beside OperatorSettings has a second default and needs a copy
    wherever options are built: the options carry the settings object instead."""
    fields = {f.name for f in dataclasses.fields(RenderOptions)}
    assert fields & set(OperatorSettings.model_fields) == set()
    assert RenderOptions().settings == OperatorSettings()


def test_a_pass_renders_with_the_settings_object_it_was_given() -> None:
    """Whole: a setting added later reaches rendering with nothing copied field by field."""
    settings = OperatorSettings(**RENDERING, namespaces=[NAMESPACE], log_level="DEBUG")
    opts, _ = rendered_by_a_pass(settings)
    for name in chart_settings():
        assert getattr(opts.settings, name) == getattr(settings, name), name


@pytest.mark.parametrize("name", sorted(RENDERING))
def test_each_setting_the_chart_sets_changes_the_objects_of_a_pass(name: str) -> None:
    value = RENDERING[name]
    assert name in chart_settings()
    assert OperatorSettings.model_fields[name].default != value
    _, default = rendered_by_a_pass(OperatorSettings())
    _, changed = rendered_by_a_pass(OperatorSettings(**{name: value}))
    assert value not in default
    assert value in changed, f"{name} set by the chart never reaches the rendered objects"


@pytest.mark.parametrize("how", ["environment", "flag"])
@pytest.mark.parametrize("name", sorted(RENDERING))
def test_tritonllm_render_renders_each_setting_as_the_operator_does(
    name: str, how: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tritonllm render` reads the operator's TRITONLLM_* variables (a flag of the same name
    wins), so it prints what the operator applies."""
    for setting in OperatorSettings.model_fields:
        monkeypatch.delenv(f"TRITONLLM_{setting.upper()}", raising=False)
    value = RENDERING[name]
    args = ["render", "-f", str(ROOT / "examples" / "cpu-standin-autoscaling.yaml")]
    if how == "environment":
        monkeypatch.setenv(f"TRITONLLM_{name.upper()}", value)
    else:
        args += [f"--{name.replace('_', '-')}", value]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert value in out


def test_the_engine_cleanup_job_of_a_deletion_runs_the_configured_tools_image() -> None:
    body = scale_to_zero_body()
    key = naming.engine_key(parse_deployment(body))
    body["spec"]["storage"]["engineRetention"] = "Delete"
    body["metadata"].update(finalizers=[FINALIZER], deletionTimestamp="2026-11-27T09:00:00Z",
                            generation=1)
    body["status"] = {"engine": {"key": key}}
    record = {"apiVersion": c.API_VERSION, "kind": c.ENGINE_KIND,
              "metadata": {"name": key, "namespace": NAMESPACE}, "status": {"state": "Ready"}}
    kube = FakeKube([body, record])
    settings = OperatorSettings(tools_image=RENDERING["tools_image"])
    asyncio.run(Reconciler(kube, settings, kube.cache()).reconcile(NAMESPACE, body["metadata"]
                                                                   ["name"]))
    (job,) = [o for (kind, _, _), o in kube.objects.items() if kind == "Job"]
    assert job["metadata"]["labels"][c.LABEL_COMPONENT] == c.COMPONENT_CLEANUP
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == settings.tools_image


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector with matchLabels (what these rules use); empty selects all."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def admits_on_http(policy: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    """Whether a pod (its namespace, its labels) may reach the HTTP port of the selected pods:
    NetworkPolicy peer semantics (podSelector alone: the policy's namespace; namespaceSelector
    and podSelector in one peer: both must match)."""
    ns_labels = {"kubernetes.io/metadata.name": namespace}
    for rule in policy["spec"]["ingress"]:
        if "ports" in rule and c.HTTP_PORT not in [p["port"] for p in rule["ports"]]:
            continue
        for peer in rule["from"]:
            if "ipBlock" in peer:
                continue
            if "namespaceSelector" in peer:
                in_ns = selects(peer["namespaceSelector"], ns_labels)
            else:
                in_ns = namespace == policy["metadata"]["namespace"]
            if in_ns and selects(peer.get("podSelector") or {}, labels):
                return True
    return False


def test_smoke_requests_are_admitted_from_the_operators_pods_alone() -> None:
    """From the operator's pods as the chart labels them (any release name), in the operator's
    namespace; not from any other pod of that namespace, nor from those labels elsewhere."""
    home = RENDERING["operator_namespace"]
    chart_labels = chart_operator_pod_labels()
    assert chart_labels.get(c.LABEL_COMPONENT), chart_labels  # more than "any tritonllm pod"
    operator_pod = {**chart_labels, c.LABEL_INSTANCE: "any-release"}
    dep = parse_deployment(scale_to_zero_body())
    policy = render_all(dep, RenderOptions(OperatorSettings(operator_namespace=home)))
    assert policy.network_policy is not None
    np = policy.network_policy.body
    assert admits_on_http(np, home, operator_pod)
    others = [{}, {"app": "client"}, {**operator_pod, c.LABEL_COMPONENT: "test"},
              {c.LABEL_NAME: c.APP_NAME}]
    assert not [labels for labels in others if admits_on_http(np, home, labels)]
    assert not admits_on_http(np, "tenant", operator_pod)
    # Outside the cluster (no namespace) the operator calls from a node: no rule for it.
    bare = render_all(dep, RenderOptions()).network_policy
    assert bare is not None and not admits_on_http(bare.body, home, operator_pod)
