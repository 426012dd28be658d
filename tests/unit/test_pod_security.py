"""Pod Security Admission: every pod the operator renders for single-node serving and building
passes the `restricted` profile as rendered (no setting needed), multi-node serving passes it
too, and `runAsUser: 0` (root) is the one field that drops a pod to `baseline`.

The checks below are the ones the API server's PodSecurity admission plugin makes for the
`baseline` and `restricted` levels (Kubernetes 1.36, pod-security.kubernetes.io docs), applied to
the rendered pod specs; the cluster tier (tests/cluster/test_real_flow.py) has the API server
admit and run them in namespaces labelled `pod-security.kubernetes.io/enforce=restricted`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cases import EXAMPLES, cr
from tests.helpers import example
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.render import Rendered, RenderOptions, render_all
from tritonllm.render.jobs import engine_cleanup_job

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def baseline_violations(pod: dict[str, Any]) -> list[str]:
    out = [f"spec.{k}" for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]
    out += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    for ctr in _containers(pod):
        sec = ctr.get("securityContext") or {}
        if sec.get("privileged"):
            out.append(f"{ctr['name']}: privileged")
        if any(p.get("hostPort") for p in ctr.get("ports", [])):
            out.append(f"{ctr['name']}: hostPort")
        if (sec.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{ctr['name']}: seccomp Unconfined")
    return out


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    out = baseline_violations(pod)
    psec = pod.get("securityContext") or {}
    for vol in pod.get("volumes", []):
        kinds = set(vol) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {vol['name']}: {sorted(kinds)}")
    for ctr in _containers(pod):
        sec = ctr.get("securityContext") or {}
        name = ctr["name"]
        if sec.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation != false")
        if "ALL" not in (sec.get("capabilities") or {}).get("drop", []):
            out.append(f"{name}: capabilities.drop lacks ALL")
        if set((sec.get("capabilities") or {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: capabilities.add")
        if sec.get("runAsNonRoot", psec.get("runAsNonRoot")) is not True:
            out.append(f"{name}: runAsNonRoot != true")
        if sec.get("runAsUser", psec.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sec.get("seccompProfile") or psec.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
    return out


def pod_specs(r: Rendered) -> dict[str, dict[str, Any]]:
    """Every pod spec a deployment renders: build Job, repository Job, serving pods."""
    out = {"build": r.build_job["spec"]["template"]["spec"]} if r.build_job else {}
    out["repository"] = r.repository_job["spec"]["template"]["spec"]
    spec = r.workload["spec"]
    if "template" in spec:
        out["server"] = spec["template"]["spec"]
    else:
        lwt = spec["leaderWorkerTemplate"]
        out["leader"] = lwt["leaderTemplate"]["spec"]
        out["worker"] = lwt["workerTemplate"]["spec"]
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_pods_that_pass_restricted(path) -> None:
    r = render_all(example(path.stem))
    specs = pod_specs(r)
    assert specs.keys() >= {"repository"}
    for role, pod in specs.items():
        assert restricted_violations(pod) == [], (path.stem, role)


def test_pods_run_as_the_triton_user_with_a_read_only_root_and_writable_scratch() -> None:
    r = render_all(example("gpt2-medium"))
    for role, pod in pod_specs(r).items():
        assert pod["securityContext"] == {
            "fsGroup": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, role
        volumes = {v["name"]: v for v in pod["volumes"]}
        for ctr in _containers(pod):
            assert ctr["securityContext"]["readOnlyRootFilesystem"] is True, (role, ctr["name"])
            if ctr["name"] in ("triton", "build"):
                # Open MPI's session directory, HOME and TMPDIR: the scratch emptyDir.
                mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
                assert volumes[mounts[c.SCRATCH_MOUNT]]["emptyDir"] == {}
                assert volumes[mounts[c.SHM_MOUNT]]["emptyDir"]["medium"] == "Memory"
                env = {e["name"]: e.get("value") for e in ctr["env"]}
                assert env["HOME"] == env["TMPDIR"] == c.SCRATCH_MOUNT


def test_root_is_the_one_setting_that_needs_baseline() -> None:
    spec = {"podTemplate": {"runAsUser": 0, "readOnlyRootFilesystem": False}}
    r = render_all(parse_deployment(cr(spec)))
    for role, pod in pod_specs(r).items():
        assert baseline_violations(pod) == [], role
        problems = restricted_violations(pod)
        assert problems and all("runAsNonRoot" in p or "runAsUser 0" in p for p in problems)
        # Only the Triton image's containers follow the setting (ours stay read-only).
        for ctr in pod["containers"]:
            want = ctr["name"] == "repository"
            assert ctr["securityContext"]["readOnlyRootFilesystem"] is want, (role, ctr["name"])


def test_multi_node_serving_passes_restricted_too() -> None:
    r = render_all(example("llama-70b-multinode"))
    specs = pod_specs(r)
    assert {"leader", "worker"} <= specs.keys()
    for role in ("leader", "worker"):
        assert restricted_violations(specs[role]) == [], role
        ssh = next(v for v in specs[role]["volumes"] if v["name"] == "mpi-ssh")
        assert ssh["secret"]["defaultMode"] == 0o400


def test_the_engine_cleanup_job_passes_restricted_and_removes_only_that_engine() -> None:
    d = example("cpu-standin")
    key = "0123456789abcdef"
    job = engine_cleanup_job(d, key, RenderOptions(OperatorSettings(tools_image="op:1")))
    pod = job["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    (ctr,) = pod["containers"]
    # A shell that checks the key before `rm -rf -- /store/engines/$key /store/checkpoints/$key`
    # (tests/unit/test_store_paths.py runs it).
    assert ctr["command"][:2] == ["sh", "-c"] and ctr["command"][-1] == key
    assert 'rm -rf -- "/store/engines/$key" "/store/checkpoints/$key"' in ctr["command"][2]
    # Placed where the node-local store is, with no owner (its deployment is being deleted).
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "real-0"}
    assert "ownerReferences" not in job["metadata"]
