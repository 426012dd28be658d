"""The index of taken names (tritonllm.k8s.names) on the real API server: metadata-only list and
watch of objects the operator did not make, which its label-selected watches never see."""

from __future__ import annotations

import asyncio
import json

import pytest

from tritonllm.api import constants as c
from tritonllm.k8s.client import API_CALLS, Kube
from tritonllm.k8s.names import TakenNames
from tritonllm_dev.local import LocalCluster

pytestmark = pytest.mark.cluster


def _calls(verb: str, kind: str) -> float:
    return API_CALLS.labels(verb, kind)._value.get()


def test_foreign_objects_are_seen_by_name_metadata_only(
    cluster: LocalCluster, namespace: str
) -> None:
    big = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "theirs", "namespace": namespace, "labels": {"app": "x"}},
           "data": {"blob": "y" * 200_000}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(big))  # client-side: a big annotation

    async def go() -> None:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        index = TakenNames(kube, [namespace], kinds=[("v1", "ConfigMap"), ("v1", "Service")])
        task = asyncio.create_task(index.run())
        gets = _calls("get", "ConfigMap")

        async def until(check: object, what: str) -> None:
            for _ in range(200):
                if check():  # type: ignore[operator]
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"not seen within 10 s: {what}")

        try:
            await until(lambda: index.lookup("ConfigMap", namespace, "theirs")[1] is not None,
                        "the ConfigMap made before the index")
            found = index.lookup("ConfigMap", namespace, "theirs")[1]
            assert found is not None
            assert found["metadata"]["uid"] and "data" not in found  # metadata only
            assert c.LABEL_MANAGED_BY not in (found["metadata"].get("labels") or {})
            assert index.lookup("ConfigMap", namespace, "free") == (True, None)
            # made and removed after the list: the watch follows (the annotation of a
            # client-side apply is one line of over 200 kB on the stream)
            later = {**big, "metadata": {**big["metadata"], "name": "later"}}
            cluster.kubectl("apply", "-f", "-", input=json.dumps(later))
            await until(lambda: index.lookup("ConfigMap", namespace, "later")[1] is not None,
                        "a ConfigMap made after the list")
            cluster.kubectl("delete", "configmap", "theirs", "-n", namespace)
            await until(lambda: index.lookup("ConfigMap", namespace, "theirs") == (True, None),
                        "a deleted ConfigMap")
            assert _calls("get", "ConfigMap") == gets  # no name was read one by one
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await kube.close()

    asyncio.run(go())
