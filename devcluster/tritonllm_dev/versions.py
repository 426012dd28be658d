"""Pinned versions of everything the local cluster runs, and where their binaries are cached.

One place to bump a version: the cache directory of a component is keyed by its version
(``~/.cache/tritonllm/bin/<component>-<version>/``), so a bump simply builds into a new directory
and old caches stay valid for older checkouts.

Why these versions (Go 1.26 on the build machine):
- Kubernetes v1.36.3: the minor upstream builds with Go 1.26; newest patch at the time of pinning.
- etcd v3.6.8: the etcd that k8s.io/kubernetes v1.36.3 itself requires (and envtest's 1.36 pairing).
- kwok v0.8.0: built against the 1.36 libraries.
- LeaderWorkerSet v0.9.0: newest release the module proxy serves (v0.10.0's zip is refused).
- helm v3.22.0: newest v3 release; its go.mod asks for Go 1.26.0.

GitOps (the Argo CD tier; built like the rest, not part of the cluster itself):
- Argo CD v3.6.1: newest release. Its go.mod asks for Go 1.27.0, so this one build runs under
  the Go toolchain ``ARGOCD_GO_TOOLCHAIN``, which the go command fetches from the module proxy
  (``golang.org/toolchain``) and caches in the module cache. One ``argocd`` binary is every Argo
  CD process, chosen by its name (argv[0]): the cluster runs it as application controller and
  repo server. Its Application and AppProject CRDs are copied from the module's manifests.
- Redis is Debian's ``redis-server`` (Argo CD's cache), not built here.

Autoscaling (the autoscaling tier: processes on the host against the cluster, like Argo CD):
- prometheus-adapter v0.12.0: newest release (serves ``custom.metrics.k8s.io`` v1beta1 and
  v1beta2 from Prometheus queries). Its go.mod has no replace directives and asks Go 1.22, so the
  local toolchain builds it in a small wrapper module (to name the binary).
- KEDA v2.21.0: newest release the module proxy serves. Its go.mod asks Go 1.26.0 (the local
  toolchain) and has one module-to-module replace directive, which ``go install`` refuses: a
  wrapper module copies it. Its operator and metrics API server (``cmd/operator``,
  ``cmd/adapter``) build in one ``go build``; its admission webhooks (``cmd/webhooks``) are not
  built (they only validate ScaledObjects). Its CRDs are copied from ``config/crd/bases/``.
- prometheus-operator v0.89.0: only its CRDs (PodMonitor, ServiceMonitor, PrometheusRule from
  ``example/prometheus-operator-crd/``), so that charts that render them can be installed; no
  operator runs. v0.89.0 is the newest the proxy serves (v0.90.0 and v0.89.1 are refused).
- Prometheus v3.16.0 (Go module ``github.com/prometheus/prometheus`` v0.316.0, how the project
  publishes 3.x): built with only Kubernetes service discovery (``-tags
  remove_all_sd,enable_kubernetes_sd``), which keeps the build small. Debian's ``prometheus``
  2.42 cannot be used: Debian builds it without Kubernetes service discovery
  (``kubernetes_sd_configs`` is an unknown field there). The module ships no web UI assets, so
  the binary serves the API (queries, targets, reload) and no UI.

The real node (kubelet and kube-proxy come from the Kubernetes build above):
- containerd v2.4.2: newest 2.x on the module proxy; Debian's 1.6 is end of life and lacks the
  CRI ``RuntimeConfig`` call that kubelet 1.37 will require.
- CoreDNS v1.15.0, distribution (the ``registry``) v3.1.2, local-path-provisioner v0.0.30: newest
  the module proxy serves, all plain ``go install`` modules.
- pause 3.10.2: the sandbox image kubeadm 1.36 pins, compiled from the Kubernetes module's
  ``build/pause/linux/pause.c`` (no container registry is reachable to pull it).
- runc v1.5.2: newest release on the module proxy, built with cgo and the ``seccomp`` tag
  (Debian's libseccomp-dev) so that ``seccompProfile: RuntimeDefault`` works. Debian's crun 1.8.1
  refuses the OCI runtime-spec 1.2 bundles containerd 2.4 writes ("unknown version specified").
- The CNI plugins come from Debian (``apt-get install containernetworking-plugins``, 1.1.1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.8"
KWOK_VERSION = "v0.8.0"
LWS_VERSION = "v0.9.0"
HELM_VERSION = "v3.22.0"
CONTAINERD_VERSION = "v2.4.2"
COREDNS_VERSION = "v1.15.0"
REGISTRY_VERSION = "v3.1.2"
LOCAL_PATH_VERSION = "v0.0.30"
#: kube-router, run with only its network policy controller (--run-firewall): the real node's
#: NetworkPolicy enforcer (iptables + ipset; the bridge CNI enforces nothing). The only version
#: the module proxy here serves; advisories for it concern its BGP routing and service proxy,
#: which the local cluster does not run.
KUBE_ROUTER_VERSION = "v2.1.0"
PAUSE_VERSION = "3.10.2"
RUNC_VERSION = "v1.5.2"
ARGOCD_VERSION = "v3.6.1"
#: Argo CD v3.6's go.mod needs Go >= 1.27.0; newest 1.27 patch on the module proxy.
ARGOCD_GO_TOOLCHAIN = "go1.27.4"

#: Prometheus 3.16.0 (the module's v0.3xx versions are Prometheus 3.x).
PROMETHEUS_VERSION = "v0.316.0"
PROMETHEUS_ADAPTER_VERSION = "v0.12.0"
KEDA_VERSION = "v2.21.0"
PROMETHEUS_OPERATOR_VERSION = "v0.89.0"

#: KEDA's CRDs (``config/crd/bases/`` of its module) that the autoscaling tier installs. Its
#: operator also watches (Cluster)CloudEventSources: without their CRDs its manager gives up
#: after the cache sync timeout (2 min).
KEDA_CRD_FILES = (
    "keda.sh_scaledobjects.yaml",
    "keda.sh_scaledjobs.yaml",
    "keda.sh_triggerauthentications.yaml",
    "keda.sh_clustertriggerauthentications.yaml",
    "eventing.keda.sh_cloudeventsources.yaml",
    "eventing.keda.sh_clustercloudeventsources.yaml",
)
#: prometheus-operator's CRDs (``example/prometheus-operator-crd/`` of its module).
PROMETHEUS_OPERATOR_CRD_FILES = (
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)

#: Argo CD's CRDs (``manifests/crds/`` of its module) that the GitOps tier installs.
ARGOCD_CRD_FILES = ("application-crd.yaml", "appproject-crd.yaml")
#: Scripts of its module's ``hack/`` that Argo CD's image puts on PATH and the repo server runs
#: (the commit signature check, run for every revision even with GnuPG off).
ARGOCD_SCRIPTS = ("git-verify-wrapper.sh",)

#: CRD files (``config/crd/bases/`` of the LWS module) that the cluster installs. The controller
#: also watches DisaggregatedSets, so that CRD must exist too or its manager fails to start.
LWS_CRD_FILES = (
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "disaggregatedset.x-k8s.io_disaggregatedsets.yaml",
)


def cache_root() -> Path:
    """Root of everything cached outside the repository (``TRITONLLM_CACHE`` overrides)."""
    env = os.environ.get("TRITONLLM_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "tritonllm"


@dataclass(frozen=True)
class Component:
    """A unit that is built and cached together."""

    name: str
    version: str
    binaries: tuple[str, ...]
    #: Extra (non-binary) files the build copies next to the binaries.
    files: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def bindir(self) -> Path:
        return cache_root() / "bin" / self.key

    def path(self, binary: str) -> Path:
        return self.bindir / binary

    def missing(self) -> list[str]:
        """Binaries and files not in the cache yet (empty when the component is ready)."""
        out = [b for b in self.binaries if not os.access(self.path(b), os.X_OK)]
        out += [f for f in self.files if not self.path(f).is_file()]
        return out


KUBERNETES = Component(
    "k8s",
    KUBERNETES_VERSION,
    (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
        "kubelet",
        "kube-proxy",
    ),
)
ETCD = Component("etcd", ETCD_VERSION, ("etcd",))
KWOK = Component("kwok", KWOK_VERSION, ("kwok",))
LWS = Component("lws", LWS_VERSION, ("lws",), files=LWS_CRD_FILES)
HELM = Component("helm", HELM_VERSION, ("helm",))

CONTAINERD = Component(
    "containerd", CONTAINERD_VERSION, ("containerd", "containerd-shim-runc-v2", "ctr")
)
COREDNS = Component("coredns", COREDNS_VERSION, ("coredns",))
REGISTRY = Component("registry", REGISTRY_VERSION, ("registry",))
LOCAL_PATH = Component("local-path", LOCAL_PATH_VERSION, ("local-path-provisioner",))
PAUSE = Component("pause", PAUSE_VERSION, ("pause",))
KUBE_ROUTER = Component("kube-router", KUBE_ROUTER_VERSION, ("kube-router",))
RUNC = Component("runc", RUNC_VERSION, ("runc",))
ARGOCD = Component(
    "argocd", ARGOCD_VERSION, ("argocd",), files=ARGOCD_CRD_FILES + ARGOCD_SCRIPTS
)
PROMETHEUS = Component("prometheus", PROMETHEUS_VERSION, ("prometheus",))
PROMETHEUS_ADAPTER = Component(
    "prometheus-adapter", PROMETHEUS_ADAPTER_VERSION, ("prometheus-adapter",)
)
KEDA = Component("keda", KEDA_VERSION, ("keda-operator", "keda-adapter"), files=KEDA_CRD_FILES)
PROMETHEUS_OPERATOR_CRDS = Component(
    "prometheus-operator-crds", PROMETHEUS_OPERATOR_VERSION, (),
    files=PROMETHEUS_OPERATOR_CRD_FILES,
)

#: What the control plane needs (kwok nodes only).
CONTROL_PLANE: tuple[Component, ...] = (KUBERNETES, ETCD, KWOK, LWS, HELM)
#: What a real node adds (container runtime, DNS, registry, storage, the sandbox image, the
#: NetworkPolicy enforcer).
REAL_NODE: tuple[Component, ...] = (
    CONTAINERD, RUNC, COREDNS, REGISTRY, LOCAL_PATH, PAUSE, KUBE_ROUTER
)
#: What the GitOps tier adds (Argo CD's processes run on the host against the cluster).
GITOPS: tuple[Component, ...] = (ARGOCD,)
#: What the autoscaling tier adds (Prometheus and the metrics APIs, on the host).
AUTOSCALING: tuple[Component, ...] = (
    PROMETHEUS, PROMETHEUS_ADAPTER, KEDA, PROMETHEUS_OPERATOR_CRDS
)
COMPONENTS: tuple[Component, ...] = CONTROL_PLANE + REAL_NODE + GITOPS + AUTOSCALING
