"""Objects planted under names the operator computes are never trusted, and a build shared by
several deployments lives as long as any of them, on the in-memory API server (the cluster tier
plants the same objects against a real one: tests/cluster/test_forged_ownership.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.k8s.client import KubeError
from tritonllm.plan.ownership import controlled_by, is_ours, recorded_uids
from tritonllm.render import naming, render_all

NS = "default"
COMPLETE = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
MULTI_NODE = {"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}


def deployment(name: str = "demo", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return cr(spec, metadata={"name": name, "namespace": NS, "uid": f"uid-{name}",
                              "generation": 1, "resourceVersion": "1"})


def world(*objs: dict[str, Any]) -> FakeKube:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "tritonllm-model-store", "namespace": NS}}
    return FakeKube([claim, *objs])


def reconcile(kube: FakeKube, *names: str) -> None:
    async def main() -> None:
        settings = OperatorSettings(check_gpu_nodes=False)
        rec = Reconciler(kube, settings, kube.cache())  # type: ignore[arg-type]
        for name in names:
            await rec.reconcile(NS, name)

    asyncio.run(main())


def status(kube: FakeKube, name: str = "demo") -> dict[str, Any]:
    return kube.objects[(c.KIND, NS, name)].get("status") or {}


def condition(kube: FakeKube, type_: str, name: str = "demo") -> dict[str, Any]:
    """The condition (empty when the deployment has none of that type yet)."""
    return next((x for x in status(kube, name)["conditions"] if x["type"] == type_), {})


def planted_build_job(body: dict[str, Any]) -> dict[str, Any]:
    """What anyone who may create Jobs in the namespace can write: the computable name, our
    labels, an owner reference to the deployment, and a Complete status."""
    job = copy.deepcopy(render_all(parse_deployment(body)).build_job.body)
    job["metadata"]["uid"] = "planted"
    job["status"] = COMPLETE
    return job


def test_ownership_needs_a_controller_reference_or_a_recorded_uid() -> None:
    body = deployment()
    r = render_all(parse_deployment(body))
    service = {**r.service.body, "metadata": {**r.service.body["metadata"], "uid": "s"}}
    assert controlled_by(service, "uid-demo") and is_ours(service, "uid-demo")
    assert not is_ours(service, "uid-other")
    unlabelled = {**service, "metadata": {**service["metadata"], "labels": {}}}
    assert not is_ours(unlabelled, "uid-demo")
    # the shared build Job: labelled, a (non-controller) reference to the deployment
    job = {**r.build_job.body, "metadata": {**r.build_job.body["metadata"], "uid": "j"}}
    assert not controlled_by(job, "uid-demo") and not is_ours(job, "uid-demo")
    assert is_ours(job, "uid-demo", recorded={"j"})
    record = {"status": {"state": "Building", "buildJobUid": "j", "buildPlanUid": "p"}}
    assert recorded_uids(record) == {"j", "p"} and recorded_uids(None) == frozenset()


def test_a_planted_complete_build_job_never_makes_the_engine_ready() -> None:
    body = deployment()
    kube = world(body, planted_build_job(body))
    reconcile(kube, "demo", "demo")
    degraded = condition(kube, c.COND_DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == r.NAME_CONFLICT
    assert "Job/tritonllm-build-" in degraded["message"]
    assert condition(kube, c.COND_ENGINE_READY).get("status") != "True"
    key = naming.engine_key(parse_deployment(body))
    record = kube.objects.get((c.ENGINE_KIND, NS, key))
    assert record is None or (record.get("status") or {}).get("state") != "Ready"
    assert kube.writes("create", "Job") == [] and kube.writes("apply", "Job") == []
    assert kube.objects[("Job", NS, render_all(parse_deployment(body)).build_job.name)][
        "metadata"]["uid"] == "planted"  # untouched
    assert r.NAME_CONFLICT in [e["reason"] for e in kube.events]


def test_a_planted_unlabelled_build_job_is_refused_when_the_build_starts() -> None:
    body = deployment()
    job = planted_build_job(body)
    job["metadata"]["labels"] = {"team": "a"}  # not shown by the watches: found by the create
    kube = world(body, job)
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED)["reason"] == r.NAME_CONFLICT
    assert condition(kube, c.COND_ENGINE_READY).get("status") != "True"
    assert [w.verb for w in kube.writes("create", "Job")] == ["create"]  # refused: 409
    assert kube.objects[("Job", NS, job["metadata"]["name"])]["metadata"]["uid"] == "planted"


def test_only_the_build_job_the_operator_created_is_read() -> None:
    body = deployment()
    kube = world(body)
    reconcile(kube, "demo")
    r = render_all(parse_deployment(body))
    key = r.engine_key
    job = kube.objects[("Job", NS, r.build_job.name)]
    plan = kube.objects[("ConfigMap", NS, r.build_configmap.name)]
    record = kube.objects[(c.ENGINE_KIND, NS, key)]["status"]
    assert record["buildJobUid"] == job["metadata"]["uid"]
    assert record["buildPlanUid"] == plan["metadata"]["uid"]
    # the Job the operator created finishes: Ready
    kube.put({**job, "status": COMPLETE})
    reconcile(kube, "demo")
    assert kube.objects[(c.ENGINE_KIND, NS, key)]["status"]["state"] == "Ready"
    assert condition(kube, c.COND_ENGINE_READY)["status"] == "True"


def test_a_build_whose_engine_record_is_deleted_midway_is_still_ours() -> None:
    """The deployment's status copies the recorded uids: a record deleted while its build runs
    is applied again and the running Job is still trusted (no NameConflict, no second Job)."""
    body = deployment()
    kube = world(body)
    reconcile(kube, "demo")
    reconcile(kube, "demo")  # the record's uids reach the deployment's status
    rd = render_all(parse_deployment(body))
    job = kube.objects[("Job", NS, rd.build_job.name)]
    assert sorted(status(kube)["buildObjectUids"]) == sorted(
        [job["metadata"]["uid"], kube.objects[("ConfigMap", NS, rd.build_configmap.name)]
         ["metadata"]["uid"]])
    del kube.objects[(c.ENGINE_KIND, NS, rd.engine_key)]
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED).get("reason") != r.NAME_CONFLICT
    assert (c.ENGINE_KIND, NS, rd.engine_key) in kube.objects
    assert kube.objects[("Job", NS, rd.build_job.name)]["metadata"]["uid"] == job["metadata"]["uid"]
    kube.put({**kube.objects[("Job", NS, rd.build_job.name)], "status": COMPLETE})
    reconcile(kube, "demo")
    assert condition(kube, c.COND_ENGINE_READY)["status"] == "True"


def test_a_job_swapped_in_under_the_build_name_is_a_conflict() -> None:
    body = deployment()
    kube = world(body)
    reconcile(kube, "demo")
    rendered = render_all(parse_deployment(body))
    del kube.objects[("Job", NS, rendered.build_job.name)]
    kube.put(planted_build_job(body))  # deleted and replaced by someone else, Complete
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED)["reason"] == r.NAME_CONFLICT
    record = kube.objects[(c.ENGINE_KIND, NS, rendered.engine_key)]["status"]
    assert record["state"] != "Ready"


def test_the_mpi_key_secret_is_created_on_the_first_pass_and_its_uid_recorded() -> None:
    body = deployment(spec=MULTI_NODE)
    kube = world(body)
    reconcile(kube, "demo")
    secret = kube.objects[("Secret", NS, "demo-mpi-ssh")]
    assert controlled_by(secret, "uid-demo")
    assert status(kube)["mpiSecretUid"] == secret["metadata"]["uid"]
    assert condition(kube, c.COND_ENGINE_READY).get("status") != "True"  # long before serving
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED).get("reason") != r.NAME_CONFLICT
    assert len(kube.writes("create", "Secret")) == 1


def mpi_secret(body: dict[str, Any], uid: str, *, controller: bool) -> dict[str, Any]:
    """A Secret under the MPI key Secret's name with our labels and an owner reference to the
    deployment (its uid is readable by whoever may read the deployment)."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "demo-mpi-ssh", "namespace": NS, "uid": uid,
                         "labels": naming.base_labels(parse_deployment(body), "server"),
                         "ownerReferences": [{"apiVersion": c.API_VERSION, "kind": c.KIND,
                                              "name": "demo", "uid": "uid-demo",
                                              "controller": controller}]},
            "data": {"id_ed25519": "QUFBQQ=="}}


def test_a_secret_with_a_forged_controller_reference_is_refused() -> None:
    """Planted between the deployment's creation and the operator's first pass: the deployment's
    status records no Secret yet, so none found is adopted."""
    body = deployment(spec=MULTI_NODE)
    kube = world(body, mpi_secret(body, "planted", controller=True))
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED)["reason"] == r.NAME_CONFLICT
    assert "mpiSecretUid" not in status(kube)
    assert kube.writes("create") == []


def test_a_secret_swapped_in_later_is_refused() -> None:
    body = deployment(spec=MULTI_NODE)
    kube = world(body)
    reconcile(kube, "demo")
    del kube.objects[("Secret", NS, "demo-mpi-ssh")]
    kube.put(mpi_secret(body, "planted", controller=True))
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED)["reason"] == r.NAME_CONFLICT


def test_the_secret_of_an_older_operator_is_adopted_once_its_group_runs() -> None:
    """An older operator recorded no uid; it created the Secret before the LeaderWorkerSet."""
    body = deployment(spec=MULTI_NODE)
    body["status"] = {"observedGeneration": 1}
    lws = render_all(parse_deployment(body)).workload.body
    kube = world(body, mpi_secret(body, "old-secret", controller=True), lws)
    reconcile(kube, "demo")
    assert status(kube)["mpiSecretUid"] == "old-secret"
    assert condition(kube, c.COND_DEGRADED).get("reason") != r.NAME_CONFLICT


def test_the_recorded_uid_survives_a_pass_that_fails_after_creating_the_secret() -> None:
    body = deployment(spec=MULTI_NODE)
    kube = world(body)
    apply = kube.apply

    async def refuse(obj: Any) -> dict[str, Any]:
        if obj.kind == "Service":
            raise KubeError(403, "Forbidden", "services is forbidden: exceeded quota: q")
        return await apply(obj)

    kube.apply = refuse  # type: ignore[method-assign]
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED)["reason"] == r.QUOTA_EXCEEDED
    secret = kube.objects[("Secret", NS, "demo-mpi-ssh")]
    assert status(kube)["mpiSecretUid"] == secret["metadata"]["uid"]
    kube.apply = apply  # type: ignore[method-assign]
    reconcile(kube, "demo")
    assert condition(kube, c.COND_DEGRADED).get("reason") not in (r.NAME_CONFLICT,
                                                                  r.QUOTA_EXCEEDED)


def test_a_planted_mpi_key_secret_with_our_labels_is_refused_before_anything_runs() -> None:
    body = deployment(spec=MULTI_NODE)
    planted = {"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "demo-mpi-ssh", "namespace": NS, "uid": "planted",
                            "labels": naming.base_labels(parse_deployment(body), "server"),
                            "ownerReferences": [{"apiVersion": c.API_VERSION, "kind": c.KIND,
                                                 "name": "demo", "uid": "uid-demo"}]},
               "data": {"id_ed25519": "QUFBQQ=="}}
    kube = world(body, planted)
    reconcile(kube, "demo")
    degraded = condition(kube, c.COND_DEGRADED)
    assert degraded["reason"] == r.NAME_CONFLICT and "Secret/demo-mpi-ssh" in degraded["message"]
    assert kube.writes("create") == [] and kube.writes("apply", "Job") == []
    assert kube.objects[("Secret", NS, "demo-mpi-ssh")]["metadata"]["uid"] == "planted"


def test_every_deployment_waiting_for_a_build_owns_it() -> None:
    """Deleting the deployment that started a build must not garbage-collect it while another
    waits for it: each adds its (non-controller) owner reference to the Job and its plan."""
    a, b = deployment("a"), deployment("b")
    kube = world(a, b)
    reconcile(kube, "a")
    r = render_all(parse_deployment(a))
    assert r.engine_key == render_all(parse_deployment(b)).engine_key
    job = kube.objects[("Job", NS, r.build_job.name)]
    assert [o["uid"] for o in job["metadata"]["ownerReferences"]] == ["uid-a"]
    reconcile(kube, "b", "b")
    for kind, name in (("Job", r.build_job.name), ("ConfigMap", r.build_configmap.name)):
        refs = kube.objects[(kind, NS, name)]["metadata"]["ownerReferences"]
        assert sorted(o["uid"] for o in refs) == ["uid-a", "uid-b"], kind
        assert not any(o["controller"] or o["blockOwnerDeletion"] for o in refs)
    assert len(kube.writes("patch", "Job")) == 1  # added once, not on every pass
    assert len(kube.writes("create", "Job")) == 1  # one build for both


def test_a_secret_whose_uid_cannot_be_recorded_is_removed_again() -> None:
    """An API server that refuses the status field (an old CRD): the Secret it created would
    read as someone else's on the next pass, so it goes; the pass fails and says why."""
    body = deployment(spec=MULTI_NODE)
    kube = world(body)
    apply_status = kube.apply_status

    async def refuse(obj: Any) -> dict[str, Any]:
        if "mpiSecretUid" in (obj.body.get("status") or {}):
            raise KubeError(500, "InternalError", ".status.mpiSecretUid: field not declared in "
                            "schema")
        return await apply_status(obj)

    kube.apply_status = refuse  # type: ignore[method-assign]
    reconcile(kube, "demo")
    assert ("Secret", NS, "demo-mpi-ssh") not in kube.objects
    degraded = condition(kube, c.COND_DEGRADED)
    assert degraded["reason"] == r.API_ERROR and "mpiSecretUid" in degraded["message"]
    kube.apply_status = apply_status  # type: ignore[method-assign]
    reconcile(kube, "demo")  # the CRD updated: created again, recorded
    secret = kube.objects[("Secret", NS, "demo-mpi-ssh")]
    assert status(kube)["mpiSecretUid"] == secret["metadata"]["uid"]
    assert condition(kube, c.COND_DEGRADED).get("reason") != r.NAME_CONFLICT
