"""A deployment's own spec.autoscaling.prometheusUrl is refused unless the operator's settings
allow it: KEDA queries that URL from its own pod, so an arbitrary one makes KEDA probe the
cluster's network on the tenant's behalf. The operator refuses it (InvalidSpec, the field and
the setting named) on the in-memory API server; `tritonllm render` does the same when given the
setting."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.settings import OperatorSettings
from tritonllm.cli.main import main
from tritonllm.handlers.reconciler import Reconciler

NS = "default"
OURS = "http://prometheus.monitoring:9090"
PROBE = "http://169.254.169.254:80/latest/meta-data"


def keda(url: str | None) -> dict[str, Any]:
    autoscaling: dict[str, Any] = {"autoscaler": "KEDA", "maxReplicas": 2,
                                   "metric": "pendingRequests", "target": "3"}
    if url is not None:
        autoscaling["prometheusUrl"] = url
    return cr({"autoscaling": autoscaling},
              metadata={"name": "demo", "namespace": NS, "uid": "uid-demo", "generation": 1})


def reconciled(body: dict[str, Any], settings: OperatorSettings) -> FakeKube:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "tritonllm-model-store", "namespace": NS}}
    keda_crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "scaledobjects.keda.sh"}}
    kube = FakeKube([claim, keda_crd, body])

    async def once() -> None:
        rec = Reconciler(kube, settings, kube.cache())  # type: ignore[arg-type]
        await rec.reconcile(NS, "demo")

    asyncio.run(once())
    return kube


def degraded(kube: FakeKube) -> dict[str, Any]:
    conds = (kube.objects[(c.KIND, NS, "demo")].get("status") or {}).get("conditions") or []
    return next((x for x in conds if x["type"] == c.COND_DEGRADED), {})


def test_a_prometheus_url_the_settings_do_not_allow_is_refused_naming_field_and_setting() -> None:
    kube = reconciled(keda(PROBE), OperatorSettings(prometheus_url=OURS, check_gpu_nodes=False))
    cond = degraded(kube)
    assert (cond.get("status"), cond.get("reason")) == ("True", r.INVALID_SPEC), cond
    assert "spec.autoscaling.prometheusUrl" in cond["message"]
    assert PROBE in cond["message"] and "TRITONLLM_PROMETHEUS_URL_ALLOWED" in cond["message"]
    # nothing but the deployment's own status and its Event is written
    assert {w.kind for w in kube.writes()} == {f"{c.KIND}/status", "Event"}, kube.writes()


@pytest.mark.parametrize(
    ("url", "settings"),
    [
        (None, {"prometheus_url": OURS}),  # the operator's own, by default
        (OURS, {"prometheus_url": OURS}),  # named again by the CR
        ("http://prom.team-a:9090", {"prometheus_url_allowed": ["prom.team-a"]}),
        (PROBE, {"prometheus_url_allowed": ["*"]}),  # the old behaviour, opted in
    ],
)
def test_an_allowed_prometheus_is_reconciled(url: str | None, settings: dict[str, Any]) -> None:
    kube = reconciled(keda(url), OperatorSettings(**settings, check_gpu_nodes=False))
    assert degraded(kube).get("reason") != r.INVALID_SPEC
    assert degraded(kube).get("status") != "True", degraded(kube)
    assert ("create", "Job") in {(w.verb, w.kind) for w in kube.writes()}  # the build started


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://prometheus.monitoring:9090/api", True),
        ("http://PROMETHEUS.monitoring:9090", True),
        ("http://prometheus.monitoring:9091", False),  # another port
        ("https://prometheus.monitoring:9090", False),  # another scheme
        ("http://prometheus.monitoring:9090@evil.example:9090", False),  # userinfo, not host
        ("http://prometheus.monitoring.evil.example:9090", False),
        ("https://thanos.obs/query/api", True),  # below the entry's path, default port
        ("https://thanos.obs:443/query", True),
        ("https://thanos.obs/queryx", False),
        ("https://thanos.obs/", False),
        ("http://prom.team-a", True),  # a host entry: any port and scheme
        ("http://prom.team-b:9091", True),  # host:port
        ("http://prom.team-b:9092", False),
        ("http://10.0.0.1:9090", False),
    ],
)
def test_the_allow_list_matches_scheme_host_port_and_path(url: str, allowed: bool) -> None:
    settings = OperatorSettings(prometheus_url=OURS, prometheus_url_allowed=[
        "https://thanos.obs/query", "prom.team-a", "prom.team-b:9091"])
    assert settings.allows_prometheus_url(url) is allowed


def test_the_setting_is_read_from_the_environment_as_a_list() -> None:
    env = {"TRITONLLM_PROMETHEUS_URL_ALLOWED": "prom.a, https://thanos.obs/q"}
    assert OperatorSettings.from_env(env).prometheus_url_allowed == ["prom.a",
                                                                     "https://thanos.obs/q"]
    assert OperatorSettings.from_env({}).prometheus_url_allowed == []


def test_render_refuses_it_when_given_the_setting(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TRITONLLM_PROMETHEUS_URL_ALLOWED", raising=False)
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(keda(PROBE)))
    assert main(["render", "-f", str(path), "--prometheus-url", OURS,
                 "--prometheus-url-allowed", "prom.team-a"]) == 2
    assert "spec.autoscaling.prometheusUrl" in capsys.readouterr().err
    # without the setting, render cannot know the operator's list: it renders (operator-side)
    assert main(["render", "-f", str(path)]) == 0


def test_the_chart_sets_the_allow_list_from_its_values() -> None:
    root = Path(__file__).resolve().parents[2] / "charts" / "tritonllm"
    values = yaml.safe_load((root / "values.yaml").read_text())
    assert values["settings"]["prometheusUrlAllowed"] == []
    template = (root / "templates" / "deployment.yaml").read_text()
    assert ('{name: TRITONLLM_PROMETHEUS_URL_ALLOWED, value: {{ join "," '
            '.Values.settings.prometheusUrlAllowed | quote }}}') in template
