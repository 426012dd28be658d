"""The Helm chart on the real node: `helm install` with the operator image from the local
registry, the operator running in-cluster as a real container (in-cluster config, the chart's
ServiceAccount and RBAC, the Service network to the API server), reconciling
examples/cpu-standin.yaml to an answering endpoint. Nothing but the GPUs is simulated.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.cases import ROOT
from tests.cluster.test_real_flow import EXAMPLE, EXPECTED_4, SEED, _diagnose, _first_answer
from tritonllm.cluster import images
from tritonllm.cluster.build import ensure_all
from tritonllm.cluster.local import LocalCluster
from tritonllm.cluster.node import NODE_NAME, REGISTRY_ADDR, tolerations
from tritonllm.cluster.versions import HELM

pytestmark = [pytest.mark.chart, pytest.mark.cluster]

CHART = ROOT / "charts" / "tritonllm"


@pytest.fixture(scope="module")
def helm_bin() -> str:
    ensure_all()  # builds helm (and the cluster binaries) on a fresh machine
    return str(HELM.path("helm"))


def _helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, check=False,
                          timeout=400)


def test_helm_install_runs_the_operator_on_the_real_node_and_serves(
    helm_bin: str, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    refs = images.ensure_images(REGISTRY_ADDR)
    name, _, digest = refs["operator"].partition("@")
    repository, _, tag = name.rpartition(":")
    values = {
        "image": {"repository": repository, "tag": f"{tag}@{digest}"},
        "replicaCount": 1,
        "settings": {"peering": "", "namespaces": [ns], "logFormat": "text",
                     "resyncSeconds": 5},
        "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
        "tolerations": tolerations(),
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    kube = ("--kubeconfig", str(cluster.kubeconfig), "--namespace", ns)
    install = _helm(helm_bin, "install", "tllm", str(CHART), *kube, "-f", str(path),
                    "--set", "crds.install=false", "--wait", "--timeout", "240s")
    try:
        assert install.returncode == 0, install.stderr + _diagnose(cluster, ns)
        (pod,) = cluster.kubectl_json(
            "get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance=tllm")["items"]
        assert pod["spec"]["nodeName"] == NODE_NAME
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["imageID"].endswith(digest), status

        cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
        cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                        "--timeout=240s", timeout=270)
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
        cr, out = _first_answer(cluster, ns, "cpu-standin", None, 420)
        print(f"\n[measure] cpu-standin with the operator from helm: apply -> first answer "
              f"{time.monotonic() - start:.1f} s")
        assert out["text_output"] == EXPECTED_4, out
        assert cr["status"]["engine"]["cached"] is False
        # The in-cluster operator made every child: its field manager, no host process.
        svc = cluster.kubectl_json("get", "svc", "cpu-standin", "-n", ns, "--show-managed-fields")
        managers = {m["manager"] for m in svc["metadata"]["managedFields"]}
        assert "tritonllm" in managers, managers
        logs = cluster.kubectl("logs", pod["metadata"]["name"], "-n", ns).stdout
        assert "Forbidden" not in logs and " 403" not in logs, logs[-3000:]
    finally:
        _helm(helm_bin, "uninstall", "tllm", *kube)
