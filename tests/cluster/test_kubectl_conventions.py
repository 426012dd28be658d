"""kubectl conventions, checked on the real API server with the generated CRDs: `kubectl explain`
documents every field, `kubectl get` has useful columns, short names and the `tritonllm`
category work, `kubectl wait` works on a condition, and `-o yaml` shows the schema's defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import load_example, prepare_namespace, run_operator
from tritonllm.api import constants as c
from tritonllm_dev.local import LocalCluster

pytestmark = pytest.mark.cluster


def undocumented(schema: dict[str, Any], path: str, specs: dict[str, Any]) -> list[str]:
    """Paths of properties without a description in an OpenAPI v3 schema (refs followed)."""
    if "$ref" in schema:
        schema = specs[schema["$ref"].rsplit("/", 1)[1]]
    for sub in schema.get("allOf") or []:
        return undocumented(sub, path, specs)
    out = []
    for name, prop in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        if path.count(".") == 0 and name in ("apiVersion", "kind", "metadata"):
            continue
        target = prop
        if "$ref" in prop or prop.get("allOf"):
            ref = prop.get("$ref") or prop["allOf"][0]["$ref"]
            target = specs[ref.rsplit("/", 1)[1]]
        if not (prop.get("description") or target.get("description")):
            out.append(here)
        out += undocumented(target, here, specs)
        items = target.get("items")
        if items:
            out += undocumented(items, here + "[]", specs)
    return out


def test_explain_documents_every_field(cluster: LocalCluster) -> None:
    doc = json.loads(cluster.kubectl("get", "--raw", f"/openapi/v3/apis/{c.GROUP}/v1alpha1").stdout)
    specs = doc["components"]["schemas"]
    for kind in (c.KIND, c.ENGINE_KIND):
        (key,) = [k for k in specs if k.endswith(f".{kind}")]
        assert specs[key].get("description"), kind
        missing = undocumented(specs[key], kind, specs)
        assert not missing, f"fields without docs in `kubectl explain`: {missing}"
    out = cluster.kubectl("explain", "tllm.spec.engine.parallelism.tensor").stdout
    assert "FIELD: tensor <integer>" in out and "DESCRIPTION" in out
    assert len(out.split("DESCRIPTION:", 1)[1].strip()) > 10


def test_get_columns_names_categories_wait_and_defaults(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    obj = load_example("gpt2-medium", namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([obj])
        wait = cluster.kubectl("wait", "tllm/gpt2-medium", "-n", namespace,
                               "--for=condition=Ready", "--timeout=180s", timeout=200)
        assert "condition met" in wait.stdout
        cluster.kubectl("wait", "tllm/gpt2-medium", "-n", namespace,
                        "--for=jsonpath={.status.reason}=Ready", "--timeout=60s", timeout=80)
    table = cluster.kubectl("get", "tllm", "-n", namespace).stdout.splitlines()
    header = table[0].split()
    assert header[:3] == ["NAME", "READY", "AVAILABLE"] and header[-1] == "AGE", table
    assert "REASON" in header  # the phase: Building, WritingRepository, RollingOut, Ready...
    row = dict(zip(header, table[1].split(), strict=True))
    assert row["READY"] == "1/1" and row["REASON"] == "Ready" and row["AVAILABLE"] == "True"
    wide = cluster.kubectl("get", "tritonllmdeployment", "-n", namespace, "-o", "wide").stdout
    assert "ENGINE" in wide.splitlines()[0] and "IMAGE" in wide.splitlines()[0]
    # the category lists both kinds, like `kubectl get all` does for built-in workloads
    category = cluster.kubectl("get", "tritonllm", "-n", namespace).stdout
    assert "tritonllmdeployment.tritonllm.io/gpt2-medium" in category
    assert "tritonllmengine.tritonllm.io/" in category
    assert "tritonllmdeployment.tritonllm.io/gpt2-medium" in cluster.kubectl(
        "get", "all", "-n", namespace).stdout
    assert cluster.kubectl("get", "tllme", "-n", namespace, "-o", "name").stdout.strip()
    # -o yaml shows what the schema defaulted (the example leaves these out)
    live = cluster.kubectl_json("get", "tllm", "gpt2-medium", "-n", namespace)
    assert "quantization" not in obj["spec"]["engine"]
    assert live["spec"]["engine"]["quantization"]["format"] == "none"
    assert live["spec"]["serving"]["replicas"] == 1
    assert "replicas:" in cluster.kubectl("get", "tllm", "gpt2-medium", "-n", namespace,
                                          "-o", "yaml").stdout
