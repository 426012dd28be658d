"""What admission's limits guarantee downstream: the longest name a CRD admits still gives
every rendered object a name and labels Kubernetes accepts, and the environment names the
operator sets are exactly the ones a user may not set."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.cases import EXAMPLES, INVALID, cr
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.api.spec import RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES
from tritonllm.render import RenderOptions, render_all
from tritonllm.render.pod import env

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# Kinds whose names must be DNS-1035 labels (63): Services; the workloads' names end up in their
# pods' labels (job-name, controller-revision-hash with 11 more characters for a StatefulSet of
# a LeaderWorkerSet), so keep them to a label too.
LABEL_NAMED = {"Service", "Job", "Deployment", "LeaderWorkerSet", "ScaledObject",
               "HorizontalPodAutoscaler"}


def _labels(body: dict[str, Any]) -> dict[str, str]:
    out = dict(body["metadata"].get("labels") or {})
    spec = body.get("spec") or {}
    for template in (spec.get("template"), (spec.get("leaderWorkerTemplate") or {})
                     .get("workerTemplate")):
        if isinstance(template, dict):
            out |= (template.get("metadata") or {}).get("labels") or {}
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_longest_admitted_name_renders_names_and_labels_kubernetes_accepts(path) -> None:
    obj = yaml.safe_load(path.read_text())
    obj["metadata"]["name"] = "a" * c.MAX_NAME_LENGTH
    dep = parse_deployment(obj)
    rendered = render_all(dep, RenderOptions(OperatorSettings(prometheus_url="http://prometheus:9090"),
                                             pod_monitors=True))
    for manifest in rendered.objects:
        body = manifest.body
        name = body["metadata"]["name"]
        limit = 63 if body["kind"] in LABEL_NAMED else 253
        assert len(name) <= limit, (body["kind"], name)
        if body["kind"] == "Service":
            assert DNS_1035.fullmatch(name), name
        if body["kind"] == "LeaderWorkerSet":  # StatefulSet <name>-<group>, then -<hash10>
            assert len(name) + len("-999-") + 10 <= 63, name
        for key, value in _labels(body).items():
            assert len(str(value)) <= 63, (body["kind"], key, value)


def test_one_character_more_is_refused_at_admission() -> None:
    assert any(case.id == "name-too-long" for case in INVALID)
    with pytest.raises(ValueError):
        parse_deployment(cr(metadata={"name": "a" * (c.MAX_NAME_LENGTH + 1)}))


def test_every_variable_the_operator_sets_is_reserved() -> None:
    """A variable added to the pods' environment must join RESERVED_ENV_NAMES, or a user's
    podTemplate.env would silently replace it."""
    ours = {e["name"] for e in env(parse_deployment(cr()))}
    assert ours
    for name in ours:
        assert name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES), name


def test_variables_users_set_for_tuning_stay_allowed() -> None:
    """NCCL and Open MPI tuning, a Hub mirror, the stand-in's switches: not reserved."""
    names = ["NCCL_DEBUG", "OMPI_MCA_btl_tcp_if_include", "HF_ENDPOINT",
             "TRITONLLM_STANDIN_TOKEN_DELAY", "PYTHONPATH"]
    dep = parse_deployment(cr({"podTemplate": {"env": [{"name": n, "value": "x"}
                                                       for n in names]}}))
    assert [e.name for e in dep.spec.podTemplate.env] == names
