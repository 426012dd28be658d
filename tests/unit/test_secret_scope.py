"""Least privilege on Secrets, and only our objects in memory: the operator neither lists nor
watches Secrets (the two a deployment names are read by name), and the list and watch requests
of the kinds it creates carry its label selector, so the API server filters (checked here on
the request kopf itself builds; bench/secrets_rss.py measures the memory on a real cluster)."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import api, fetching
from kopf._cogs.structs.references import Resource

from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers import operator
from tritonllm.handlers.cache import index_specs, kopf_specs, managed_resources
from tritonllm.handlers.reconciler import Reconciler

NS = "default"
SELECTOR = "app.kubernetes.io/managed-by=tritonllm"
# The kinds we create that kopf watches (their spec or status is read)...
OURS = [("batch", "v1", "jobs"), ("apps", "v1", "deployments"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("keda.sh", "v1alpha1", "scaledobjects"), ("monitoring.coreos.com", "v1", "podmonitors")]
# ... and those only the metadata-only index of taken names follows (tritonllm.k8s.names).
METADATA_ONLY = [("", "v1", "configmaps"), ("", "v1", "services"),
                 ("autoscaling", "v2", "horizontalpodautoscalers"),
                 ("policy", "v1", "poddisruptionbudgets"),
                 ("networking.k8s.io", "v1", "networkpolicies")]


def test_no_secret_is_indexed_or_watched() -> None:
    for gpu_nodes in (False, True):
        assert all(spec.resource[2] != "secrets" for spec in index_specs(gpu_nodes=gpu_nodes))
    registry = kopf.get_default_registry()
    selectors = (registry._indexing.get_all_selectors() | registry._watching.get_all_selectors()
                 | registry._spawning.get_all_selectors())
    assert not any(s.check(Resource("", "v1", "secrets")) for s in selectors)


def list_query(settings: kopf.OperatorSettings, resource: Resource) -> dict[str, list[str]]:
    """The query string kopf sends when it lists `resource` (the watch mirrors it)."""
    seen: list[str] = []

    async def get(url: str, **_: Any) -> dict[str, Any]:
        seen.append(url)
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    async def main() -> None:
        logger = logging.getLogger("test")
        async for _ in fetching.fetch_objs(settings=settings, resource=resource, namespace=None,
                                           logger=logger):
            pass

    original = api.get
    api.get = get  # type: ignore[assignment]
    try:
        asyncio.run(main())
    finally:
        api.get = original  # type: ignore[assignment]
    (url,) = seen
    return urllib.parse.parse_qs(urllib.parse.urlparse(url).query)


def test_the_api_server_filters_the_kinds_we_create() -> None:
    specs = index_specs(gpu_nodes=True)
    assert sorted(managed_resources(kopf_specs(specs))) == sorted(OURS)
    assert sorted(managed_resources(specs)) == sorted(OURS + METADATA_ONLY)
    # kopf does not watch the metadata-only kinds at all
    assert not {s.resource for s in kopf_specs(specs)} & set(METADATA_ONLY)
    settings = kopf.OperatorSettings()
    operator.filter_server_side(settings, specs)
    for group, version, plural in OURS:
        query = list_query(settings, Resource(group, version, plural))
        assert query.get("labelSelector") == [SELECTOR], plural
    # the user's claims, the deployments, nodes: every one (they are not ours to label)
    for resource in (Resource("", "v1", "persistentvolumeclaims"), Resource("", "v1", "nodes"),
                     Resource(c.GROUP, c.VERSION, c.PLURAL)):
        assert "labelSelector" not in list_query(settings, resource), resource.plural


def token_secret(keys: tuple[str, ...] = ("HF_TOKEN",)) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": NS},
            "data": {k: "c2VjcmV0" for k in keys}}


def world(*objs: dict[str, Any]) -> FakeKube:
    body = cr({"model": {"source": "hf://meta-llama/Llama-2-7b-hf",
                         "credentials": {"secretName": "hf-token"}}},
              metadata={"name": "demo", "namespace": NS, "uid": "uid-demo", "generation": 1})
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "tritonllm-model-store", "namespace": NS}}
    return FakeKube([body, claim, *objs])


def reconciler(kube: FakeKube) -> Reconciler:
    return Reconciler(kube, OperatorSettings(check_gpu_nodes=False), kube.cache())  # type: ignore[arg-type]


def passes(kube: FakeKube, n: int) -> Reconciler:
    rec = reconciler(kube)

    async def main() -> None:
        for _ in range(n):
            await rec.reconcile(NS, "demo")

    asyncio.run(main())
    return rec


def reads(kube: FakeKube, kind: str) -> list[str]:
    return [call.verb for call in kube.calls if call.kind == kind and call.verb in ("get", "list")]


def test_the_token_secret_is_read_by_name_once_not_listed() -> None:
    kube = world(token_secret())
    rec = passes(kube, 3)
    assert reads(kube, "Secret") == ["get"]  # one GET by name; then remembered (key names)
    assert "c2VjcmV0" not in repr(rec._secrets._found)  # never the values
    status = kube.objects[(c.KIND, NS, "demo")]["status"]
    assert status["reason"] != r.SECRET_MISSING


def test_a_missing_token_secret_is_looked_for_on_every_pass() -> None:
    kube = world()
    passes(kube, 2)
    assert reads(kube, "Secret") == ["get", "get"]
    degraded = {x["type"]: x for x in kube.objects[(c.KIND, NS, "demo")]["status"]["conditions"]}
    assert degraded[c.COND_DEGRADED]["reason"] == r.SECRET_MISSING
    kube.put(token_secret(("OTHER",)))  # the wrong key: still missing
    passes(kube, 1)
    assert kube.objects[(c.KIND, NS, "demo")]["status"]["reason"] == r.SECRET_MISSING


def test_a_found_secret_is_read_again_after_the_recheck_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tritonllm.handlers import observe

    kube = world(token_secret())
    clock = [1000.0]
    monkeypatch.setattr(observe.time, "monotonic", lambda: clock[0])
    rec = reconciler(kube)

    async def main() -> None:
        await rec.reconcile(NS, "demo")
        clock[0] += observe.SecretChecks.RECHECK_SECONDS / 2
        await rec.reconcile(NS, "demo")
        del kube.objects[("Secret", NS, "hf-token")]
        clock[0] += observe.SecretChecks.RECHECK_SECONDS
        await rec.reconcile(NS, "demo")

    asyncio.run(main())
    assert reads(kube, "Secret") == ["get", "get"]
    assert kube.objects[(c.KIND, NS, "demo")]["status"]["reason"] == r.SECRET_MISSING
