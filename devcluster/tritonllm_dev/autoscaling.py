"""The autoscaling tier of the local cluster: Prometheus, prometheus-adapter and KEDA on the host,
against the cluster's admin kubeconfig (no pods, no images), like the Argo CD tier.

What runs (see docs/local-cluster.md, "Autoscaling tier"):

- ``prometheus`` (built from its Go module with only Kubernetes service discovery): discovers
  pods through the API server (``kubernetes_sd_configs``, role ``pod``) and scrapes those
  annotated ``prometheus.io/scrape: "true"`` at ``prometheus.io/port`` and ``prometheus.io/path``,
  labelling their series ``namespace``, ``pod`` and each pod label; scrapes the operator's
  metrics endpoints given as ``host:port``; evaluates the caller's recording rules. Every 2 s.
- ``prometheus-adapter``: serves ``custom.metrics.k8s.io`` (v1beta1, v1beta2) from Prometheus
  queries, with the caller's adapter rules (``--config``).
- KEDA's operator (ScaledObjects become HorizontalPodAutoscalers; it scales to and from zero
  itself) and its metrics API server, serving ``external.metrics.k8s.io``; they talk gRPC over
  mutual TLS on 127.0.0.1. KEDA's admission webhooks are not run.

How the API server reaches the two metrics servers on the host: each APIService names a Service
of type ``ExternalName`` whose name is ``127.0.0.1``; the aggregator dials that name at the
APIService's port (Endpoints could not carry a loopback address), checks the serving
certificate against the APIService's ``caBundle`` (the cluster CA) for the name
``<service>.<namespace>.svc``, and authenticates with the front-proxy client certificate that
``LocalCluster`` gives the API server; the servers trust it through kube-system's
``extension-apiserver-authentication`` ConfigMap.

Pod IPs: Prometheus runs on the host, so it reaches the real node's pods (on the host's bridge)
directly; kwok pods have made-up IPs and show as down targets. Tests that need pod series from
kwok pods add a static scrape job (``extra_scrape_configs``) with ``honor_labels: true``.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from tritonllm_dev.build import build_component
from tritonllm_dev.local import ClusterError, LocalCluster, _free_port
from tritonllm_dev.pki import serving_cert
from tritonllm_dev.tier import HostTier, http_ok
from tritonllm_dev.versions import (
    KEDA,
    KEDA_CRD_FILES,
    PROMETHEUS,
    PROMETHEUS_ADAPTER,
    PROMETHEUS_OPERATOR_CRD_FILES,
    PROMETHEUS_OPERATOR_CRDS,
)

#: Pod annotations that make Prometheus scrape a pod (the product's pods carry them).
SCRAPE_ANNOTATION = "prometheus.io/scrape"
PORT_ANNOTATION = "prometheus.io/port"
PATH_ANNOTATION = "prometheus.io/path"
#: Scrape and rule evaluation interval (short, so that tests wait little).
SCRAPE_INTERVAL = "2s"
#: How often prometheus-adapter lists the series its rules match (its default is 10 min).
ADAPTER_RELIST = "4s"
#: Job names of the generated scrape configs.
PODS_JOB = "kubernetes-pods"
OPERATOR_JOB = "tritonllm-operator"
#: The OpenAI frontends of the annotated pods (their container port named `openai`): the
#: annotations name one port per pod, Triton's metrics port.
OPENAI_JOB = "tritonllm-openai"

ADAPTER_NAMESPACE = "monitoring"
ADAPTER_SERVICE = "prometheus-adapter"
KEDA_NAMESPACE = "keda"
KEDA_SERVICE = "keda-metrics-apiserver"
#: The host address the metrics APIs' ExternalName Services name.
LOOPBACK = "127.0.0.1"

#: Used when the caller gives no adapter rules: every series with ``namespace`` and ``pod``
#: labels becomes a pods metric of the same name (summed per pod).
DEFAULT_ADAPTER_RULES: dict[str, Any] = {
    "rules": [
        {
            "seriesQuery": '{namespace!="",pod!=""}',
            "resources": {
                "overrides": {
                    "namespace": {"resource": "namespace"},
                    "pod": {"resource": "pod"},
                }
            },
            "name": {"matches": "^(.*)$", "as": "${1}"},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        }
    ]
}


def _openai_job(kubeconfig: Path) -> dict[str, Any]:
    """The `openai` container port of every annotated pod, at /metrics (role pod makes one
    target per declared container port, at the pod's IP and that port)."""
    return {
        "job_name": OPENAI_JOB,
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig)}],
        "metrics_path": "/metrics",
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
             "action": "keep", "regex": "true"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
             "action": "keep", "regex": "openai"},
            # Not the scale-to-zero activator's `openai` port: it forwards to the serving pods,
            # and at zero it holds the scrape as a request, which wakes the deployment up.
            {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"],
             "action": "drop", "regex": "activator"},
            {"source_labels": ["__meta_kubernetes_pod_phase"],
             "action": "drop", "regex": "Pending|Succeeded|Failed"},
            {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def prometheus_config(
    kubeconfig: Path,
    *,
    rule_files: Sequence[Path] = (),
    operator_targets: Sequence[str] = (),
    extra_scrape_configs: Sequence[dict[str, Any]] = (),
    interval: str = SCRAPE_INTERVAL,
) -> dict[str, Any]:
    """Prometheus's configuration: the annotated pods of every namespace, the operator's
    ``host:port`` metrics endpoints, and ``extra_scrape_configs`` as given."""
    pods_job: dict[str, Any] = {
        "job_name": PODS_JOB,
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig)}],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "action": "keep",
                "regex": "true",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "action": "drop",
                "regex": "Pending|Succeeded|Failed",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
                "action": "replace",
                "regex": "(.+)",
                "target_label": "__metrics_path__",
            },
            {
                # one target per pod (role: pod yields one per declared container port)
                "source_labels": [
                    "__meta_kubernetes_pod_ip",
                    "__meta_kubernetes_pod_annotation_prometheus_io_port",
                ],
                "action": "replace",
                "regex": r"([^;]+);(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            # every pod label as a series label (app.kubernetes.io/instance ->
            # app_kubernetes_io_instance), before namespace and pod so those two win
            {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }
    jobs = [pods_job, _openai_job(kubeconfig)]
    if operator_targets:
        jobs.append(
            {"job_name": OPERATOR_JOB, "static_configs": [{"targets": list(operator_targets)}]}
        )
    jobs += [dict(job) for job in extra_scrape_configs]
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": jobs,
    }


def _yaml_file(source: Path | str | dict[str, Any], dest: Path) -> Path:
    """``source`` as a file: a path is used as it is; YAML text or a mapping is written to
    ``dest`` (checked to parse)."""
    if isinstance(source, Path):
        if not source.is_file():
            raise ClusterError(f"no such file: {source}")
        return source.resolve()  # the processes run in the work directory
    text = source if isinstance(source, str) else yaml.safe_dump(source, sort_keys=False)
    yaml.safe_load(text)
    dest.write_text(text)
    return dest


def external_service(name: str, namespace: str) -> dict[str, Any]:
    """A Service that sends the aggregator to this host's loopback address."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "ExternalName", "externalName": LOOPBACK},
    }


def api_service(
    group: str, version: str, service: str, namespace: str, port: int, ca: bytes
) -> dict[str, Any]:
    """An APIService for ``version.group`` served by ``service`` at ``port``."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"{version}.{group}"},
        "spec": {
            "group": group,
            "version": version,
            "service": {"name": service, "namespace": namespace, "port": port},
            "caBundle": base64.b64encode(ca).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


def install_prometheus_operator_crds(cluster: LocalCluster) -> list[str]:
    """Install prometheus-operator's PodMonitor, ServiceMonitor and PrometheusRule CRDs (no
    operator runs: they make charts that render these objects installable); return their names."""
    build_component(PROMETHEUS_OPERATOR_CRDS)
    _apply_crd_files(cluster, [PROMETHEUS_OPERATOR_CRDS.path(f) for f in
                               PROMETHEUS_OPERATOR_CRD_FILES])
    names = [_crd_name(f) for f in PROMETHEUS_OPERATOR_CRD_FILES]
    cluster.wait_established(*names)
    return names


def install_keda_crds(cluster: LocalCluster) -> list[str]:
    """Install KEDA's CRDs (from its module, built and cached with it); return their names."""
    build_component(KEDA)
    _apply_crd_files(cluster, [KEDA.path(f) for f in KEDA_CRD_FILES])
    names = [_crd_name(f) for f in KEDA_CRD_FILES]
    cluster.wait_established(*names)
    return names


def _crd_name(file_name: str) -> str:
    """``group_plural.yaml`` (controller-gen's file names) -> ``plural.group``."""
    group, plural = file_name.removesuffix(".yaml").split("_", 1)
    return f"{plural}.{group}"


def _apply_crd_files(cluster: LocalCluster, files: Sequence[Path]) -> None:
    args = ["apply", "--server-side", "--force-conflicts", "--field-manager=tritonllm-cluster"]
    for path in files:
        args += ["-f", str(path)]
    cluster.kubectl(*args)


class AutoscalingStack(HostTier):
    """Prometheus, prometheus-adapter and KEDA for a running ``cluster``; a context manager.

    ``recording_rules`` and ``adapter_rules``: a path to a YAML file, or the YAML itself (text or
    a mapping). ``operator_metrics``: ``host:port`` endpoints scraped as job
    ``tritonllm-operator``. ``extra_scrape_configs``: more Prometheus scrape configs, as given.
    ``workdir`` defaults to ``<cluster state>/run/autoscaling`` (configs, certificates, logs,
    Prometheus's data, which is wiped on every start).
    """

    label = "autoscaling"

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path | None = None,
        *,
        recording_rules: Path | str | dict[str, Any] | None = None,
        adapter_rules: Path | str | dict[str, Any] | None = None,
        operator_metrics: Sequence[str] = (),
        extra_scrape_configs: Sequence[dict[str, Any]] = (),
        keda: bool = True,
        progress: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        super().__init__(workdir or cluster.state_dir / "run" / "autoscaling")
        self.cluster = cluster
        self.recording_rules = recording_rules
        self.adapter_rules = adapter_rules
        self.operator_metrics = list(operator_metrics)
        self.extra_scrape_configs = list(extra_scrape_configs)
        self.keda = keda
        self.progress = progress
        self.prometheus_port = 0
        self.adapter_port = 0
        self.keda_adapter_port = 0
        self.keda_grpc_port = 0
        self.keda_probe_port = 0

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 120) -> None:
        for component in (PROMETHEUS, PROMETHEUS_ADAPTER, *([KEDA] if self.keda else [])):
            build_component(component)
        deadline = time.monotonic() + timeout
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start_prometheus(deadline)
        self._start_prometheus_adapter()
        if self.keda:
            self._start_keda(deadline)
        self._wait_api_service("v1beta2.custom.metrics.k8s.io", deadline)
        self._wait_api_service("v1beta1.custom.metrics.k8s.io", deadline)
        if self.keda:
            self._wait_api_service("v1beta1.external.metrics.k8s.io", deadline)
        self.progress(f"autoscaling tier running: prometheus {self.prometheus_url} "
                      f"(logs in {self.workdir})")

    def stop(self) -> list[int]:
        """Unregister the metrics APIs (so the API server does not keep calling a stopped
        server), then stop every process."""
        if self.procs:  # (fails at once, unchecked, when the cluster is gone already)
            self.cluster.kubectl(
                "delete", "apiservice", "v1beta1.custom.metrics.k8s.io",
                "v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io",
                "--ignore-not-found", "--wait=false", check=False, timeout=30,
            )
        return super().stop()

    def _wait(self, probe: Callable[[], bool], what: str, deadline: float) -> None:
        while not probe():
            self.check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(f"autoscaling: {what} not ready (logs in {self.workdir})")
            time.sleep(0.3)

    def _start_prometheus(self, deadline: float) -> None:
        rule_files = []
        if self.recording_rules is not None:
            rule_files.append(_yaml_file(self.recording_rules, self.workdir / "rules.yaml"))
        config = prometheus_config(
            self.cluster.kubeconfig,
            rule_files=rule_files,
            operator_targets=self.operator_metrics,
            extra_scrape_configs=self.extra_scrape_configs,
        )
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        data = self.workdir / "prometheus-data"
        shutil.rmtree(data, ignore_errors=True)
        self.prometheus_port = _free_port()
        self.spawn(
            "prometheus",
            [
                str(PROMETHEUS.path("prometheus")),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=1d",
                f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
                "--web.enable-lifecycle",  # POST /-/reload re-reads config and rules
                "--log.level=info",
            ],
            {},
        )
        self._wait(lambda: http_ok(f"{self.prometheus_url}/-/ready"), "prometheus", deadline)

    def _apiserver_flags(self, port: int, cert: Path) -> list[str]:
        """Flags of an aggregated API server on the host (both adapters share them)."""
        kubeconfig = str(self.cluster.kubeconfig)
        return [
            f"--secure-port={port}",
            f"--bind-address={LOOPBACK}",
            f"--tls-cert-file={cert}.crt",
            f"--tls-private-key-file={cert}.key",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--lister-kubeconfig={kubeconfig}",
        ]

    def _register(self, service: str, namespace: str, port: int, group: str,
                  versions: Sequence[str]) -> None:
        ca = self.cluster.pki.ca_crt.read_bytes()
        self.cluster.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                external_service(service, namespace),
                *(api_service(group, v, service, namespace, port, ca) for v in versions),
            ]
        )

    def _start_prometheus_adapter(self) -> None:
        rules = _yaml_file(self.adapter_rules or DEFAULT_ADAPTER_RULES,
                           self.workdir / "adapter-rules.yaml")
        cert = serving_cert(self.cluster.pki, self.workdir / "adapter",
                            [f"{ADAPTER_SERVICE}.{ADAPTER_NAMESPACE}.svc", LOOPBACK])
        self.adapter_port = _free_port()
        self.spawn(
            "prometheus-adapter",
            [
                str(PROMETHEUS_ADAPTER.path("prometheus-adapter")),
                *self._apiserver_flags(self.adapter_port, cert),
                f"--cert-dir={self.workdir / 'adapter-certs'}",
                f"--prometheus-url={self.prometheus_url}/",
                f"--config={rules}",
                f"--metrics-relist-interval={ADAPTER_RELIST}",
                "--v=2",
            ],
            {},
        )
        self._register(ADAPTER_SERVICE, ADAPTER_NAMESPACE, self.adapter_port,
                       "custom.metrics.k8s.io", ("v1beta1", "v1beta2"))

    def _start_keda(self, deadline: float) -> None:
        self.cluster.apply(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KEDA_NAMESPACE}}]
        )
        install_keda_crds(self.cluster)
        # One certificate for KEDA's gRPC link (both ends, mutual TLS) and the metrics API;
        # both read ca.crt, tls.crt and tls.key from one directory.
        certs = self.workdir / "keda-certs"
        certs.mkdir(exist_ok=True)
        cert = serving_cert(self.cluster.pki, certs / "tls",
                            [f"{KEDA_SERVICE}.{KEDA_NAMESPACE}.svc", "localhost", LOOPBACK],
                            client=True)
        shutil.copyfile(self.cluster.pki.ca_crt, certs / "ca.crt")
        # CAs its scalers trust besides the system's (rather than its default /custom/ca)
        cas = self.workdir / "keda-ca"
        cas.mkdir(exist_ok=True)
        shutil.copyfile(self.cluster.pki.ca_crt, cas / "ca.crt")
        env = {
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "WATCH_NAMESPACE": "",  # every namespace
            "POD_NAMESPACE": KEDA_NAMESPACE,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NAMESPACE,
        }
        self.keda_grpc_port, self.keda_probe_port = _free_port(), _free_port()
        self.spawn(
            "keda-operator",
            [
                str(KEDA.path("keda-operator")),
                f"--metrics-bind-address=127.0.0.1:{_free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{self.keda_probe_port}",
                f"--metrics-service-bind-address=127.0.0.1:{self.keda_grpc_port}",
                f"--cert-dir={certs}",
                f"--ca-dir={cas}",
                "--enable-cert-rotation=false",
                "--leader-elect=false",
                "--zap-log-level=info",
            ],
            env,
        )
        self._wait(lambda: http_ok(f"http://127.0.0.1:{self.keda_probe_port}/readyz"),
                   "keda operator", deadline)
        self.keda_adapter_port = _free_port()
        self.spawn(
            "keda-adapter",
            [
                str(KEDA.path("keda-adapter")),
                *self._apiserver_flags(self.keda_adapter_port, cert),
                f"--cert-dir={certs}",
                f"--metrics-service-address=127.0.0.1:{self.keda_grpc_port}",
                # its own /metrics listens on every interface (no bind-address flag)
                f"--port={_free_port()}",
                "--v=0",
            ],
            env,
        )
        self._register(KEDA_SERVICE, KEDA_NAMESPACE, self.keda_adapter_port,
                       "external.metrics.k8s.io", ("v1beta1",))

    def _wait_api_service(self, name: str, deadline: float) -> None:
        def available() -> bool:
            out = self.cluster.kubectl("get", "apiservice", name, "-o", "json", check=False)
            if out.returncode != 0:
                return False
            conditions = json.loads(out.stdout).get("status", {}).get("conditions") or []
            return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

        self._wait(available, f"APIService {name}", deadline)

    # ---- Prometheus --------------------------------------------------------------------------

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise ClusterError(f"prometheus query {promql!r}: {body}")
        return list(body["data"]["result"])

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets (``labels``, ``health``, ``lastError``, ...)."""
        with urllib.request.urlopen(f"{self.prometheus_url}/api/v1/targets", timeout=10) as r:
            return list(json.loads(r.read())["data"]["activeTargets"])

    def set_recording_rules(self, rules: Path | str | dict[str, Any]) -> None:
        """Replace the recording rules and have Prometheus reload them."""
        self.recording_rules = rules
        rule_file = _yaml_file(rules, self.workdir / "rules.yaml")
        config_file = self.workdir / "prometheus.yml"
        config = yaml.safe_load(config_file.read_text())
        config["rule_files"] = [str(rule_file)]
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        request = urllib.request.Request(f"{self.prometheus_url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as r:
            if r.status != 200:
                raise ClusterError(f"prometheus reload answered {r.status}")
