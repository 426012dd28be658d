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
    ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
)
ETCD = Component("etcd", ETCD_VERSION, ("etcd",))
KWOK = Component("kwok", KWOK_VERSION, ("kwok",))
LWS = Component("lws", LWS_VERSION, ("lws",), files=LWS_CRD_FILES)
HELM = Component("helm", HELM_VERSION, ("helm",))

COMPONENTS: tuple[Component, ...] = (KUBERNETES, ETCD, KWOK, LWS, HELM)
