"""Helpers for tests that run against the local cluster (used by tests/conftest.py).

Kept in the package rather than in a conftest so that every test tier (cluster, chart, operator
end-to-end) can import the same waiting and object-building helpers.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from tritonllm_dev.local import LocalCluster
from tritonllm_dev.manifests import GPU_PRODUCT_LABEL, GPU_RESOURCE

T = TypeVar("T")

#: Image name for pods that kwok "runs" (nothing is ever pulled).
FAKE_IMAGE = "registry.invalid/tritonllm/fake:0"

#: Label that makes kwok fail a pod (see kwok-stages.yaml for the annotations it reads).
FAIL_LABEL = "tritonllm.io/fail"


def wait_for(
    probe: Callable[[], T | None], timeout: float = 60, interval: float = 0.5, what: str = ""
) -> T:
    """Poll ``probe`` until it returns something truthy; return it or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what or probe!r}: {last!r}")


def namespace_name(test_name: str) -> str:
    """A valid, unique namespace name derived from a test name."""
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{slug}-{secrets.token_hex(3)}"


@contextlib.contextmanager
def fresh_namespace(cluster: LocalCluster, test_name: str) -> Iterator[str]:
    """Create a namespace, wait for its default ServiceAccount, delete it afterwards."""
    name = namespace_name(test_name)
    cluster.kubectl("create", "namespace", name)
    # Pods are rejected until the controller-manager has created the ServiceAccount.
    wait_for(
        lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        timeout=30,
        interval=0.2,
        what=f"default ServiceAccount in {name}",
    )
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def gpu_pod_spec(
    gpus: int, product: str | None = None, *, restart_policy: str = "Always"
) -> dict[str, Any]:
    """A pod spec asking for ``gpus`` GPUs, tolerating the GPU taint, pinned to ``product``."""
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "main",
                "image": FAKE_IMAGE,
                "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
            }
        ],
    }
    if product:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [product]}
                            ]
                        }
                    ]
                }
            }
        }
    return spec


def pod(
    name: str,
    spec: dict[str, Any],
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def job(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    backoff_limit: int = 0,
) -> dict[str, Any]:
    """A one-pod Job whose pod template carries ``labels``/``annotations`` (kwok reads them)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": labels or {}, "annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": FAKE_IMAGE}],
                },
            },
        },
    }
