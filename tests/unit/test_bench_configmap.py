"""`tritonllm bench --configmap` stores its report only in a ConfigMap it created itself.

The kubernetes package's API classes are replaced by an in-memory ConfigMap store that answers
as the API server does (404 for a missing object, 409 for a stale resourceVersion or a name
taken on create); the command's own code runs unchanged.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest
from kubernetes import client, config

from tritonllm.api import constants as c
from tritonllm.cli import bench

NS, NAME, UID = "team-a", "demo", "dep-uid"
REPORT: dict[str, Any] = {"levels": [{"concurrency": 1, "requests": 1, "errors": 0}]}


class Store:
    """The ConfigMaps of one namespace and the one TritonLLMDeployment, by name."""

    def __init__(self) -> None:
        self.configmaps: dict[str, dict[str, Any]] = {}
        self.version = 0

    def put(self, body: dict[str, Any]) -> None:
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        self.configmaps[body["metadata"]["name"]] = body


class Core:
    def __init__(self, store: Store) -> None:
        self.store = store

    def read_namespaced_config_map(self, name: str, namespace: str) -> dict[str, Any]:
        if name not in self.store.configmaps:
            raise client.ApiException(status=404)
        return copy.deepcopy(self.store.configmaps[name])

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> None:
        if body["metadata"]["name"] in self.store.configmaps:
            raise client.ApiException(status=409)
        self.store.put(body)

    def replace_namespaced_config_map(self, name: str, namespace: str,
                                      body: dict[str, Any]) -> None:
        live = self.store.configmaps.get(name)
        if live is None:
            raise client.ApiException(status=404)
        wanted = body["metadata"].get("resourceVersion")
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            raise client.ApiException(status=409)
        self.store.put(body)


class Custom:
    def get_namespaced_custom_object(self, group: str, version: str, namespace: str,
                                     plural: str, name: str) -> dict[str, Any]:
        assert (group, plural, namespace, name) == (c.GROUP, c.PLURAL, NS, NAME)
        return {"metadata": {"name": NAME, "namespace": NS, "uid": UID}}


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Store:
    s = Store()
    monkeypatch.setattr(config, "load_kube_config", lambda *a, **k: None)
    monkeypatch.setattr(client, "CoreV1Api", lambda *a, **k: Core(s))
    monkeypatch.setattr(client, "CustomObjectsApi", lambda *a, **k: Custom())
    return s


FOREIGN = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": f"{NAME}-bench", "namespace": NS,
                        "labels": {"app": "someone-elses"}},
           "data": {"config.yaml": "keep me"}}


def test_a_configmap_the_bench_did_not_create_is_refused_and_left_unchanged(store: Store) -> None:
    store.put(FOREIGN)
    before = copy.deepcopy(store.configmaps[f"{NAME}-bench"])
    with pytest.raises(Exception) as refused:
        bench.write_configmap(NAME, NS, REPORT)
    assert store.configmaps[f"{NAME}-bench"] == before  # no data, label or owner taken
    assert isinstance(refused.value, bench.ConfigMapRefused)
    assert f"{NS}/{NAME}-bench exists and was not created by" in str(refused.value)


def test_a_bench_label_without_an_owner_reference_to_this_deployment_is_not_ours(
        store: Store) -> None:
    forged = copy.deepcopy(FOREIGN)
    forged["metadata"]["labels"] = {c.LABEL_MANAGED_BY: bench.BENCH_MANAGER}
    forged["metadata"]["ownerReferences"] = [{"kind": c.KIND, "name": NAME, "uid": "other"}]
    store.put(forged)
    with pytest.raises(bench.ConfigMapRefused):
        bench.write_configmap(NAME, NS, REPORT)
    assert store.configmaps[f"{NAME}-bench"]["data"] == FOREIGN["data"]


def test_the_bench_creates_its_configmap_and_replaces_only_its_own(store: Store) -> None:
    assert bench.write_configmap(NAME, NS, REPORT) == f"{NAME}-bench"
    first = store.configmaps[f"{NAME}-bench"]
    assert first["metadata"]["labels"][c.LABEL_MANAGED_BY] == bench.BENCH_MANAGER
    assert [r["uid"] for r in first["metadata"]["ownerReferences"]] == [UID]
    second = {"levels": [{"concurrency": 4, "requests": 8, "errors": 0}]}
    bench.write_configmap(NAME, NS, second)  # a rerun updates its own report
    assert '"concurrency": 4' in store.configmaps[f"{NAME}-bench"]["data"]["results.json"]


def test_the_command_exits_with_its_own_code_and_stores_nothing(
        store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    store.put(FOREIGN)
    monkeypatch.setattr(bench, "_one", lambda *a, **k: {
        "name": NAME, "streaming": False, "max_tokens": 8, "requests_per_level": 1, **REPORT})
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", NAME, "-n", NS, "--configmap", "--concurrency", "1"])
    assert bench.run(args) == bench.EXIT_CONFIGMAP_REFUSED
    assert "not created by tritonllm bench" in capsys.readouterr().err
    assert store.configmaps[f"{NAME}-bench"]["data"] == FOREIGN["data"]
