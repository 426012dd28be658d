"""The autoscaling tier's configuration and objects, without building or running anything."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from tritonllm_dev.autoscaling import (
    DEFAULT_ADAPTER_RULES,
    LOOPBACK,
    OPENAI_JOB,
    OPERATOR_JOB,
    PODS_JOB,
    _crd_name,
    _yaml_file,
    api_service,
    external_service,
    prometheus_config,
)
from tritonllm_dev.local import ClusterError
from tritonllm_dev.versions import (
    AUTOSCALING,
    COMPONENTS,
    KEDA,
    PROMETHEUS_ADAPTER,
    PROMETHEUS_OPERATOR_CRDS,
)


def test_components_are_built_and_cached_like_the_rest() -> None:
    assert set(AUTOSCALING) <= set(COMPONENTS)
    assert KEDA.binaries == ("keda-operator", "keda-adapter")
    assert "keda.sh_scaledobjects.yaml" in KEDA.files
    assert PROMETHEUS_ADAPTER.bindir.name == f"prometheus-adapter-{PROMETHEUS_ADAPTER.version}"
    assert PROMETHEUS_OPERATOR_CRDS.binaries == ()
    assert {_crd_name(f) for f in PROMETHEUS_OPERATOR_CRDS.files} == {
        "podmonitors.monitoring.coreos.com",
        "servicemonitors.monitoring.coreos.com",
        "prometheusrules.monitoring.coreos.com",
    }


def test_prometheus_keeps_annotated_pods_and_labels_them_for_the_adapter() -> None:
    extra = {"job_name": "x", "honor_labels": True, "static_configs": [{"targets": ["h:1"]}]}
    config = prometheus_config(Path("/kc"), rule_files=[Path("/r.yaml")],
                               operator_targets=["127.0.0.1:8080"], extra_scrape_configs=[extra])
    assert config["global"]["scrape_interval"] == "2s"
    assert config["rule_files"] == ["/r.yaml"]
    pods, openai, operator, given = config["scrape_configs"]
    assert pods["job_name"] == PODS_JOB
    assert pods["kubernetes_sd_configs"] == [{"role": "pod", "kubeconfig_file": "/kc"}]
    keep = pods["relabel_configs"][0]
    assert keep["action"] == "keep" and keep["regex"] == "true"
    assert keep["source_labels"] == ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]
    targets = {r.get("target_label"): r for r in pods["relabel_configs"]}
    assert targets["namespace"]["source_labels"] == ["__meta_kubernetes_namespace"]
    assert targets["pod"]["source_labels"] == ["__meta_kubernetes_pod_name"]
    assert targets["__metrics_path__"]["source_labels"] == [
        "__meta_kubernetes_pod_annotation_prometheus_io_path"
    ]
    assert targets["__address__"]["replacement"] == "$1:$2"
    labelmap = [r for r in pods["relabel_configs"] if r.get("action") == "labelmap"]
    assert labelmap == [{"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"}]
    assert operator == {"job_name": OPERATOR_JOB,
                        "static_configs": [{"targets": ["127.0.0.1:8080"]}]}
    assert given == extra
    # the OpenAI frontends: the annotated pods' container port named openai
    assert openai["job_name"] == OPENAI_JOB and openai["metrics_path"] == "/metrics"
    kept = {tuple(r["source_labels"]): r["regex"] for r in openai["relabel_configs"]
            if r.get("action") == "keep"}
    assert kept == {("__meta_kubernetes_pod_annotation_prometheus_io_scrape",): "true",
                    ("__meta_kubernetes_pod_container_port_name",): "openai"}
    # no operator endpoint: no operator job
    assert [j["job_name"] for j in prometheus_config(Path("/kc"))["scrape_configs"]] == [
        PODS_JOB, OPENAI_JOB]


def test_metrics_apis_reach_the_host_through_an_external_name_service() -> None:
    svc = external_service("prometheus-adapter", "monitoring")
    assert svc["spec"] == {"type": "ExternalName", "externalName": LOOPBACK}
    api = api_service("custom.metrics.k8s.io", "v1beta2", "prometheus-adapter", "monitoring",
                      4443, b"CA")
    assert api["metadata"]["name"] == "v1beta2.custom.metrics.k8s.io"
    assert api["spec"]["service"] == {"name": "prometheus-adapter", "namespace": "monitoring",
                                      "port": 4443}
    assert base64.b64decode(api["spec"]["caBundle"]) == b"CA"
    assert "insecureSkipTLSVerify" not in api["spec"]


def test_rules_are_a_path_or_yaml(tmp_path: Path) -> None:
    given = tmp_path / "given.yaml"
    given.write_text("groups: []\n")
    assert _yaml_file(given, tmp_path / "out.yaml") == given.resolve()
    written = _yaml_file("groups: []\n", tmp_path / "text.yaml")
    assert written.read_text() == "groups: []\n"
    mapping = _yaml_file(DEFAULT_ADAPTER_RULES, tmp_path / "map.yaml")
    assert yaml.safe_load(mapping.read_text()) == DEFAULT_ADAPTER_RULES
    with pytest.raises(ClusterError, match="no such file"):
        _yaml_file(tmp_path / "absent.yaml", tmp_path / "x.yaml")
    with pytest.raises(yaml.YAMLError):
        _yaml_file("groups: [", tmp_path / "bad.yaml")
