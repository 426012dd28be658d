"""The chart as users run it: values checked by its schema, CRDs upgraded by `helm upgrade`,
the `helm test` hook, and its generated README.

The upgrade test installs the previous chart, 0.1.0 (taken from git history: CRDs in `crds/`,
which Helm installs once and never upgrades), creates a TritonLLMDeployment, then upgrades to the
chart of this checkout (CRDs as templates) and checks the CRDs were upgraded and nothing was lost.
0.1.0's CRDs have every field of today's, so to see a new field served after the upgrade, one
field (`spec.serving.maxQueueDelayMicroseconds`) is taken out of its copy of the CRD: that copy
stands for an older API.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import ROOT
from tests.chart.test_chart import CHART, KUBE, helm, run_helm  # noqa: F401 (fixture)
from tests.cluster.operator_harness import get_cr, prepare_namespace, run_operator
from tritonllm.cli.crd import CHART_README, chart_readme_text
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

#: The last commit of chart 0.1.0 (CRDs in charts/tritonllm/crds/, as Helm never upgrades them).
PREVIOUS_CHART_COMMIT = "6fae147b8bf8fefdbea46b723e5bafc0a0ab0b70"
#: The field the "older" CRD lacks (see the module docstring).
NEW_FIELD = "maxQueueDelayMicroseconds"
CRD_NAMES = (
    "tritonllmdeployments.tritonllm.io",
    "tritonllmengines.tritonllm.io",
    "clusterkopfpeerings.kopf.dev",
    "kopfpeerings.kopf.dev",
)


def previous_chart(dest: Path) -> Path:
    """charts/tritonllm as of PREVIOUS_CHART_COMMIT, extracted under ``dest``."""
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS_CHART_COMMIT, "charts/tritonllm"],
        capture_output=True, check=False,
    )
    assert proc.returncode == 0, (
        f"git archive {PREVIOUS_CHART_COMMIT} failed (the test needs the repository's history; "
        f"in a shallow clone run `git fetch --unshallow`): {proc.stderr.decode()}"
    )
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")
    chart = dest / "charts" / "tritonllm"
    crd_file = chart / "crds" / "tritonllm.io_tritonllmdeployments.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    serving = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["serving"]
    del serving["properties"][NEW_FIELD]
    del serving["default"][NEW_FIELD]
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


@pytest.mark.chart
@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("settings.logLevl=INFO", "additional properties 'logLevl' not allowed"),
        ("replicaCount=two", "at '/replicaCount': got string, want integer"),
        ("settings.logFormat=yaml", "at '/settings/logFormat'"),
        ("crd.install=false", "additional properties 'crd' not allowed"),
    ],
)
def test_values_typo_fails_with_the_key_named(helm: str, setting: str, named: str) -> None:  # noqa: F811
    proc = run_helm(helm, "template", "demo", str(CHART), *KUBE, "--set", setting, check=False)
    assert proc.returncode != 0 and named in proc.stderr, proc.stderr


@pytest.mark.chart
def test_readme_is_generated_from_the_current_values() -> None:
    text = chart_readme_text(
        (CHART / "values.yaml").read_text(), (CHART / "values.schema.json").read_text()
    )
    assert (ROOT / CHART_README).read_text() == text, "run `tritonllm crd`"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in ("crds.install", "settings.logLevel", "tests.image", "replicaCount"):
        assert f"| `{key}` |" in text
    assert values["crds"]["install"] is True


def _hook(helm: str) -> dict[str, Any]:  # noqa: F811
    out = run_helm(helm, "template", "rel", str(CHART), *KUBE, "--namespace", "ops",
                   "--show-only", "templates/tests/operator-answers.yaml").stdout
    return dict(yaml.safe_load(out))


@pytest.mark.chart
@pytest.mark.cluster
def test_helm_test_hook_asks_the_operator(
    helm: str, cluster: LocalCluster, namespace: str, tmp_path: Path  # noqa: F811
) -> None:
    """The hook's own command, run here against a real operator (`tritonllm run`): a pod of it
    would sit on a kwok node, where nothing runs (a real node runs it for real)."""
    pod = _hook(helm)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TRITONLLM_METRICS_URL"] == "http://rel-tritonllm-metrics.ops.svc:9090/metrics"
    argv = [sys.executable if a == "python3" else a for a in container["command"]]
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path) as op:
        url = f"http://127.0.0.1:{op.metrics_port}/metrics"
        ok = subprocess.run(argv, env={"TRITONLLM_METRICS_URL": url}, capture_output=True,
                            text=True, check=False, timeout=30)
        assert ok.returncode == 0 and "the operator answers" in ok.stdout, ok.stderr
    down = subprocess.run(argv, env={"TRITONLLM_METRICS_URL": url}, capture_output=True,
                          text=True, check=False, timeout=30)
    assert down.returncode != 0  # the operator stopped: the hook fails


@pytest.mark.chart
@pytest.mark.cluster
def test_upgrade_from_the_previous_chart_upgrades_crds_and_keeps_deployments(
    helm: str, cluster: LocalCluster, namespace: str, tmp_path: Path  # noqa: F811
) -> None:
    old_chart = previous_chart(tmp_path)
    kube = ("--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace)
    sets = ("--set", "replicaCount=1", "--set", "settings.peering=")
    release = f"up-{namespace[-6:]}"
    # The cluster already has CRDs (the test session installs them): put the previous chart's
    # in place, as if 0.1.0 had installed them (Helm skips crds/ that exist).
    for crd in sorted((old_chart / "crds").glob("*.yaml")):
        cluster.kubectl("replace", "-f", str(crd))
    try:
        run_helm(helm, "install", release, str(old_chart), *kube, *sets, "--wait",
                 "--timeout", "120s")
        cluster.apply([{
            "apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
            "metadata": {"name": "kept", "namespace": namespace},
            "spec": {"image": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3",
                     "model": {"source": "hf://openai-community/gpt2"},
                     "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}},
        }])
        before = get_cr(cluster, namespace, "kept")
        assert NEW_FIELD not in before["spec"]["serving"]  # the old API has no such field

        # CRDs installed from crds/ are not the release's: Helm refuses to take them over...
        plain = run_helm(helm, "upgrade", release, str(CHART), *kube, *sets, check=False)
        assert plain.returncode != 0 and "invalid ownership metadata" in plain.stderr
        assert "CustomResourceDefinition" in plain.stderr
        # ...until told to, once (chart README: upgrading from 0.1.0)
        run_helm(helm, "upgrade", release, str(CHART), *kube, *sets, "--take-ownership",
                 "--wait", "--timeout", "120s")
        for name in CRD_NAMES:
            crd = cluster.kubectl_json("get", "crd", name)
            annotations = crd["metadata"]["annotations"]
            assert annotations["helm.sh/resource-policy"] == "keep", name
            assert annotations["meta.helm.sh/release-name"] == release, name
        after = get_cr(cluster, namespace, "kept")
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["spec"]["model"] == before["spec"]["model"]
        assert after["spec"]["gpu"] == before["spec"]["gpu"]
        # the new schema is served: its default fills the stored object, the field is kept
        assert after["spec"]["serving"][NEW_FIELD] == 0
        cluster.kubectl("patch", "tllm", "kept", "-n", namespace, "--type=merge",
                        "-p", f'{{"spec":{{"serving":{{"{NEW_FIELD}":100}}}}}}')
        assert get_cr(cluster, namespace, "kept")["spec"]["serving"][NEW_FIELD] == 100
        # kubectl explain reads the OpenAPI document, which the API server republishes a
        # moment after the CRD changed (asynchronously): wait for it, not for luck.
        def explained() -> str | None:
            out = cluster.kubectl("explain", f"tllm.spec.serving.{NEW_FIELD}", check=False)
            return out.stdout if out.returncode == 0 else None

        assert "max_queue_delay_microseconds" in wait_for(
            explained, timeout=60, interval=1, what="the new field in kubectl explain")

        # a second upgrade (CRDs now the release's) needs nothing special
        run_helm(helm, "upgrade", release, str(CHART), *kube, *sets, "--set",
                 "settings.logLevel=DEBUG")
        # uninstall keeps the CRDs (resource-policy: keep) and so every deployment
        run_helm(helm, "uninstall", release, *kube, "--wait")
        for name in CRD_NAMES:
            assert cluster.kubectl("get", "crd", name, check=False).returncode == 0, name
        assert get_cr(cluster, namespace, "kept")["metadata"]["uid"] == before["metadata"]["uid"]
    finally:
        run_helm(helm, "uninstall", release, *kube, check=False)
        # back to the CRDs of this checkout, owned by the cluster again
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            cluster.kubectl("replace", "-f", str(crd))
