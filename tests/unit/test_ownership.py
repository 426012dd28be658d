"""Ownership and failure reporting, on the in-memory API server: the operator never adopts,
changes or deletes an object it did not create, and whatever ends a reconcile becomes a
condition and an Event naming the object and the fix."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import reasons as r
from tritonllm.api.deployment import FieldError, InvalidDeployment, parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.execute import NameConflict, WriteRefused, execute, failure
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.k8s.client import KubeError
from tritonllm.plan.writes import Decision
from tritonllm.render import ObjectRef, render_all

LOG = logging.LoggerAdapter(logging.getLogger("test"), {})


def deployment(uid: str = "uid-demo") -> Any:
    body = cr(metadata={"name": "demo", "namespace": "default", "uid": uid, "generation": 1})
    return body, parse_deployment(body)


def foreign_service() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "demo", "namespace": "default", "labels": {"team": "a"}},
            "spec": {"ports": [{"port": 443}]}}


def test_a_foreign_object_is_never_applied_over() -> None:
    body, dep = deployment()
    kube = FakeKube([body, foreign_service()])
    service = render_all(dep).service.stamped()
    with pytest.raises(NameConflict, match=r"Service/demo already exists .* rename"):
        asyncio.run(execute(kube, kube.cache(), body, dep, Decision(apply=[service]), LOG))
    assert kube.writes() == []
    assert kube.objects[("Service", "default", "demo")]["metadata"]["labels"] == {"team": "a"}


def test_a_deployment_named_kubernetes_never_touches_the_api_service() -> None:
    body = cr(metadata={"name": "kubernetes", "namespace": "default", "uid": "uid-k"})
    dep = parse_deployment(body)
    api = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "kubernetes", "namespace": "default",
                        "labels": {"component": "apiserver", "provider": "kubernetes"}},
           "spec": {"ports": [{"name": "https", "port": 443}]}}
    kube = FakeKube([body, api])
    service = render_all(dep).service.stamped()
    with pytest.raises(NameConflict, match="Service/kubernetes"):
        asyncio.run(execute(kube, kube.cache(), body, dep, Decision(apply=[service]), LOG))
    assert kube.objects[("Service", "default", "kubernetes")]["spec"]["ports"][0]["port"] == 443
    assert kube.writes() == []


def test_an_object_labelled_ours_but_owned_by_another_is_a_conflict() -> None:
    body, dep = deployment()
    stolen = render_all(parse_deployment(cr(metadata={"name": "demo", "uid": "uid-other"})))
    kube = FakeKube([body, stolen.service.body])
    service = render_all(dep).service.stamped()
    with pytest.raises(NameConflict, match="owned by TritonLLMDeployment/demo"):
        asyncio.run(execute(kube, kube.cache(), body, dep, Decision(apply=[service]), LOG))
    assert kube.writes() == []


def test_our_own_objects_and_recorded_build_objects_are_applied() -> None:
    body, dep = deployment()
    other = render_all(parse_deployment(cr(metadata={"name": "other", "uid": "uid-other"})))
    kube = FakeKube([body])
    rendered = render_all(dep)
    # the build ConfigMap of the same engine key, created for another deployment: trusted only
    # because the engine record holds its uid
    shared = kube.put(other.build_configmap.body)
    plan = Decision(apply=[rendered.build_configmap.stamped(), rendered.service.stamped()],
                recorded=frozenset({shared["metadata"]["uid"]}))
    asyncio.run(execute(kube, kube.cache(), body, dep, plan, LOG))
    assert [c.name for c in kube.writes("apply")] == [rendered.build_configmap.name, "demo"]


def test_a_labelled_build_object_the_record_does_not_name_is_a_conflict() -> None:
    body, dep = deployment()
    rendered = render_all(dep)
    kube = FakeKube([body, rendered.build_configmap.body])  # labels and owner: all as ours
    plan = Decision(apply=[rendered.build_configmap.stamped()])
    with pytest.raises(NameConflict, match="ConfigMap/tritonllm-build-"):
        asyncio.run(execute(kube, kube.cache(), body, dep, plan, LOG))
    assert kube.writes() == []


def test_a_non_controller_reference_does_not_make_an_object_ours() -> None:
    body, dep = deployment()
    service = render_all(dep).service
    planted = {**service.body, "metadata": {**service.body["metadata"], "ownerReferences": [
        {**service.body["metadata"]["ownerReferences"][0], "controller": False}]}}
    kube = FakeKube([body, planted])
    with pytest.raises(NameConflict, match="Service/demo"):
        decision = Decision(apply=[service.stamped()])
        asyncio.run(execute(kube, kube.cache(), body, dep, decision, LOG))


def test_a_planted_mpi_key_secret_is_not_trusted() -> None:
    body = cr({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}},
              metadata={"name": "demo", "namespace": "default", "uid": "uid-demo"})
    dep = parse_deployment(body)
    planted = {"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "demo-mpi-ssh", "namespace": "default"},
               "data": {"id_ed25519": "AAAA"}}
    kube = FakeKube([body, planted])
    with pytest.raises(NameConflict, match="Secret/demo-mpi-ssh"):
        asyncio.run(execute(kube, kube.cache(), body, dep, Decision(create_mpi_secret=True), LOG))


FAILURES = [
    # (what ended the pass, reason, words the message must carry)
    (NameConflict("Service/demo already exists"), r.NAME_CONFLICT, "Service/demo"),
    (InvalidDeployment([FieldError("spec.serving.extraParameters", "too big")]),
     r.INVALID_SPEC, "spec.serving.extraParameters"),
    (WriteRefused("apply", "Deployment", "demo", KubeError(
        422, "Invalid", 'Deployment.apps "demo" is invalid: metadata.labels: Invalid value')),
     r.APPLY_REFUSED, "Deployment/demo: Deployment.apps"),
    (WriteRefused("apply", "ConfigMap", "demo-x", KubeError(
        403, "Forbidden", 'configmaps "demo-x" is forbidden: exceeded quota: q, requested: '
        "count/configmaps=1")), r.QUOTA_EXCEEDED, "raise the quota"),
    (WriteRefused("apply", "Service", "demo", KubeError(
        403, "Forbidden", 'services "demo" is forbidden: User "op" cannot patch resource')),
     r.FORBIDDEN, "Role or ClusterRole"),
    (WriteRefused("apply", "Service", "demo", KubeError(
        400, "BadRequest", 'admission webhook "v.example.com" denied the request: no')),
     r.ADMISSION_REFUSED, "admission webhook"),
    (WriteRefused("apply", "Service", "demo", KubeError(
        422, "Invalid", "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no")),
     r.ADMISSION_REFUSED, "policy refused Service/demo"),
    (KubeError(500, "InternalError", "etcdserver: request timed out"), r.API_ERROR, "retried"),
    (ValueError("could not convert string to float: '500m'"), r.RENDER_FAILED, "report"),
]


@pytest.mark.parametrize("exc,reason,says", FAILURES, ids=[f[1] + str(i) for i, f in
                                                            enumerate(FAILURES)])
def test_every_failure_has_a_reason_and_a_fix(exc: Exception, reason: str, says: str) -> None:
    got, message = failure(exc)
    assert got == reason
    assert says in message
    assert len(message) < 1000


def test_a_refused_write_becomes_a_condition_and_an_event() -> None:
    body, dep = deployment()
    body["metadata"]["resourceVersion"] = "1"
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": dep.spec.storage.claimName, "namespace": "default"}}
    kube = FakeKube([body, claim])
    settings = OperatorSettings(check_gpu_nodes=False)

    apply, create = kube.apply, kube.create

    async def refuse(obj: Any) -> dict[str, Any]:  # a quota on ConfigMaps
        if obj.kind != "ConfigMap":
            return await apply(obj)
        raise KubeError(403, "Forbidden", "configmaps is forbidden: exceeded quota: q")

    async def refuse_create(obj: Any) -> dict[str, Any] | None:
        if obj.kind != "ConfigMap":
            return await create(obj)
        raise KubeError(403, "Forbidden", "configmaps is forbidden: exceeded quota: q")

    kube.apply = refuse  # type: ignore[method-assign]
    kube.create = refuse_create  # type: ignore[method-assign]

    async def main() -> float | None:
        reconciler = Reconciler(kube, settings, kube.cache())  # type: ignore[arg-type]
        return await reconciler.reconcile("default", "demo")

    requeue = asyncio.run(main())
    assert requeue is not None and requeue > 0  # backed off, not a hot loop
    status = kube.objects[("TritonLLMDeployment", "default", "demo")]["status"]
    degraded = {x["type"]: x for x in status["conditions"]}["Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == r.QUOTA_EXCEEDED
    assert "ConfigMap/" in degraded["message"]
    assert [e["reason"] for e in kube.events] == [r.QUOTA_EXCEEDED]


def test_another_objects_is_never_deleted() -> None:
    body, dep = deployment()
    theirs = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "demo", "namespace": "default",
                           "labels": {"app.kubernetes.io/managed-by": "tritonllm"},
                           "ownerReferences": [{"kind": "TritonLLMDeployment", "name": "demo",
                                                "uid": "uid-before"}]}}
    kube = FakeKube([body, theirs])
    plan = Decision(delete=[ObjectRef("policy/v1", "PodDisruptionBudget", "default", "demo")])
    with pytest.raises(NameConflict, match="PodDisruptionBudget/demo"):
        asyncio.run(execute(kube, kube.cache(), body, dep, plan, LOG))
    assert ("PodDisruptionBudget", "default", "demo") in kube.objects


def test_a_pass_gives_its_slot_back_before_its_status_and_events_are_sent() -> None:
    """The status and Events wait behind every converging write in the API client; a pass
    waiting for them while holding its slot would hold up another deployment's first pass.
    With one pass slot, the second deployment's pass runs while the first one's Events are
    still unsent (and its status is written before them, before its own next pass)."""
    first, _ = deployment()
    second = cr(metadata={"name": "other", "namespace": "default", "uid": "uid-other",
                          "generation": 1})
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": parse_deployment(first).spec.storage.claimName,
                          "namespace": "default"}}
    kube = FakeKube([first, second, claim])
    settings = OperatorSettings(check_gpu_nodes=False, api_concurrency=1)
    post_event = kube.post_event
    sending: asyncio.Event
    order: list[str] = []

    async def slow_event(note: Any) -> None:
        order.append(f"event {note.body['involvedObject']['name']}")
        await sending.wait()  # the API server is slow to take Events
        await post_event(note)

    kube.post_event = slow_event  # type: ignore[method-assign]
    apply_status = kube.apply_status

    async def status(obj: Any) -> dict[str, Any]:
        order.append(f"status {obj.name}")
        return await apply_status(obj)

    kube.apply_status = status  # type: ignore[method-assign]

    async def main() -> None:
        nonlocal sending
        sending = asyncio.Event()
        rec = Reconciler(kube, settings, kube.cache())  # type: ignore[arg-type]
        rec._passes = asyncio.Semaphore(1)  # one pass at a time
        rec.request("default", "demo")
        rec.request("default", "other")
        while "status other" not in order:
            await asyncio.sleep(0.01)
        sending.set()
        await rec.wait_idle()

    asyncio.run(asyncio.wait_for(main(), timeout=10))
    assert order.index("status demo") < order.index("event demo") < order.index("status other")
    assert order.count("status demo") == 1, order
    assert {e["involvedObject"]["name"] for e in kube.events} == {"demo", "other"}


def test_a_refused_status_write_after_the_pass_is_retried_with_backoff() -> None:
    body, dep = deployment()
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": dep.spec.storage.claimName, "namespace": "default"}}
    kube = FakeKube([body, claim])

    async def refuse(obj: Any) -> dict[str, Any]:
        raise KubeError(500, "Internal Server Error", "etcdserver: request timed out")

    kube.apply_status = refuse  # type: ignore[method-assign]

    async def main() -> float | None:
        rec = Reconciler(kube, OperatorSettings(check_gpu_nodes=False),  # type: ignore[arg-type]
                         kube.cache())
        return await rec.reconcile("default", "demo")

    requeue = asyncio.run(main())
    assert requeue is not None and 0 < requeue <= 5  # the error backoff, not the resync
    assert kube.events == []  # nothing said that the status does not say
