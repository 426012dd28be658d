"""The chart's operator, in a namespace of its own, rolls a verified revision on the real node
under the NetworkPolicy enforcer (kube-router).

The smoke requests of a verified rollout go from the operator's pod straight to the
verification pod's IP. Here nothing lets them through but the rule the operator renders from its
own settings: the operator runs in the cluster (installed by the chart from the working tree,
watching one other namespace), so its requests do not come from the node, which enforcers let
through. Checked: the serving pods' NetworkPolicy admits the operator's pods on the HTTP port,
and enforces it (another pod of the operator's namespace is refused, the operator's pod is
answered); a change is verified on its own pod and rolled over.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import ROOT
from tests.chart import test_chart_real_node
from tests.chart.test_chart_real_node import _helm
from tests.cluster.operator_harness import get_cr
from tests.cluster.test_real_flow import _diagnose, _first_answer, _pods, restrict, seeded
from tests.cluster.test_real_multinode import Env, _probe_pod
from tests.cluster.test_real_rollout import NAME, _serving_revisions, rollout_cr
from tritonllm.api import constants as c
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import NODE_NAME, tolerations
from tritonllm_dev.testing import fresh_namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.chart]

CHART = ROOT / "charts" / "tritonllm"
helm_bin = test_chart_real_node.helm_bin  # the fixture: helm, built on a fresh machine
RELEASE = "tllm-home"
# One TCP connection from inside the operator's container (its image has python3).
CONNECT = ("import socket, sys\n"
           "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()\n")


def install(helm: str, cluster: LocalCluster, home: str, watched: str, operator_ref: str,
            tmp: Path) -> None:
    """The chart from the working tree into `home`, watching `watched` only."""
    name, _, digest = operator_ref.partition("@")
    repository, _, tag = name.rpartition(":")
    values = {
        "image": {"repository": repository, "tag": f"{tag}@{digest}"},
        "replicaCount": 1,
        "settings": {"namespaces": [watched], "logFormat": "text", "resyncSeconds": 5},
        # Cluster-wide role names are shared with other releases of the chart: not this one's.
        "rbac": {"userRoles": False},
        "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
        "tolerations": tolerations(),
    }
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = _helm(helm, "install", RELEASE, str(CHART), *_kube(cluster, home), "-f", str(path),
                 "--set", "crds.install=false", "--wait", "--timeout", "240s")
    assert done.returncode == 0, done.stderr + _diagnose(cluster, home)


def _kube(cluster: LocalCluster, home: str) -> tuple[str, ...]:
    return ("--kubeconfig", str(cluster.kubeconfig), "--namespace", home)


def operator_pod(cluster: LocalCluster, home: str) -> dict[str, Any]:
    pods = cluster.kubectl_json("get", "pods", "-n", home, "-l",
                                f"{c.LABEL_INSTANCE}={RELEASE},{c.LABEL_COMPONENT}=operator")
    (pod,) = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return dict(pod)


def operator_connects(cluster: LocalCluster, home: str, pod: str, ip: str) -> bool:
    """Whether the operator's container opens a connection to ip:8000 within 15 s (the
    enforcer learns a pod's IP a moment after it starts)."""
    end = time.monotonic() + 15
    while time.monotonic() < end:
        done = cluster.kubectl("exec", pod, "-n", home, "--", "python3", "-c", CONNECT, ip,
                               str(c.HTTP_PORT), check=False)
        if done.returncode == 0:
            return True
        time.sleep(1)
    return False


def wait_verified_and_rolled(cluster: LocalCluster, ns: str, home: str,
                             first: set[str]) -> dict[str, Any]:
    """Until the change is Verified and rolled over; a Failed rollout ends the wait at once."""
    def rolled() -> dict[str, Any] | None:
        cr = get_cr(cluster, ns, NAME)
        st = cr.get("status") or {}
        rollout = st.get("rollout") or {}
        if rollout.get("state") == "Failed" and rollout.get("revision") not in first:
            raise AssertionError(f"the verified rollout failed: {st.get('conditions')}")
        revisions = _serving_revisions(cluster, ns)
        done = (rollout.get("state") == "Verified" and st.get("reason") == "Ready"
                and cr["metadata"]["generation"] == st.get("observedGeneration")
                and len(revisions) == 1 and revisions != first)
        return cr if done else None

    try:
        return dict(wait_for(rolled, timeout=600, interval=1, what="the change verified"))
    except Exception as exc:
        logs = cluster.kubectl("logs", "-n", home, "-l", f"{c.LABEL_INSTANCE}={RELEASE}",
                               "--tail=120", check=False).stdout
        raise AssertionError(f"{exc}\n{_diagnose(cluster, ns)}\n--- operator\n{logs}") from exc


def test_the_charts_operator_in_its_own_namespace_rolls_a_verified_revision(
    helm_bin: str, cluster: LocalCluster, namespace: str, request: pytest.FixtureRequest,
    tmp_path: Path
) -> None:
    ns = namespace
    refs = seeded(cluster, ns)
    with fresh_namespace(cluster, f"operator-{request.node.name}") as home:
        restrict(cluster, home)
        try:
            install(helm_bin, cluster, home, ns, refs["operator"], tmp_path)
            body = rollout_cr()
            # A serving pod and a verification (or build) pod side by side, with the operator's.
            body["spec"]["podTemplate"]["resources"] = {"cpu": "0.6", "memory": "3Gi"}
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
            _first_answer(cluster, ns, NAME, None, 420)
            first = _serving_revisions(cluster, ns)

            # Enforced, on the serving pod: the operator's pod gets in, another pod of its
            # namespace does not. Checked on a pod that has run for a while, so the answer does
            # not depend on how soon the enforcer programs a pod that has just started.
            (server,) = _pods(cluster, ns, c.COMPONENT_SERVER)
            ip = server["status"]["podIP"]
            op = operator_pod(cluster, home)["metadata"]["name"]
            assert operator_connects(cluster, home, op, ip), (
                "the operator's pod cannot reach the serving pod's HTTP port (its smoke requests' "
                "path)")
            env = Env(cluster, ns, None, tmp_path, refs)  # type: ignore[arg-type]
            other = _probe_pod(env, home, "not-the-operator", [(ip, c.HTTP_PORT)])
            assert other == {f"{ip}:{c.HTTP_PORT}": False}, other

            policy = cluster.kubectl_json("get", "networkpolicy", NAME, "-n", ns)
            smoke = [r for r in policy["spec"]["ingress"]
                     if any(p.get("namespaceSelector", {}).get("matchLabels") ==
                            {"kubernetes.io/metadata.name": home} for p in r["from"])]
            assert [r["from"][0]["podSelector"] for r in smoke] == [{"matchLabels": {
                c.LABEL_NAME: c.APP_NAME, c.LABEL_COMPONENT: "operator"}}], policy["spec"]

            start = time.monotonic()
            cluster.kubectl("patch", "tllm", NAME, "-n", ns, "--type=merge", "-p", json.dumps(
                {"spec": {"engine": {"limits": {"maxBatchSize": 2}}}}))
            cr = wait_verified_and_rolled(cluster, ns, home, first)
            print(f"\n[measure] the chart's operator in namespace {home}: change -> verified "
                  f"and rolled over {time.monotonic() - start:.1f} s")
            assert cr["status"]["rollout"]["state"] == "Verified"
        finally:
            _helm(helm_bin, "uninstall", RELEASE, *_kube(cluster, home), "--wait", "--timeout",
                  "60s")
