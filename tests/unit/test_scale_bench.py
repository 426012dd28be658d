"""The scale bench's pure parts: reading tritonllm's and controller-runtime's metrics the same
way, and finding (or not) the peer's binary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench import nim_peer
from bench.scale_bench import NIM_METRICS, TRITONLLM_METRICS, Snapshot

TRITONLLM_TEXT = """\
# HELP tritonllm_api_calls_total API requests
tritonllm_api_calls_total{verb="apply",kind="Service"} 4.0
tritonllm_api_calls_total{verb="event",kind="Event"} 10.0
tritonllm_reconciles_total{result="ok"} 8.0
tritonllm_reconcile_duration_seconds_bucket{le="0.1"} 6.0
tritonllm_reconcile_duration_seconds_bucket{le="1.0"} 8.0
tritonllm_reconcile_duration_seconds_bucket{le="+Inf"} 8.0
"""

# as controller-runtime v0.2x exposes them: client-go's counter has no kind, only method and code
NIM_TEXT = """\
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 70
rest_client_requests_total{code="404",host="127.0.0.1:6443",method="GET"} 60
controller_runtime_reconcile_total{controller="nimservice",result="success"} 20
controller_runtime_reconcile_total{controller="nimservice",result="requeue_after"} 5
controller_runtime_reconcile_total{controller="nimcache",result="success"} 99
controller_runtime_reconcile_time_seconds_bucket{controller="nimservice",le="0.05"} 10
controller_runtime_reconcile_time_seconds_bucket{controller="nimservice",le="0.1"} 25
controller_runtime_reconcile_time_seconds_bucket{controller="nimservice",le="+Inf"} 25
controller_runtime_reconcile_time_seconds_bucket{controller="nimcache",le="+Inf"} 99
"""


def test_tritonllm_metrics_by_verb_and_kind() -> None:
    snap = Snapshot.of(TRITONLLM_TEXT, TRITONLLM_METRICS)
    assert snap.calls == {("apply", "Service"): 4.0, ("event", "Event"): 10.0}
    assert snap.reconciles == 8.0
    assert snap.per_reconcile() == {"apply": 0.5, "event": 1.25}
    assert snap.quantile(0.5) == pytest.approx(0.1 * 4 / 6)


def test_controller_runtime_metrics_by_method_and_code_only_its_nimservice_controller() -> None:
    snap = Snapshot.of(NIM_TEXT, NIM_METRICS)
    assert snap.calls == {("POST", "201"): 70, ("GET", "404"): 60}
    assert snap.reconciles == 25  # not the NIMCache controller's
    assert snap.buckets == {0.05: 10, 0.1: 25, float("inf"): 25}
    assert snap.per_reconcile() == {"GET": 2.4, "POST": 2.8}


def test_a_delta_between_two_scrapes() -> None:
    before = Snapshot.of(NIM_TEXT, NIM_METRICS)
    later = NIM_TEXT.replace('method="POST"} 70', 'method="POST"} 75')
    delta = Snapshot.of(later, NIM_METRICS).minus(before)
    assert {k: v for k, v in delta.calls.items() if v} == {("POST", "201"): 5}
    assert delta.reconciles == 0


def test_the_peer_binary_given_cached_or_absent(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONLLM_CACHE", str(tmp_path))
    assert nim_peer.find_binary(None) is None  # nothing built: the bench prints BUILD_HINT
    assert nim_peer.find_binary(str(tmp_path / "missing")) is None
    built = tmp_path / "bin" / "nim-operator-0123456789ab" / "manager"
    built.parent.mkdir(parents=True)
    built.write_text("#!/bin/sh\n")
    assert nim_peer.find_binary(str(built)) is None  # not executable
    os.chmod(built, 0o755)
    assert nim_peer.find_binary(None) == built
    assert nim_peer.find_binary(str(built)) == built
    assert "build_nim_operator.sh" in nim_peer.BUILD_HINT


def test_one_nimservice_is_one_replica_on_one_h100_and_five_children() -> None:
    obj = nim_peer.nimservice("s0001", "ns")
    spec = obj["spec"]
    assert (obj["apiVersion"], obj["kind"]) == ("apps.nvidia.com/v1alpha1", "NIMService")
    assert spec["replicas"] == 1
    assert spec["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert nim_peer.children_of("s0001") == [
        ("ServiceAccount", "s0001"), ("Role", "s0001"), ("RoleBinding", "s0001"),
        ("Service", "s0001"), ("Deployment", "s0001")]
    assert nim_peer.is_ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert not nim_peer.is_ready({"status": {"conditions": [
        {"type": "Ready", "status": "False"}]}})
