"""The Helm chart on the real node, as a user installs it: the chart packaged and pushed as an OCI
artifact to the local registry (`helm push oci://127.0.0.1:5000/...`), installed from there with
the operator image from the same registry, two replicas elected by a Lease, in a namespace that
enforces Pod Security `restricted`.

Checked on the running containers: both replicas Ready by their probes, the operator runs as a
non-root user with a read-only root filesystem, no capabilities, no privilege escalation and the
runtime's seccomp profile (read from /proc inside the container); the metrics Service answers;
exactly one replica reconciles, it serves examples/cpu-standin.yaml to an answering endpoint,
and deleting it hands over to the other (measured: deletion -> the other's first reconcile).
Nothing but the GPUs is simulated.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import ROOT
from tests.cluster.test_real_flow import (
    EXAMPLE,
    EXPECTED_4,
    SEED,
    _diagnose,
    _first_answer,
    restrict,
)
from tritonllm_dev import images
from tritonllm_dev.build import ensure_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import NODE_NAME, REGISTRY_ADDR, tolerations
from tritonllm_dev.testing import wait_for
from tritonllm_dev.versions import HELM

pytestmark = [pytest.mark.chart, pytest.mark.cluster]

CHART = ROOT / "charts" / "tritonllm"
CHART_REPO = f"oci://{REGISTRY_ADDR}/tritonllm/charts"
#: The chart version `helm package` stamps (Chart.yaml).
CHART_VERSION = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["version"])
METRICS_PORT = 9090
# Inside the operator container (its image has python3, no procps): who it runs as, what the
# kernel lets it do, and whether / is writable.
SELF_CHECK = (
    "import os, json\n"
    "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines()"
    " if ':\\t' in l)\n"
    "try:\n    open('/probe', 'w'); root_rw = True\n"
    "except OSError:\n    root_rw = False\n"
    "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'CapEff': st['CapEff'].strip(),"
    " 'CapPrm': st['CapPrm'].strip(), 'CapBnd': st['CapBnd'].strip(),"
    " 'NoNewPrivs': st['NoNewPrivs'].strip(), 'Seccomp': st['Seccomp'].strip(),"
    " 'root_writable': root_rw, 'tmp_writable': os.access('/tmp', os.W_OK)}))\n"
)


@pytest.fixture(scope="module")
def helm_bin() -> str:
    ensure_all()  # builds helm (and the cluster binaries) on a fresh machine
    return str(HELM.path("helm"))


def _helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, check=False,
                          timeout=400)


def push_chart(helm: str, tmp: Path) -> str:
    """`helm package` + `helm push` to the local registry; returns the chart's OCI reference."""
    pkg = _helm(helm, "package", str(CHART), "-d", str(tmp))
    assert pkg.returncode == 0, pkg.stderr
    (tgz,) = tmp.glob("tritonllm-*.tgz")
    push = _helm(helm, "push", str(tgz), CHART_REPO, "--plain-http")
    assert push.returncode == 0, push.stderr + push.stdout
    assert "Digest: sha256:" in push.stdout + push.stderr, push.stdout + push.stderr
    return f"{CHART_REPO}/tritonllm"


def _metrics(ip: str) -> str:
    with urllib.request.urlopen(f"http://{ip}:{METRICS_PORT}/metrics", timeout=10) as resp:
        return resp.read().decode()


def reconciles(ip: str) -> float:
    """tritonllm_reconciles_total of one operator replica (by pod IP), all results."""
    text = _metrics(ip)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tritonllm_reconciles_total{"))


def _operator_pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    pods = cluster.kubectl_json("get", "pods", "-n", ns, "-l",
                                "app.kubernetes.io/instance=tllm,app.kubernetes.io/component=operator")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _active(cluster: LocalCluster, ns: str, lease: str) -> str:
    """The pod that holds the leader-election Lease (the chart sets the holder id to the pod's
    name)."""
    spec = cluster.kubectl_json("get", "lease", lease, "-n", ns)["spec"]
    return str(spec["holderIdentity"])


def test_chart_from_the_oci_registry_runs_two_peered_operators_on_the_real_node(
    helm_bin: str, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    restrict(cluster, ns)
    refs = images.ensure_images(REGISTRY_ADDR)
    chart = push_chart(helm_bin, tmp_path)
    name, _, digest = refs["operator"].partition("@")
    repository, _, tag = name.rpartition(":")
    lease = "tritonllm"
    values = {
        "image": {"repository": repository, "tag": f"{tag}@{digest}"},
        "replicaCount": 2,
        "settings": {"leaderElection": lease, "namespaces": [ns], "logFormat": "text",
                     "resyncSeconds": 5},
        "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
        "tolerations": tolerations(),
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    kube = ("--kubeconfig", str(cluster.kubeconfig), "--namespace", ns)
    install = _helm(helm_bin, "install", "tllm", chart, "--version", CHART_VERSION,
                    "--plain-http", *kube, "-f", str(path), "--set", "crds.install=false",
                    "--wait", "--timeout", "240s")
    try:
        assert install.returncode == 0, install.stderr + _diagnose(cluster, ns)
        listed = json.loads(_helm(helm_bin, "list", *kube, "-o", "json").stdout)
        assert [(r["name"], r["chart"]) for r in listed] == [("tllm", f"tritonllm-{CHART_VERSION}")]

        # `helm test`: the chart's hook pod runs on the real node (the operator's placement) and
        # reaches the operator's metrics through the Service's DNS name.
        hook = _helm(helm_bin, "test", "tllm", *kube, "--timeout", "180s", "--logs")
        assert hook.returncode == 0 and "the operator answers" in hook.stdout, (
            hook.stdout + hook.stderr + _diagnose(cluster, ns))

        pods = _operator_pods(cluster, ns)
        assert len(pods) == 2
        for pod in pods:
            assert pod["spec"]["nodeName"] == NODE_NAME
            (status,) = pod["status"]["containerStatuses"]
            # Ready through the readiness probe, running the image by digest.
            assert status["ready"] and status["imageID"].endswith(digest), status
            ctr = pod["spec"]["containers"][0]
            assert ctr["readinessProbe"]["httpGet"]["path"] == "/healthz"
            assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz"
            seen = json.loads(cluster.kubectl(
                "exec", pod["metadata"]["name"], "-n", ns, "--", "python3", "-c", SELF_CHECK
            ).stdout)
            assert seen == {"uid": 65532, "gid": 65532, "CapEff": "0" * 16, "CapPrm": "0" * 16,
                            "CapBnd": "0" * 16, "NoNewPrivs": "1", "Seccomp": "2",
                            "root_writable": False, "tmp_writable": True}, seen

        # The metrics Service (ClusterIP, through kube-proxy) answers with the operator's metrics.
        svc = cluster.kubectl_json("get", "svc", "tllm-tritonllm-metrics", "-n", ns)
        assert "tritonllm_reconciles_total" in _metrics(svc["spec"]["clusterIP"])

        cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
        cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                        "--timeout=240s", timeout=270)
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
        cr, out = _first_answer(cluster, ns, "cpu-standin", None, 420)
        print(f"\n[measure] cpu-standin with the operator from the OCI chart: apply -> first "
              f"answer {time.monotonic() - start:.1f} s")
        assert out["text_output"] == EXPECTED_4, out
        assert cr["status"]["engine"]["cached"] is False
        # The in-cluster operator made every child: its field manager, no host process.
        svc_cr = cluster.kubectl_json("get", "svc", "cpu-standin", "-n", ns,
                                      "--show-managed-fields")
        managers = {m["manager"] for m in svc_cr["metadata"]["managedFields"]}
        assert "tritonllm" in managers, managers

        # Exactly one replica reconciles: the Lease holder.
        active = _active(cluster, ns, lease)
        ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in _operator_pods(cluster, ns)}
        (standby,) = [n for n in ips if n != active]
        assert reconciles(ips[active]) > 0
        assert reconciles(ips[standby]) == 0
        logs = cluster.kubectl("logs", active, "-n", ns).stdout
        assert "Forbidden" not in logs and " 403" not in logs, logs[-3000:]
        # The standby's metrics above are the proof that it waits: it runs no kopf at all.

        # Delete the active replica: another one takes over (first reconcile after deletion).
        # That is the old standby or the Deployment's replacement pod, whichever tries first
        # after the Lease is released: both are a correct failover.
        def successor() -> str | None:
            holder = _active(cluster, ns, lease)
            if holder in ("", active):
                return None
            now = {p["metadata"]["name"]: p["status"].get("podIP")
                   for p in _operator_pods(cluster, ns)}
            ip = now.get(holder)
            return holder if ip and reconciles(ip) > 0 else None

        start = time.monotonic()
        cluster.kubectl("delete", "pod", active, "-n", ns, "--wait=false")
        try:
            taker = wait_for(successor, timeout=120, interval=0.5,
                             what=f"another replica reconciles after {active} is deleted")
        except Exception as exc:
            # What the standby did (and, had it restarted, its previous run), and the Lease.
            seen = [cluster.kubectl("logs", standby, "-n", ns, *more, check=False)
                    for more in ((), ("--previous",))]
            lease_now = cluster.kubectl("get", "lease", lease, "-n", ns, "-o", "yaml",
                                        check=False)
            raise AssertionError("\n".join([str(exc), *(r.stdout + r.stderr for r in seen),
                                             lease_now.stdout])) from exc
        handover = time.monotonic() - start
        print(f"[measure] operator failover: active replica deleted -> "
              f"{'the standby' if taker == standby else 'its replacement'} reconciles "
              f"{handover:.1f} s")
        assert handover < 60
        if taker != standby:  # still one reconciler: the standby goes on waiting
            assert reconciles(ips[standby]) == 0
        # The deployment is still served, and now reconciled by the other replica.
        (server,) = [p for p in cluster.kubectl_json(
            "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=server")["items"]]
        assert all(s["ready"] for s in server["status"]["containerStatuses"])
    finally:
        _helm(helm_bin, "uninstall", "tllm", *kube, "--wait", "--timeout", "60s")
