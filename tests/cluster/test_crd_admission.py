"""The generated CRDs in a real kube-apiserver: admission, server-side defaults, every CEL rule,
and `kubectl apply --dry-run=server` of everything `tritonllm render` produces."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cases import ACCEPTED, EXAMPLES, INVALID, Accepted, Invalid, cr, stored_otherwise
from tritonllm_dev.autoscaling import install_keda_crds
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import fresh_namespace

pytestmark = pytest.mark.cluster

ADMISSION = [case for case in INVALID if case.admission]


def test_generated_crds_are_admitted(cluster: LocalCluster) -> None:
    assert cluster.crd_errors == []
    for name in ("tritonllmdeployments.tritonllm.io", "tritonllmengines.tritonllm.io"):
        crd = cluster.kubectl_json("get", "crd", name)
        established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert established.get("Established") == "True", name
        assert established.get("NamesAccepted") == "True", name


def test_server_applies_the_schema_defaults(cluster: LocalCluster, namespace: str) -> None:
    obj = cr()
    obj["metadata"]["namespace"] = namespace
    cluster.apply([obj])
    live = cluster.kubectl_json("get", "tllm", "demo", "-n", namespace)
    spec = live["spec"]
    # No schema default for runtime: the operator resolves an empty one by the image's version.
    assert "runtime" not in spec
    assert spec["engine"]["parallelism"] == {"tensor": 1, "pipeline": 1, "auto": False}
    assert spec["engine"]["limits"]["maxBatchSize"] == 64
    assert spec["serving"]["kvCache"]["freeGpuMemFraction"] == 0.9
    assert spec["storage"]["claimName"] == "tritonllm-model-store"
    assert spec["model"]["revision"] == "main"
    # what the server stored is what the operator's own parser produces: no drift for GitOps
    from tritonllm.api.deployment import parse_deployment

    parsed = parse_deployment(live).spec.to_wire()
    assert parsed.pop("runtime") == "engine"  # the 24.09 image has the engine path
    assert _prune(parsed) == _prune(spec)


def _prune(value):
    """Drop empty maps and lists (the schema gives them no default; pydantic shows them)."""
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ({}, [])}
    return value


class DryRun:
    """Server-side dry-run creates straight to the API server, as `kubectl apply
    --dry-run=server` sends them (strict field validation), over one connection: a table of
    bad objects costs milliseconds per row instead of a kubectl process each."""

    def __init__(self, cluster: LocalCluster) -> None:
        cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        server = urllib.parse.urlsplit(cfg["clusters"][0]["cluster"]["server"])
        user = cfg["users"][0]["user"]
        ctx = ssl.create_default_context(cafile=cfg["clusters"][0]["cluster"]
                                         ["certificate-authority"])
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        self.conn = http.client.HTTPSConnection(server.hostname, server.port, context=ctx)

    def create(self, obj: dict) -> tuple[int, str]:
        ns = obj["metadata"]["namespace"]
        path = (f"/apis/tritonllm.io/v1alpha1/namespaces/{ns}/tritonllmdeployments"
                "?dryRun=All&fieldValidation=Strict")
        self.conn.request("POST", path, body=json.dumps(obj),
                          headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        text = resp.read().decode()
        return resp.status, json.loads(text).get("message", text) if resp.status >= 400 else ""


@pytest.fixture(scope="module")
def dry_run(cluster: LocalCluster) -> Iterator[DryRun]:
    client = DryRun(cluster)
    yield client
    client.conn.close()


@pytest.fixture(scope="module")
def table_namespace(cluster: LocalCluster) -> Iterator[str]:
    """One namespace for every row of the table (dry runs leave nothing behind)."""
    with fresh_namespace(cluster, "admission-table") as name:
        yield name


@pytest.mark.parametrize("case", ADMISSION, ids=lambda c: c.id)
def test_admission_rejects_invalid_objects(dry_run: DryRun, table_namespace: str,
                                           case: Invalid) -> None:
    obj = yaml.safe_load(yaml.safe_dump(case.obj))
    obj.setdefault("metadata", {})["namespace"] = table_namespace
    status, message = dry_run.create(obj)
    assert status >= 400, f"{case.id} was admitted"
    leaf = case.field.rsplit(".", 1)[-1]
    assert leaf in message, message
    if case.says:
        assert case.says in message, message


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.id)
def test_kubectl_stores_what_render_reads(cluster: LocalCluster, table_namespace: str,
                                          case: Accepted) -> None:
    """The same text through kubectl (its YAML parser) and the API server (pruning, defaults):
    admitted, with the values `tritonllm render` reads (tests/unit/test_cli.py)."""
    proc = cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-n", table_namespace,
                           "-f", "-", input=case.text, check=False)
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)
    stored = stored["items"][0] if stored["kind"] == "List" else stored
    assert stored_otherwise(stored["spec"], case) == {}


@pytest.mark.parametrize(
    ("spec", "runtime"),
    [
        ({"image": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"}, "engine"),
        ({"image": "registry.local/triton:next", "trtllmVersion": "1.3.0"}, "llmapi"),
    ],
    ids=["engine-path-image", "after-the-engine-path"],
)
def test_an_empty_runtime_is_admitted_and_engine_only_rules_follow_the_resolved_one(
    dry_run: DryRun, table_namespace: str, spec: dict, runtime: str
) -> None:
    """Without a schema default the CEL rules resolve an absent runtime as the operator does:
    admitted either way, and an llmapi-only refusal (serving.bls) applies only where the
    image's version makes it llmapi."""
    obj = cr(spec)
    obj["spec"].pop("runtime", None)
    obj["metadata"]["namespace"] = table_namespace
    status, message = dry_run.create(obj)
    assert status == 201, message
    obj["spec"]["serving"] = {"bls": True}
    status, message = dry_run.create(obj)
    if runtime == "llmapi":
        assert status == 422 and "serving.bls" in message, message
    else:
        assert status == 201, message


def test_operator_only_cases_are_admitted(dry_run: DryRun, namespace: str) -> None:
    """What the API server cannot know (image versions, GPU architectures, checkpoint shapes)
    is the operator's to report; these objects must reach it."""
    for case in (c for c in INVALID if not c.admission):
        obj = yaml.safe_load(yaml.safe_dump(case.obj))
        obj["metadata"]["namespace"] = namespace
        status, message = dry_run.create(obj)
        assert status == 201, f"{case.id}: {status} {message}"


def test_claim_name_is_immutable(cluster: LocalCluster, namespace: str) -> None:
    obj = cr()
    obj["metadata"]["namespace"] = namespace
    cluster.apply([obj])
    obj["spec"]["storage"] = {"claimName": "another-claim"}
    proc = cluster.kubectl("apply", "--server-side", "--force-conflicts",
                           "--field-manager=tritonllm-cluster", "-f", "-",
                           input=yaml.safe_dump(obj), check=False)
    assert proc.returncode != 0 and "immutable" in proc.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_objects_pass_server_dry_run(cluster: LocalCluster, namespace: str,
                                              path) -> None:
    render = subprocess.run(
        [sys.executable, "-m", "tritonllm.cli.main", "render", "-f", str(path),
         "--namespace", namespace, "--prometheus-url", "http://prometheus.monitoring:9090"],
        capture_output=True, text=True, check=True,
    )
    if "kind: ScaledObject" in render.stdout:  # KEDA's kind: its CRDs, as in a cluster with KEDA
        install_keda_crds(cluster)
    example = yaml.safe_load(path.read_text())
    example["metadata"]["namespace"] = namespace
    stream = render.stdout + "---\n" + yaml.safe_dump(example)
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=stream, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "(server dry run)" in proc.stdout
