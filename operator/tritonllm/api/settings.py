"""The operator's settings: one documented object, loaded once at start-up.

Every setting comes from an environment variable ``TRITONLLM_<NAME>`` (the Helm chart sets them)
or from a `tritonllm run` flag, which wins. Nothing else configures the operator.
"""

from __future__ import annotations

import os
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field


class OperatorSettings(BaseModel):
    """Settings of a running operator."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True, extra="forbid")

    namespaces: list[str] = Field(default_factory=list)
    """Namespaces to watch; empty watches the whole cluster (TRITONLLM_NAMESPACES, comma list)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level (TRITONLLM_LOG_LEVEL)."""
    log_format: Literal["json", "text"] = "json"
    """json: one structured object per line with the object's namespace/name; text for humans."""
    metrics_port: int = Field(default=9090, ge=0, le=65535)
    """Port of the Prometheus /metrics endpoint; 0 disables it."""
    health_port: int = Field(default=8081, ge=0, le=65535)
    """Port of the /healthz liveness endpoint; 0 disables it."""
    bind_address: str = "0.0.0.0"
    """Address the metrics and health endpoints listen on."""
    peering: str = "tritonllm"
    """kopf peering name (leader election between replicas); empty runs standalone."""
    leader_election: str = ""
    """Name of a coordination.k8s.io Lease that elects the acting replica (a standby takes over
    within seconds of the leader's death, SIGKILL included); kopf then runs without peering.
    Empty: kopf peering (`peering`) elects it."""
    leader_election_namespace: str = ""
    """Namespace of that Lease (the chart sets the operator's own); empty: the first watched
    namespace, else `default`."""
    operator_namespace: str = ""
    """The namespace the operator runs in (the chart sets it). A verified rollout's smoke
    requests come from there: the serving pods' NetworkPolicy admits the operator's pods
    there (the chart's labels: app.kubernetes.io/name tritonllm, component operator) on the
    HTTP port. Empty: the operator runs outside the cluster (no namespace to admit)."""
    lease_seconds: float = Field(default=6.0, ge=2, le=60)
    """How long a Lease holds without renewal (renewed every third of it): the longest a
    killed leader leaves the operator idle, about."""
    resync_seconds: float = Field(default=60.0, gt=0)
    """Every object is reconciled this often (a safety net; the steady state writes nothing)."""
    tools_image: str = "ghcr.io/tritonllm/tritonllm:0.1.0"
    """Image carrying tritonllm (copied into Triton pods; runs the repository Jobs)."""
    prometheus_url: str | None = None
    """Prometheus that KEDA's triggers query for deployments whose autoscaling.prometheusUrl is
    unset (such as http://prometheus.monitoring:9090)."""
    prometheus_url_allowed: list[str] = Field(default_factory=list)
    """Where a deployment's own spec.autoscaling.prometheusUrl may point (KEDA queries it from
    its own pod, so any host would turn KEDA into a probe of the cluster's network): URLs
    (scheme, host and port equal, the path under the entry's), hosts or host:port, or `*` for
    any. prometheus_url is always allowed; empty allows nothing else
    (TRITONLLM_PROMETHEUS_URL_ALLOWED, comma list)."""
    activator_image: str = "docker.io/library/haproxy:3.2"
    """HAProxy image of the activator that holds requests while a scaled-to-zero deployment
    starts (autoscaling.minReplicas 0)."""
    check_gpu_nodes: bool = True
    """Report NoMatchingNodes when no node carries spec.gpu.product (needs list on nodes)."""
    api_timeout_seconds: float = Field(default=60.0, gt=0)
    """Timeout of one Kubernetes API call."""
    api_concurrency: int = Field(default=16, ge=1, le=256)
    """Kubernetes API requests the operator has in flight at once (its client concurrency)."""

    def allows_prometheus_url(self, url: str) -> bool:
        """Whether a deployment may name this Prometheus (prometheus_url_allowed)."""
        entries = [*self.prometheus_url_allowed, *([self.prometheus_url] if self.prometheus_url
                                                   else [])]
        return any(_url_matches(url, e.strip()) for e in entries if e.strip())

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorSettings:
        env = dict(os.environ if env is None else env)
        values: dict[str, object] = {}
        for name, field in cls.model_fields.items():
            raw = env.get(f"TRITONLLM_{name.upper()}")
            if raw is None:
                continue
            if field.annotation == list[str]:
                values[name] = [n.strip() for n in raw.split(",") if n.strip()]
            elif field.annotation is bool:
                values[name] = raw.strip().lower() in ("1", "true", "yes", "on")
            else:
                values[name] = raw
        return cls.model_validate(values)


DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int | None, str] | None:
    """scheme, host (lower case), port (the scheme's default when unset) and path of a URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or ""), port or DEFAULT_PORTS.get(scheme), parts.path


def _url_matches(url: str, entry: str) -> bool:
    """A URL against one allow-list entry: `*`; a URL (same scheme, host and port; the path
    equal to or below the entry's); a host or host:port (any scheme, the port where named)."""
    if entry == "*":
        return True
    have = _origin(url)
    if have is None or not have[1]:
        return False
    if "://" not in entry:
        want = _origin(f"//{entry}")
        return want is not None and want[1] == have[1] and (want[2] in (None, have[2]))
    want = _origin(entry)
    if want is None or want[:3] != have[:3]:
        return False
    base = want[3].rstrip("/")
    return not base or have[3] == base or have[3].startswith(base + "/")
