"""What scales the serving workload: an HPA, or a KEDA ScaledObject and, at minReplicas 0, the
activator in front of the serving pods; and the PodMonitor that lets a Prometheus operator scrape
them.

Both autoscalers act on the workload's scale subresource (Deployment, or LeaderWorkerSet: one
replica is one group of `nodes` pods, so a multi-node group scales as a unit). The operator never
writes replicas while one of them owns the count (see serving._replicas).

Signals come from Prometheus through the chart's recording rules (charts/tritonllm/files/), per
serving pod, labelled ``namespace``, ``pod`` and the pod's ``app.kubernetes.io/instance`` label as
``app_kubernetes_io_instance`` (kubernetes_sd's pod-label map, or the PodMonitor's
podTargetLabels).

Scale to zero (KEDA, minReplicas 0): the Service named after the deployment selects the
activator's pods instead of the serving pods. The activator is HAProxy (a real proxy, its config
rendered here): it forwards to the ``<name>-backend`` Service of the serving pods and, while that
Service has no ready endpoint (zero replicas, or the first one still loading), retries the
connection once a second for up to ACTIVATOR_HOLD_SECONDS, so requests wait instead of failing.
Its pods admit the clients the serving pods admit (the same sources, render.network). Its
Prometheus exporter reports the requests it holds; KEDA's second trigger reads them, so the first
request activates the deployment. Why HAProxy and not Knative's activator:
docs/autoscaling.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import FieldError, TritonLLMDeployment
from tritonllm.api.settings import OperatorSettings

from . import naming, network
from .pod import RenderOptions, metadata, pull_secrets, store_placement

# Pods metrics (custom.metrics.k8s.io, served by prometheus-adapter with the chart's rules) the HPA
# reads, per autoscaling.metric.
POD_METRICS = {
    "queueComputeRatio": "tritonllm_queue_compute_ratio",
    "pendingRequests": "nv_inference_pending_request_count",
    "backendWaitingRequests": "tritonllm_backend_waiting_requests",
    "kvCacheUtilization": "tritonllm_kv_cache_utilization",
}
# Recording rules (charts/tritonllm/files/recording-rules.yaml), one series per serving pod,
# that KEDA's Prometheus trigger sums over the deployment's pods.
RECORDED_SERIES = {
    "queueComputeRatio": "tritonllm:queue_compute_ratio",
    "pendingRequests": "tritonllm:pending_requests",
    "backendWaitingRequests": "tritonllm:backend_waiting_requests",
    "kvCacheUtilization": "tritonllm:kv_cache_utilization",
}
KEDA_API_VERSION = "keda.sh/v1alpha1"
POD_MONITOR_API_VERSION = "monitoring.coreos.com/v1"
# Prometheus label that pod label app.kubernetes.io/instance becomes.
INSTANCE_SERIES_LABEL = "app_kubernetes_io_instance"

COMPONENT_ACTIVATOR = "activator"
ACTIVATOR_STATS_PORT = 8404
# How long the activator holds a request while no serving pod is ready: one connection attempt
# a second (HAProxy waits min(timeout connect, 1 s) between retries). Long enough for a cached
# engine to load; a cold build is far longer and is not waited for.
ACTIVATOR_HOLD_SECONDS = 600
# UID of the haproxy user in the official haproxy image (and of our local build of it).
ACTIVATOR_UID = 99
ACTIVATOR_CONFIG_KEY = "haproxy.cfg"
# The cluster's DNS domain in the activator's backend address (HAProxy resolves it itself).
CLUSTER_DOMAIN = "cluster.local"
# What a request held by the activator counts as in KEDA's activation trigger, per replica:
# enough in-flight requests to fill one replica's batch bring the next one.
ACTIVATOR_TARGET_PER_REPLICA = "8"


def scales_to_zero(dep: TritonLLMDeployment) -> bool:
    a = dep.spec.autoscaling
    return a is not None and a.autoscaler == "KEDA" and a.minReplicas == 0


def _target_ref(dep: TritonLLMDeployment) -> dict[str, str]:
    topology = dep.spec.topology
    return {
        "apiVersion": topology.workload_api_version,
        "kind": topology.workload_kind,
        "name": naming.serving_name(dep),
    }


def _behavior(dep: TritonLLMDeployment) -> dict[str, Any]:
    """GPU pods start slowly: scale up one replica (group) at a time after a short window,
    scale down only after the metric stayed low for the whole down window."""
    a = dep.spec.autoscaling
    assert a is not None
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": a.scaleUpWindowSeconds,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": a.scaleDownWindowSeconds,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }


def _serving_metadata(dep: TritonLLMDeployment) -> dict[str, Any]:
    return metadata(dep, naming.serving_name(dep), naming.base_labels(dep, c.COMPONENT_SERVER))


def hpa(dep: TritonLLMDeployment) -> dict[str, Any] | None:
    a = dep.spec.autoscaling
    if a is None or a.autoscaler != "HPA":
        return None
    if a.metric == "cpu":
        metric: dict[str, Any] = {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": int(float(a.target))},
            },
        }
    else:
        metric = {
            "type": "Pods",
            "pods": {
                "metric": {"name": POD_METRICS[a.metric]},
                "target": {"type": "AverageValue", "averageValue": a.target},
            },
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _serving_metadata(dep),
        "spec": {
            "scaleTargetRef": _target_ref(dep),
            "minReplicas": a.minReplicas,
            "maxReplicas": a.maxReplicas,
            "metrics": [metric],
            "behavior": _behavior(dep),
        },
    }


def _label_name(key: str) -> str:
    """A pod label key as Prometheus' service discovery names it (non-alphanumerics to `_`)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _selector(dep: TritonLLMDeployment) -> str:
    return f'namespace="{dep.namespace}",{INSTANCE_SERIES_LABEL}="{dep.name}"'


def metric_query(dep: TritonLLMDeployment) -> str:
    """PromQL: the deployment's total of its scaling signal (KEDA divides by replicas). Only
    serving pods (rank 0 of each replica) export the series the rules record."""
    a = dep.spec.autoscaling
    assert a is not None
    return f"sum({RECORDED_SERIES[a.metric]}{{{_selector(dep)}}})"


def held_requests_query(dep: TritonLLMDeployment) -> str:
    """PromQL: requests the activator is forwarding or holding (HAProxy's backend sessions)."""
    return (
        f"sum(haproxy_backend_current_sessions{{{_selector(dep)},"
        f'app_kubernetes_io_component="{COMPONENT_ACTIVATOR}",proxy=~"http|grpc|openai"}})'
    )


def scaled_object(dep: TritonLLMDeployment, opts: RenderOptions) -> dict[str, Any] | None:
    a = dep.spec.autoscaling
    if a is None or a.autoscaler != "KEDA":
        return None
    server = a.prometheusUrl or opts.settings.prometheus_url or ""

    def trigger(name: str, query: str, threshold: str) -> dict[str, Any]:
        return {
            "type": "prometheus",
            "name": name,
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": server,
                "query": query,
                "threshold": threshold,
                "activationThreshold": a.activationTarget,
                "ignoreNullValues": "true",
            },
        }

    triggers = [trigger("signal", metric_query(dep), a.target)]
    if scales_to_zero(dep):
        triggers.append(trigger("held-requests", held_requests_query(dep),
                                ACTIVATOR_TARGET_PER_REPLICA))
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": _serving_metadata(dep),
        "spec": {
            "scaleTargetRef": _target_ref(dep),
            "minReplicaCount": a.minReplicas,
            "maxReplicaCount": a.maxReplicas,
            "pollingInterval": a.pollingIntervalSeconds,
            "cooldownPeriod": a.cooldownSeconds,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(dep)}},
            "triggers": triggers,
        },
    }


def lacks_prometheus(scaled: Mapping[str, Any] | None) -> bool:
    """Whether a rendered ScaledObject has no Prometheus to query (neither the CR nor the
    operator's settings named one)."""
    return scaled is not None and not scaled["spec"]["triggers"][0]["metadata"]["serverAddress"]


def prometheus_url_problems(dep: TritonLLMDeployment,
                            settings: OperatorSettings) -> list[FieldError]:
    """A KEDA deployment's own Prometheus must be one the operator's settings allow: KEDA
    queries it from its own pod, with its own network reach."""
    a = dep.spec.autoscaling
    if a is None or a.autoscaler != "KEDA" or not a.prometheusUrl:
        return []
    if settings.allows_prometheus_url(a.prometheusUrl):
        return []
    allowed = ", ".join([*settings.prometheus_url_allowed,
                         *([settings.prometheus_url] if settings.prometheus_url else [])])
    return [FieldError(
        "spec.autoscaling.prometheusUrl",
        f"{a.prometheusUrl} is not a Prometheus this operator allows (allowed: "
        f"{allowed or 'none'}): leave it unset to use the operator's own, or ask the "
        "operator's administrator to add it to settings.prometheusUrlAllowed "
        "(TRITONLLM_PROMETHEUS_URL_ALLOWED)")]


def pod_monitor(
    dep: TritonLLMDeployment, opts: RenderOptions, *, openai: bool = False
) -> dict[str, Any] | None:
    """A PodMonitor over the serving pods' metrics port (and the OpenAI frontend's, and the
    activator's), rendered when the cluster serves the Prometheus operator's PodMonitor kind."""
    if not opts.pod_monitors:
        return None
    endpoints: list[dict[str, Any]] = [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    if openai:
        # The frontends' own metrics, not the activator's `openai` port: that one forwards to
        # the serving pods, and at zero it would hold each scrape as a request, which wakes the
        # deployment up.
        component = f"__meta_kubernetes_pod_label_{_label_name(c.LABEL_COMPONENT)}"
        endpoints.append({"port": c.OPENAI_PORT_NAME, "path": "/metrics", "interval": "15s",
                          "relabelings": [{"sourceLabels": [component],
                                           "regex": COMPONENT_ACTIVATOR, "action": "drop"}]})
    if scales_to_zero(dep):
        endpoints.append({"port": "stats", "path": "/metrics", "interval": "15s"})
    return {
        "apiVersion": POD_MONITOR_API_VERSION,
        "kind": "PodMonitor",
        "metadata": _serving_metadata(dep),
        "spec": {
            "selector": {
                "matchLabels": {c.LABEL_NAME: c.APP_NAME, c.LABEL_INSTANCE: dep.name},
                "matchExpressions": [{
                    "key": c.LABEL_COMPONENT,
                    "operator": "In",
                    "values": [c.COMPONENT_SERVER, COMPONENT_ACTIVATOR],
                }],
            },
            "podTargetLabels": [c.LABEL_INSTANCE, c.LABEL_COMPONENT],
            "podMetricsEndpoints": endpoints,
        },
    }


# --- the activator (scale to zero) ----------------------------------------------------------


def backend_service_name(dep: TritonLLMDeployment) -> str:
    return f"{naming.serving_name(dep)}-backend"


def activator_name(dep: TritonLLMDeployment) -> str:
    return f"{naming.serving_name(dep)}-activator"


def activator_labels(dep: TritonLLMDeployment) -> dict[str, str]:
    return {c.LABEL_NAME: c.APP_NAME, c.LABEL_INSTANCE: dep.name,
            c.LABEL_COMPONENT: COMPONENT_ACTIVATOR}


def activator_config(
    dep: TritonLLMDeployment, opts: RenderOptions, *, openai: bool = False
) -> str:
    """haproxy.cfg: HTTP and gRPC (h2c) to the backend Service, and the OpenAI port when the
    serving pods serve it, each request held while no serving pod is ready; Prometheus exporter
    and health on the stats port."""
    backend = f"{backend_service_name(dep)}.{dep.namespace}.svc.{CLUSTER_DOMAIN}"
    # The OpenAI API is plain HTTP to the frontend: the same hold and retry rules as `http`.
    frontend = [
        "frontend openai", f"  bind :{c.OPENAI_PORT}", "  default_backend openai",
    ] if openai else []
    server = ["backend openai", f"  server serving {backend}:{c.OPENAI_PORT}"] if openai else []
    return "\n".join([
        "global",
        "  maxconn 4096",
        "resolvers cluster",
        "  parse-resolv-conf",
        "  hold valid 10s",
        "defaults",
        "  mode http",
        "  timeout connect 1s",
        "  timeout client 1h",
        "  timeout server 1h",
        "  timeout http-keep-alive 5s",
        f"  retries {ACTIVATOR_HOLD_SECONDS}",
        # Only a connection that never opened is retried: the request was not sent, so no
        # backend saw it. A closed or timed-out answer (empty-response, response-timeout,
        # junk-response, a status) means a backend had the prompt, maybe the one that crashed
        # it; sending it again could crash the next replica, and this for up to
        # ACTIVATOR_HOLD_SECONDS. (0rtt-rejected needs TLS early data; the backend is plain.)
        "  retry-on conn-failure",
        "  default-server resolvers cluster init-addr last,libc,none",
        "frontend http",
        f"  bind :{c.HTTP_PORT}",
        "  default_backend http",
        "frontend grpc",
        f"  bind :{c.GRPC_PORT} proto h2",
        "  default_backend grpc",
        *frontend,
        "frontend stats",
        f"  bind :{ACTIVATOR_STATS_PORT}",
        "  http-request use-service prometheus-exporter if { path /metrics }",
        "  monitor-uri /healthz",
        "backend http",
        f"  server serving {backend}:{c.HTTP_PORT}",
        "backend grpc",
        f"  server serving {backend}:{c.GRPC_PORT} proto h2",
        *server,
        "",
    ])


def activator_network_policy(
    dep: TritonLLMDeployment, *, openai: bool = False
) -> dict[str, Any] | None:
    """Ingress to the activator's pods from the sources the serving pods admit: at zero the
    deployment's Service selects them, so without it every pod of the cluster would reach the
    model through them. The stats port too, like the serving pods' metrics port: Prometheus
    reads the held requests there, which is what activates the deployment."""
    if not scales_to_zero(dep) or not dep.spec.networkPolicy.enabled:
        return None
    ports = (c.HTTP_PORT, c.GRPC_PORT, ACTIVATOR_STATS_PORT, *([c.OPENAI_PORT] if openai else []))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(dep, activator_name(dep),
                             naming.base_labels(dep, COMPONENT_ACTIVATOR)),
        "spec": {
            "podSelector": {"matchLabels": activator_labels(dep)},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": network.sources(dep),
                "ports": [{"protocol": "TCP", "port": p} for p in ports],
            }],
        },
    }


def activator_objects(
    dep: TritonLLMDeployment, opts: RenderOptions, *, openai: bool = False
) -> list[dict[str, Any]]:
    """ConfigMap, backend Service, NetworkPolicy and Deployment of the activator (the policy
    before the pods it admits to); none unless the deployment scales to zero. `openai`: the
    serving pods serve the OpenAI API, which the activator forwards and holds as well."""
    if not scales_to_zero(dep):
        return []
    name = activator_name(dep)
    labels = activator_labels(dep)
    config = activator_config(dep, opts, openai=openai)
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(dep, name, naming.base_labels(dep, COMPONENT_ACTIVATOR)),
        "data": {ACTIVATOR_CONFIG_KEY: config},
    }
    workload = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(dep, name, naming.base_labels(dep, COMPONENT_ACTIVATOR)),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": _activator_pod(dep, opts, labels, config, openai=openai),
        },
    }
    backend = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(dep, backend_service_name(dep),
                             naming.base_labels(dep, c.COMPONENT_SERVER)),
        "spec": {
            "type": "ClusterIP",
            "selector": naming.selector_labels(dep),
            "ports": [
                {"name": "http", "port": c.HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": c.GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
                 "appProtocol": "grpc"},
                *([openai_port()] if openai else []),
            ],
        },
    }
    policy = activator_network_policy(dep, openai=openai)
    return [configmap, backend, *([policy] if policy else []), workload]


def openai_port() -> dict[str, Any]:
    """The OpenAI port of a Service (the deployment's, the activator's backend)."""
    return {"name": c.OPENAI_PORT_NAME, "port": c.OPENAI_PORT,
            "targetPort": c.OPENAI_PORT_NAME, "protocol": "TCP", "appProtocol": "http"}


def _activator_pod(dep: TritonLLMDeployment, opts: RenderOptions, labels: dict[str, str],
                   config: str, *, openai: bool = False) -> dict[str, Any]:
    ports = [("http", c.HTTP_PORT), ("grpc", c.GRPC_PORT), ("stats", ACTIVATOR_STATS_PORT)]
    if openai:
        ports.append((c.OPENAI_PORT_NAME, c.OPENAI_PORT))
    return {
        "metadata": {
            "labels": labels,
            "annotations": {
                # A config change rolls the activator's pods.
                f"{c.GROUP}/config-hash": naming.stable_hash(config),
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(ACTIVATOR_STATS_PORT),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": {
            # Placed like the serving pods (podTemplate's nodeSelector and tolerations), so it
            # runs where they can be reached; it takes no GPU.
            **store_placement(dep),
            **pull_secrets(dep),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": ACTIVATOR_UID,
                "runAsGroup": ACTIVATOR_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            # Held requests must finish before an activator pod goes away.
            "terminationGracePeriodSeconds": 60,
            "containers": [{
                "name": "haproxy",
                "image": opts.settings.activator_image,
                "args": ["-W", "-db", "-f", f"/etc/haproxy/{ACTIVATOR_CONFIG_KEY}"],
                "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports],
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": "stats"},
                    "periodSeconds": 2,
                },
                "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "config", "mountPath": "/etc/haproxy",
                                  "readOnly": True}],
            }],
            "volumes": [{"name": "config", "configMap": {"name": activator_name(dep)}}],
        },
    }

