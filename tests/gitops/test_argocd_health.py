"""The TritonLLMDeployment health check, run by Argo CD's own Lua health code.

Every case of the catalogue's health_test.yaml (inputs captured from real reconciles by
tests/gitops/make_health_testdata.py) goes through `argocd admin settings resource-overrides
health` of the argocd binary built from Argo CD's module, with the shipped argocd-cm snippet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cases import ROOT
from tritonllm.cli.crd import ARGOCD_SNIPPET, HEALTH_KEY, HEALTH_LUA, argocd_snippet_text
from tritonllm_dev.argocd import resource_health

CATALOGUE = ROOT / HEALTH_LUA.parent
CASES = yaml.safe_load((CATALOGUE / "health_test.yaml").read_text())["tests"]


def test_snippet_carries_the_catalogue_script() -> None:
    snippet = (ROOT / ARGOCD_SNIPPET).read_text()
    assert snippet == argocd_snippet_text((ROOT / HEALTH_LUA).read_text())
    assert yaml.safe_load(snippet)["data"][HEALTH_KEY] == (ROOT / HEALTH_LUA).read_text()


def test_every_testdata_file_is_a_case() -> None:
    used = {case["inputPath"] for case in CASES}
    files = {f"testdata/{p.name}" for p in (CATALOGUE / "testdata").glob("*.yaml")}
    assert used == files
    statuses = {case["healthStatus"]["status"] for case in CASES}
    assert statuses == {"Progressing", "Healthy", "Degraded", "Suspended"}


@pytest.mark.gitops
@pytest.mark.parametrize("case", CASES, ids=lambda c: Path(c["inputPath"]).stem)
def test_argocd_assesses_real_statuses(case: dict) -> None:
    status, message = resource_health(ROOT / ARGOCD_SNIPPET, CATALOGUE / case["inputPath"])
    assert (status, message) == (case["healthStatus"]["status"], case["healthStatus"]["message"])
