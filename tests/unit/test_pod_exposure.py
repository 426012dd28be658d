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
from tritonllm.api.deployment import InvalidDeployment, parse_deployment
from tritonllm.plan.observed import WorkloadObs
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


# --- the operator's pod labels and annotations -------------------------------------------------

OPERATOR_LABELS = (c.LABEL_NAME, c.LABEL_INSTANCE, c.LABEL_COMPONENT, c.LABEL_MANAGED_BY,
                   c.LABEL_ENGINE_KEY, c.LABEL_REPO_KEY)
PROMETHEUS = {"prometheus.io/scrape": "false", "prometheus.io/port": "9999",
              "prometheus.io/path": "/steal"}


def _with_pod_metadata(labels: dict[str, str], annotations: dict[str, str]):
    """A multi-node deployment whose podTemplate carries `labels` and `annotations` as given,
    past validation (as an object admitted under an older, laxer schema would be)."""
    d = parse_deployment(cr({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}))
    pt = d.spec.podTemplate.model_copy(update={"labels": labels, "annotations": annotations})
    return d.model_copy(update={"spec": d.spec.model_copy(update={"podTemplate": pt})})


def test_user_labels_and_annotations_cannot_override_the_operators_on_any_pod() -> None:
    plain = render_all(_with_pod_metadata({}, {}))
    hostile = {k: "forged" for k in OPERATOR_LABELS} | {"team": "a"}
    hostile_notes = {k: "forged" for k in c.OPERATOR_POD_KEYS} | PROMETHEUS | {"note": "kept"}
    r = render_all(_with_pod_metadata(hostile, hostile_notes))
    expected = dict(pod_templates([dict(o) for o in plain.objects]))
    for where, tmpl in pod_templates([dict(o) for o in r.objects]):
        labels = tmpl["metadata"]["labels"]
        notes = tmpl["metadata"].get("annotations") or {}
        before = expected[where]["metadata"]
        # Every key the operator sets keeps its value; the user's other keys are copied.
        for k, v in before["labels"].items():
            assert labels[k] == v, (where, k)
        # (the revision is a hash of the whole template, so the user's own keys change it)
        for k, v in (before.get("annotations") or {}).items():
            assert notes[k] == v or k == c.ANNOTATION_REVISION, (where, k)
        # The keys only the operator writes never come from the user, even where it sets none.
        for k in c.OPERATOR_POD_KEYS:
            assert labels.get(k) != "forged" and notes.get(k) != "forged", (where, k)
        assert labels.get("team") == "a", where
    # The serving pods keep the operator's scrape settings and the user's other annotations.
    lwt = r.workload["spec"]["leaderWorkerTemplate"]
    leader = lwt["leaderTemplate"]["metadata"]["annotations"]
    worker = lwt["workerTemplate"]["metadata"]["annotations"]
    assert (leader["prometheus.io/scrape"], leader["prometheus.io/port"]) == ("true", "8002")
    assert worker["prometheus.io/scrape"] == "false" and worker["note"] == "kept"
    # The workload is still read back as running its own engine and repository.
    seen = WorkloadObs.of(dict(r.workload))
    assert (seen.engine_key, seen.repo_key) == (r.engine_key, r.repository_key)


@pytest.mark.parametrize("key", c.OPERATOR_POD_KEYS)
def test_the_operators_own_keys_are_refused_in_pod_labels_and_annotations(key: str) -> None:
    for field in ("labels", "annotations"):
        with pytest.raises(InvalidDeployment) as err:
            parse_deployment(cr({"podTemplate": {field: {key: "x"}}}))
        assert f"spec.podTemplate.{field}" in str(err.value)
        assert "set by the operator" in str(err.value)


def test_other_keys_are_copied_to_every_pod() -> None:
    d = parse_deployment(cr({"podTemplate": {
        "labels": {"team": "nlp", "app.kubernetes.io/part-of": "chat"},
        "annotations": {"sidecar.istio.io/inject": "false", "tritonllm.io/fail": "true"}}}))
    r = render_all(d)
    for where, tmpl in pod_templates([dict(o) for o in r.objects]):
        labels = tmpl["metadata"]["labels"]
        assert labels["team"] == "nlp" and labels["app.kubernetes.io/part-of"] == "chat", where
    for tmpl in (r.build_job["spec"]["template"], r.workload["spec"]["template"]):
        assert tmpl["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        assert tmpl["metadata"]["annotations"]["tritonllm.io/fail"] == "true"
