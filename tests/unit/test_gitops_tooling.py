"""The Argo CD build recipe and host runner, without building or running anything."""

from __future__ import annotations

from tritonllm_dev.argocd import application, settings_objects
from tritonllm_dev.build import module_replaces
from tritonllm_dev.versions import ARGOCD, COMPONENTS, GITOPS

GOMOD = """module github.com/argoproj/argo-cd/v3

go 1.27.0

require (
	github.com/argoproj/argo-cd/gitops-engine/v3 v3.6.1 // Tagged as gitops-engine/vX.Y.Z
	k8s.io/api v0.37.0
)

replace (
	github.com/golang/protobuf => github.com/golang/protobuf v1.5.4

	// Avoid CVE-2022-3064
	gopkg.in/yaml.v2 => gopkg.in/yaml.v2 v2.4.0
	k8s.io/api => k8s.io/api v0.37.0
)

replace github.com/argoproj/argo-cd/gitops-engine/v3 => ./gitops-engine

replace example.com/single v1.0.0 => example.com/fork v1.0.1
"""


def test_module_replaces_keeps_published_targets_only() -> None:
    assert module_replaces(GOMOD) == [
        "github.com/golang/protobuf => github.com/golang/protobuf v1.5.4",
        "gopkg.in/yaml.v2 => gopkg.in/yaml.v2 v2.4.0",
        "k8s.io/api => k8s.io/api v0.37.0",
        "example.com/single v1.0.0 => example.com/fork v1.0.1",
    ]


def test_argocd_is_built_and_cached_like_the_rest() -> None:
    assert ARGOCD in COMPONENTS and GITOPS == (ARGOCD,)
    assert ARGOCD.bindir.name == f"argocd-{ARGOCD.version}"
    assert set(ARGOCD.files) == {
        "application-crd.yaml", "appproject-crd.yaml", "git-verify-wrapper.sh"
    }


def test_settings_and_application_objects() -> None:
    cm, secret, project = settings_objects({"k": "v"})
    assert cm["metadata"]["name"] == "argocd-cm" and cm["data"] == {"k": "v"}
    assert secret["metadata"]["name"] == "argocd-secret"
    assert project["kind"] == "AppProject" and project["metadata"]["name"] == "default"
    app = application("a", "file:///r", "charts/x", "ns", helm_values="x: 1")
    assert app["spec"]["source"]["helm"] == {"values": "x: 1"}
    assert app["spec"]["destination"]["namespace"] == "ns"
    assert app["spec"]["syncPolicy"]["automated"]["selfHeal"] is True
