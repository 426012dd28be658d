"""Write the Argo CD health check's testdata from REAL reconciles on the local cluster.

Runs the operator (``tritonllm run``) against the cluster named by ``TRITONLLM_TEST_CLUSTER``
(started kwok-only if it is not running), applies a simulated GPU example, a deployment whose
build fails and one scaled to zero, and saves the TritonLLMDeployment object every time its
state (status.reason and the reasons of its conditions) changes. Each saved object is exactly
what the API server returned, minus server bookkeeping (managedFields, uid, resourceVersion) and
with a fixed namespace, so the files are reviewable. health_test.yaml names the files it uses
and the status Argo CD must report for each; rerun this when the status the operator writes
changes, and check the expectations still hold (tests/gitops/test_argocd_health.py).

    python -m tests.gitops.make_health_testdata
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tests.cases import ROOT
from tests.cluster.operator_harness import (
    condition,
    get_cr,
    load_example,
    prepare_namespace,
    run_operator,
)
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import fresh_namespace

CATALOGUE = (
    ROOT / "gitops" / "argocd" / "resource_customizations" / "tritonllm.io" / "TritonLLMDeployment"
)
TESTDATA = CATALOGUE / "testdata"
EXAMPLE = "gpt2-medium"
FAIL_TEMPLATE = {
    "labels": {"tritonllm.io/fail": "true"},
    "annotations": {
        "tritonllm.io/fail-message": "trtllm-build: out of GPU memory",
        "tritonllm.io/fail-exit-code": "3",
    },
}


def state(obj: dict[str, Any]) -> str:
    """What distinguishes one health-relevant state from another."""
    st = obj.get("status") or {}
    conds = ",".join(
        f"{c['type']}={c['status']}/{c['reason']}" for c in st.get("conditions") or []
    )
    fresh = st.get("observedGeneration") == obj["metadata"].get("generation")
    return f"{st.get('reason')}|{conds}|{fresh}"


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    for key in ("managedFields", "uid", "resourceVersion", "creationTimestamp"):
        meta.pop(key, None)
    meta["namespace"] = "default"
    text = yaml.safe_dump(obj, sort_keys=False)
    return dict(yaml.safe_load(re.sub(r"t-[a-z0-9-]+-[0-9a-f]{6}", "default", text)))


def slug(obj: dict[str, Any]) -> str:
    st = obj.get("status") or {}
    if not st.get("conditions"):
        return "no-status"
    if st.get("observedGeneration") != obj["metadata"].get("generation"):
        return "new-generation"
    degraded = condition(obj, "Degraded")
    if degraded.get("status") == "True":
        return f"degraded-{degraded['reason']}"
    progressing = condition(obj, "Progressing")
    return f"{progressing.get('reason', 'none')}-{st.get('reason')}"


def record(cluster: LocalCluster, namespace: str, names: list[str], until: float,
           out: dict[str, dict[str, Any]], seen: set[str]) -> None:
    while time.monotonic() < until:
        for name in names:
            obj = get_cr(cluster, namespace, name)
            key = state(obj)
            if key in seen:
                continue
            seen.add(key)
            label = f"{name}-{slug(obj)}"
            out.setdefault(re.sub(r"[^A-Za-z0-9-]+", "-", label), clean(obj))
            print(f"  {label}: {key}")
        time.sleep(0.3)


def main() -> None:
    name = os.environ.get("TRITONLLM_TEST_CLUSTER", "pytest")
    cluster = LocalCluster(name=name, real_node=False)
    if not cluster.is_running():
        cluster.up()
    captured: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    with fresh_namespace(cluster, "health-testdata") as ns, \
            tempfile.TemporaryDirectory() as tmp:
        prepare_namespace(cluster, ns)
        example = load_example(EXAMPLE, ns)
        failing = load_example(EXAMPLE, ns)
        failing["metadata"]["name"] = "build-fails"
        failing["spec"]["podTemplate"] = {**failing["spec"]["podTemplate"], **FAIL_TEMPLATE}
        # its own engine (another dtype), so that its build runs and fails
        failing["spec"]["engine"] = {**failing["spec"]["engine"], "dtype": "bfloat16"}
        idle = load_example(EXAMPLE, ns)
        idle["metadata"]["name"] = "scaled-to-zero"
        idle["spec"]["serving"] = {**idle["spec"]["serving"], "replicas": 0}
        names = [EXAMPLE, "build-fails", "scaled-to-zero"]
        cluster.apply([example, failing, idle])
        record(cluster, ns, names, time.monotonic() + 1.0, captured, seen)
        with run_operator(cluster, ns, Path(tmp)):
            record(cluster, ns, names, time.monotonic() + 90, captured, seen)
            # a spec change the operator has not acted on yet: the next generation
            cluster.kubectl("patch", "tllm", EXAMPLE, "-n", ns, "--type=merge",
                            "-p", '{"spec":{"serving":{"maxQueueDelayMicroseconds":100}}}')
            record(cluster, ns, [EXAMPLE], time.monotonic() + 30, captured, seen)
    TESTDATA.mkdir(parents=True, exist_ok=True)
    for old in TESTDATA.glob("*.yaml"):
        old.unlink()
    header = "# Captured from a real reconcile by tests/gitops/make_health_testdata.py.\n"
    for label, obj in sorted(captured.items()):
        path = TESTDATA / f"{label}.yaml"
        path.write_text(header + yaml.safe_dump(obj, sort_keys=False))
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
