"""The shipped multi-node example's pods against the API server's Pod Security admission.

The leader and worker pod templates the operator renders into the LeaderWorkerSet of
examples/llama-70b-multinode.yaml are created as Pods (server-side dry run) in a namespace that
enforces Pod Security `restricted`: the workers' sshd runs as the pod's non-root user with every
capability dropped, so nothing needs `baseline` (tests/unit/test_runtime_launch.py starts the
real sshd that way). The same pods as root with sshd's capabilities added are refused.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import render_example
from tritonllm_dev.local import LocalCluster

pytestmark = pytest.mark.cluster

RESTRICTED = "pod-security.kubernetes.io/enforce"


def pods(namespace: str) -> list[dict[str, Any]]:
    lws = render_example("llama-70b-multinode").one("LeaderWorkerSet")
    out = []
    for role in ("leaderTemplate", "workerTemplate"):
        template = copy.deepcopy(lws["spec"]["leaderWorkerTemplate"][role])
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"mn-{role.lower()}", "namespace": namespace},
                    "spec": template["spec"]})
    return out


def dry_run(cluster: LocalCluster, pod: dict[str, Any]) -> Any:
    import json

    return cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                           input=json.dumps(pod))


def test_multi_node_pods_are_admitted_under_restricted(
    cluster: LocalCluster, namespace: str
) -> None:
    cluster.kubectl("label", "namespace", namespace, f"{RESTRICTED}=restricted")
    for pod in pods(namespace):
        done = dry_run(cluster, pod)
        assert done.returncode == 0, (pod["metadata"]["name"], done.stderr)
        assert "Warning" not in done.stderr, done.stderr

    # Root sshd's way (privilege separation) would need these: restricted refuses them.
    root = pods(namespace)[1]
    spec = root["spec"]
    spec["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    triton = next(c for c in spec["containers"] if c["name"] == "triton")
    triton["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"], "add": ["SYS_CHROOT", "SETUID", "SETGID"]},
    }
    refused = dry_run(cluster, root)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted' in refused.stderr
    assert "SYS_CHROOT" in refused.stderr and "runAsNonRoot" in refused.stderr
