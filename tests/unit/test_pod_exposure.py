"""Smaller exposures of the rendered pods: no ServiceAccount token in any pod, and the operator's
own pod labels and annotations out of the user's reach."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cases import EXAMPLES, cr
from tests.helpers import example
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import RenderOptions, render_all
from tritonllm.render.jobs import engine_cleanup_job

RUNTIME = Path(__file__).resolve().parents[2] / "operator" / "tritonllm" / "runtime"


def pod_templates(obj: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod template anywhere in a rendered object (a `spec` with `containers`)."""
    if isinstance(obj, dict):
        spec = obj.get("spec")
        if isinstance(spec, dict) and "containers" in spec:
            yield where, obj
        for k, v in obj.items():
            yield from pod_templates(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from pod_templates(v, f"{where}[{i}]")


def every_pod_template(path: Path) -> list[tuple[str, dict[str, Any]]]:
    d = example(path.stem)
    objects = [*render_all(d).objects, engine_cleanup_job(d, "0123456789abcdef", RenderOptions())]
    return [
        (f"{o['kind']}/{o['metadata']['name']}{where}", tmpl)
        for o in objects
        for where, tmpl in pod_templates(dict(o))
    ]


# --- no ServiceAccount token ---------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_no_pod_of_any_example_mounts_a_service_account_token(path) -> None:
    found = every_pod_template(path)
    kinds = {name.split("/")[0] for name, _ in found}
    assert "Job" in kinds and kinds & {"Deployment", "LeaderWorkerSet"}
    assert len(found) >= 4  # build, repository, cleanup, serving (leader and worker)
    for name, tmpl in found:
        assert tmpl["spec"].get("automountServiceAccountToken") is False, name


def test_multi_node_leader_and_worker_get_no_token_even_with_a_service_account() -> None:
    d = parse_deployment(cr({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}},
                             "podTemplate": {"serviceAccountName": "inference"}}))
    lwt = render_all(d).workload["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lwt[role]["spec"]
        assert spec["serviceAccountName"] == "inference"
        assert spec["automountServiceAccountToken"] is False


def test_the_in_pod_code_never_reads_a_service_account_token() -> None:
    """Nothing in the pods needs the token: the in-pod code (standard library only, see
    test_runtime_stdlib.py) neither reads the token nor looks for the API server."""
    for path in sorted(RUNTIME.glob("*.py")):
        text = path.read_text()
        for needle in ("/var/run/secrets/kubernetes.io", "KUBERNETES_SERVICE", "serviceaccount"):
            assert needle not in text, (path.name, needle)
