"""`tritonllm run` without --standalone and without a peering object, on the real API server.

Before, kopf kept such an operator paused forever, logging nothing. Now it either creates the
KopfPeering it needs (RBAC permitting) and acts, or exits at once with one line naming the object
and the two ways out; and each replica says whether it acts or is paused, in
`tritonllm_operator_acting` and in /healthz.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.operator_harness import (
    TRITONLLM,
    Operator,
    prepare_namespace,
    run_operator,
    stop,
    wait_ready,
)
from tests.cluster.test_operator import small
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

PEERING = "tritonllm"


def state(op: Operator) -> tuple[float, str]:
    return op.metric("tritonllm_operator_acting"), str(op.health().get("state"))


def test_operator_without_standalone_creates_its_peering_and_acts(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    absent = cluster.kubectl("get", "kopfpeering", PEERING, "-n", namespace, check=False)
    assert absent.returncode != 0  # no peering object: the case that used to stall
    start = time.monotonic()
    with run_operator(cluster, namespace, tmp_path, peering=PEERING, tag="a") as a:
        cluster.kubectl_json("get", "kopfpeering", PEERING, "-n", namespace)  # created
        assert f"created KopfPeering '{PEERING}' in namespace {namespace}" in a.logs()
        wait_for(lambda: state(a) == (1.0, "acting"), timeout=30, interval=0.5,
                 what="the operator acts")
        print(f"\n[measure] operator with no peering object: start -> acting "
              f"{time.monotonic() - start:.1f} s")
        cluster.apply([small("kappa", namespace)])
        wait_ready(cluster, namespace, "kappa")

        # A second replica: exactly one of the two acts, and each says which it is.
        with run_operator(cluster, namespace, tmp_path, peering=PEERING, tag="b") as b:
            wait_for(lambda: sorted([state(a), state(b)]) == [(0.0, "paused"), (1.0, "acting")],
                     timeout=40, interval=1.0, what="one replica acts, the other is paused")
            assert a.proc.poll() is None and b.proc.poll() is None
            print(f"/healthz: a {a.health()}, b {b.health()}")

            # The acting one stops (a rolling update's SIGTERM): it takes its record out of the
            # peering object, so the other resumes at once instead of when the record expires
            # (kopf's peering lifetime, 60 s).
            acting, paused = (a, b) if state(a)[1] == "acting" else (b, a)
            start = time.monotonic()
            stop(acting.proc)
            assert f"left KopfPeering '{PEERING}' in namespace {namespace}" in acting.logs()
            wait_for(lambda: state(paused) == (1.0, "acting"), timeout=20, interval=0.5,
                     what="the paused replica acts once the acting one stopped")
            print(f"[measure] acting replica stopped -> the other acts "
                  f"{time.monotonic() - start:.1f} s")
            records = cluster.kubectl_json(
                "get", "kopfpeering", PEERING, "-n", namespace).get("status") or {}
            assert len(records) == 1, records  # the stopped replica's record is gone


def test_operator_that_may_not_create_its_peering_exits_with_one_line(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    sa = "no-create"
    cluster.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": sa, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": sa, "namespace": namespace},
         "rules": [{"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"],
                    "verbs": ["get", "list", "watch", "patch"]}]},  # the chart's verbs: no create
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": sa, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]},
    ])
    token = cluster.kubectl("create", "token", sa, "-n", namespace,
                            "--duration=1h").stdout.strip()
    server = yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]
    kubeconfig = tmp_path / "sa.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": sa}}],
        "current-context": "sa",
    }))
    env = {**os.environ, "TRITONLLM_PEERING": PEERING}
    start = time.monotonic()
    proc = subprocess.run(
        [TRITONLLM, "run", "--kubeconfig", str(kubeconfig), "-n", namespace,
         "--metrics-port", "0", "--health-port", "0", "--log-format", "text"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    took = time.monotonic() - start
    print(f"\n[measure] operator that may not create its peering: exits after {took:.1f} s")
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    print(line)
    assert line.startswith(f"error: tritonllm run: KopfPeering '{PEERING}' in namespace "
                           f"{namespace} does not exist and this operator may not create it "
                           "(403 Forbidden: "), line
    assert f"kubectl apply -n {namespace} -f -" in line and "--standalone" in line, line
    assert took < 30
