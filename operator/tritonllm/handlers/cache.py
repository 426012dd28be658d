"""What the watches already delivered: every read of a reconcile, served from kopf indexes.

kopf watches each kind a reconcile reads and keeps, per object, a slim projection of it (only the
fields the planner reads) in an index keyed by what the reconcile looks up: (namespace, name) for
the deployment, its engine record and its children; (namespace, engine key) for the deployments
using an engine; (namespace, deployment) for its repository revisions; the GPU product for nodes.
A steady-state reconcile therefore sends no read request, and nothing it does is proportional to
the number of deployments: no list of all deployments or all Jobs, an engine-cache hit is one
dict lookup. Kinds the operator creates are watched with a label selector on its managed-by label
(the API server filters: another team's ConfigMaps or Jobs never reach the process). Secrets are
not watched at all (tritonllm.handlers.observe reads the two it needs by name). Of pods, only
the operator's own are watched (label-selected), and only why one fails or does not start and
the times of a revision's phases are kept (tritonllm.handlers.observe.PodChecks); a failed Job's
pods are listed when a reconcile needs their termination messages.

The children whose spec and status the planner never reads (ConfigMaps, Services,
NetworkPolicies, HPAs, PDBs: `METADATA_KINDS`) are not watched through kopf at all: the
metadata-only lists and watches of the index of taken names (tritonllm.k8s.names), which the
executor follows anyway, keep their projections and serve the same indexes. A burst of new
deployments thus brings their events once, metadata only, through a plain stream, instead of a
second time whole through kopf's per-event machinery.

kopf fills its indexes before it calls any handler, and the reconciler's passes wait (a few
seconds at most) until the index of taken names has listed its kinds (so the first reconciles
see a complete cluster); both keep them current from the watch streams. What they cannot know
yet are our own writes whose watch events have not arrived: a reconcile that ran in between
would act on what they replaced (write a status again, post an Event twice). So the objects our
writes return are kept as an overlay until the watch catches up (a resourceVersion at least as
new), or for a few seconds at most, and reads prefer the newer of the two.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.topology import DEPLOYMENT, LEADER_WORKER_SET
from tritonllm.k8s.names import TakenNames, slim
from tritonllm.plan import shared_controller

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Project = Callable[[Mapping[str, Any]], Any]
# An index as kopf exposes it: key -> the values of the objects indexed under it.
Index = Mapping[Any, Iterable[Any]]

# The overlay of our own writes outlives a watch event's delay by far, never a lost event.
OVERLAY_SECONDS = 10.0
OVERLAY_PRUNE_AT = 4096
# How long a pass waits, once, for the index of taken names' first lists (Cache.listed).
LISTED_WAIT_SECONDS = 10.0
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


# --- projections: the fields the planner reads, in the objects' own shape ---------------------


def _shared(text: Any) -> Any:
    """One copy of a string that many cached objects repeat (a namespace, label keys and
    values, an owner's kind and name): each watch event parses its own, and at N deployments
    the projections would keep N copies of each. Anything else as it is."""
    return sys.intern(text) if isinstance(text, str) else text


# The label keys the operator writes on its children: all that is read back of their labels
# (another's object may carry thousands of labels, our own too, if anyone labels it).
CHILD_LABELS = frozenset({c.LABEL_NAME, c.LABEL_INSTANCE, c.LABEL_COMPONENT, c.LABEL_MANAGED_BY,
                          c.LABEL_ENGINE_KEY, c.LABEL_REPO_KEY})
# Of the references of the TritonLLMDeployments that co-own a build object (each one waiting for
# the build adds its own), this many are kept: a deployment past them adds its reference again
# on each pass (a no-op patch); past them an object planted with thousands costs no more.
SHARED_OWNERS_KEPT = 32
# Our spec hash is a short hex digest: a longer value is none of ours (read as no hash).
SPEC_HASH_MAX = 64


def _meta(obj: Mapping[str, Any], *extra: str,
          labels: Collection[str] = (c.LABEL_MANAGED_BY,)) -> Obj:
    """Identity, the `extra` fields, the label keys in `labels` (all of them with the extra
    field "labels": the deployment's own), the owners the planner reads and the spec hash."""
    meta = obj["metadata"]
    keep = ("name", "namespace", "uid", "resourceVersion", *extra)
    out: Obj = {k: meta[k] for k in keep if k in meta and k != "labels"}
    if "namespace" in out:
        out["namespace"] = _shared(out["namespace"])
    have = meta.get("labels") or {}
    if "labels" in extra and "labels" in meta:
        out["labels"] = {_shared(k): _shared(v) for k, v in have.items()}
    elif any(k in have for k in labels):  # looked up, never iterated: any number of labels
        out["labels"] = {_shared(k): _shared(have[k]) for k in sorted(labels) if k in have}
    spec_hash = (meta.get("annotations") or {}).get(c.ANNOTATION_SPEC_HASH)
    if isinstance(spec_hash, str) and len(spec_hash) <= SPEC_HASH_MAX:
        out["annotations"] = {c.ANNOTATION_SPEC_HASH: spec_hash}
    owners = _owners(meta.get("ownerReferences"))  # whose it is (tritonllm.plan.ownership)
    if owners:
        out["ownerReferences"] = owners
    return out


def _owners(refs: Any) -> list[Obj]:
    """The owner references the planner reads: the controller (tritonllm.plan.ownership) and the
    TritonLLMDeployments that co-own a build object (`owner_uids`), at most SHARED_OWNERS_KEPT;
    with neither, the first (a conflict message names it)."""
    refs = [r for r in refs or () if isinstance(r, Mapping)]
    controller = [r for r in refs if r.get("controller") is True][:1]
    users = [r for r in refs if r.get("controller") is not True and r.get("kind") == c.KIND]
    kept = controller + users[:SHARED_OWNERS_KEPT] or refs[:1]
    return [{k: _shared(r[k]) if k in ("kind", "name") else r[k]
             for k in ("kind", "name", "uid", "controller") if k in r} for r in kept]


def project_deployment(obj: Mapping[str, Any]) -> Obj:
    """A TritonLLMDeployment as parse_deployment and the planner read it. Spec and status are
    kept as compact JSON text (a few KiB, where the parsed objects take several times that)
    and parsed again by `Cache.get`, once per reconcile."""
    meta = obj["metadata"]
    keep = ("generation", "finalizers", "deletionTimestamp", "labels")
    out = _meta(obj, *keep)
    out["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items()
                          if k != LAST_APPLIED}
    doc = {"spec": obj.get("spec"), "status": obj.get("status") or {}}
    return {
        "apiVersion": obj.get("apiVersion", c.API_VERSION),
        "kind": obj.get("kind", c.KIND),
        "metadata": out,
        "doc": json.dumps(doc, separators=(",", ":")),
    }


def inflate_deployment(slim: Mapping[str, Any]) -> Obj:
    """The projection as an object: metadata, spec and status."""
    doc = json.loads(slim["doc"])
    meta = copy.deepcopy(slim["metadata"])  # callers may keep or change it; the cache may not
    return {"apiVersion": slim["apiVersion"], "kind": slim["kind"], "metadata": meta, **doc}


def project_engine(obj: Mapping[str, Any]) -> Obj:
    return {"metadata": _meta(obj), "status": obj.get("status") or {}}


def project_job(obj: Mapping[str, Any]) -> Obj:
    st = obj.get("status") or {}
    conditions = [
        {k: x[k] for k in ("type", "status", "reason", "message") if k in x}
        for x in st.get("conditions") or []
    ]
    status: Obj = {"conditions": conditions}
    if st.get("succeeded"):
        status["succeeded"] = st["succeeded"]
    if st.get("ready"):  # a running pod: nothing to ask about why it does not start
        status["ready"] = st["ready"]
    # The phase it times (plan.phases), read once its pod runs or it completed: those events
    # reconcile anyway, so the times cost no extra pass.
    if st.get("ready") or st.get("completionTime"):
        for stamp in ("startTime", "completionTime"):
            if st.get(stamp):
                status[stamp] = st[stamp]
    return {"metadata": _meta(obj, labels=CHILD_LABELS), "status": status}


def project_workload(obj: Mapping[str, Any]) -> Obj:
    """A Deployment or LeaderWorkerSet: replica counts, and the keys and revision its pods
    run."""
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    template = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get(
        "leaderTemplate"
    )
    labels = ((template or {}).get("metadata") or {}).get("labels") or {}
    keys = {k: labels[k] for k in (c.LABEL_ENGINE_KEY, c.LABEL_REPO_KEY) if k in labels}
    annotations = ((template or {}).get("metadata") or {}).get("annotations") or {}
    revision = {k: annotations[k] for k in (c.ANNOTATION_REVISION,) if k in annotations}
    out_spec: Obj = {"template": {"metadata": {"labels": keys, "annotations": revision}}}
    if "replicas" in spec:
        out_spec["replicas"] = spec["replicas"]
        out_spec["replicasOnlyOurs"] = replicas_only_ours(obj)
    status = {
        k: st[k]
        for k in ("replicas", "readyReplicas", "updatedReplicas", "observedGeneration")
        if k in st
    }
    # Why the Deployment controller cannot create pods (a quota, Pod Security, a webhook).
    for cond in st.get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            status["replicaFailure"] = str(cond.get("message", ""))[:600]
    return {"metadata": _meta(obj, "generation"), "spec": out_spec, "status": status}


def replicas_only_ours(obj: Mapping[str, Any]) -> bool:
    """Whether the operator is the only field manager of spec.replicas (managedFields): true
    until an autoscaler first scales a workload the operator created with a fixed count."""
    owners = {
        entry.get("manager")
        for entry in obj["metadata"].get("managedFields") or []
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    }
    return owners == {c.FIELD_MANAGER}


def project_child(obj: Mapping[str, Any]) -> Obj:
    """ConfigMap, Service, HPA, PDB, NetworkPolicy and the like: identity, our labels, the
    owners and the spec hash."""
    return {"metadata": _meta(obj, labels=CHILD_LABELS)}


def project_claim(obj: Mapping[str, Any]) -> Obj:
    """A PersistentVolumeClaim, anyone's (the store a deployment names is the user's): that it
    exists is all the planner reads."""
    meta = obj["metadata"]
    out: Obj = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    if "namespace" in out:
        out["namespace"] = _shared(out["namespace"])
    return {"metadata": out}


def managed(obj: Mapping[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(c.LABEL_MANAGED_BY) == c.APP_NAME


def keep_name(obj: Mapping[str, Any]) -> Obj:
    """What the index of taken names keeps of an object: ours, the projection the planner reads
    (for the kinds it serves, `METADATA_KINDS`); anyone else's, what the ownership check reads."""
    if managed(obj) and obj.get("kind") in METADATA_KINDS:
        return {"kind": _shared(obj["kind"]), **project_child(obj)}
    return slim(obj)


def project_secret(obj: Mapping[str, Any]) -> Obj:
    """A Secret's key names and whose it is (never its values)."""
    return {"metadata": _meta(obj), "keys": sorted(obj.get("data") or {})}


# --- the indexes: what kopf watches, and under which keys it keeps what ----------------------


class IndexSpec:
    """One kopf index: a resource, an optional label filter, and the key -> value function."""

    def __init__(
        self,
        id: str,
        kind: str,
        resource: tuple[str, str, str],
        keyed: Callable[[Mapping[str, Any]], dict[Any, Any]],
        *,
        managed: bool = False,
    ) -> None:
        self.id = id
        self.kind = kind
        self.resource = resource  # (group, version, plural); group "" for the core API
        self.keyed = keyed
        self.managed = managed  # only objects labelled managed-by tritonllm

    @property
    def metadata_only(self) -> bool:
        """Served by the index of taken names (metadata only), not by a kopf watch."""
        return self.managed and self.kind in METADATA_KINDS


def _by_name(project: Project) -> Callable[[Mapping[str, Any]], dict[Any, Any]]:
    def keyed(obj: Mapping[str, Any]) -> dict[Any, Any]:
        meta = obj["metadata"]
        value = project(obj)
        return {} if value is None else {(meta.get("namespace"), meta["name"]): value}

    return keyed


def _users_of_engine(obj: Mapping[str, Any]) -> dict[Any, Any]:
    """A deployment uses the engine it serves or builds (status.engine) and, during a rebuild,
    the one its pods still run (status.previousEngine): neither may be deleted under it."""
    status = obj.get("status") or {}
    meta = obj["metadata"]
    keys = [(status.get(f) or {}).get("key") for f in ("engine", "previousEngine")]
    return {(meta.get("namespace"), key): meta["name"] for key in keys if key}


def _repository_plan(obj: Mapping[str, Any]) -> tuple[str | None, str | None, str] | None:
    """(namespace, deployment, repository key) of a repository revision's plan ConfigMap."""
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    if labels.get(c.LABEL_COMPONENT) != c.COMPONENT_REPOSITORY or not labels.get(c.LABEL_REPO_KEY):
        return None
    return meta.get("namespace"), labels.get(c.LABEL_INSTANCE), labels[c.LABEL_REPO_KEY]


def _repository_revision(obj: Mapping[str, Any]) -> dict[Any, Any]:
    plan = _repository_plan(obj)
    return {} if plan is None else {(plan[0], plan[1]): plan[2]}


def _repository_user(obj: Mapping[str, Any]) -> dict[Any, Any]:
    """A deployment whose plan ConfigMap is of this repository key waits for (or served from)
    the key's shared repository Job: its events wake them all."""
    plan = _repository_plan(obj)
    return {} if plan is None else {(plan[0], plan[2]): plan[1]}


def _gpu_node(obj: Mapping[str, Any]) -> dict[Any, Any]:
    """Nodes by GPU product: (name, allocatable GPUs, schedulable)."""
    product = (obj["metadata"].get("labels") or {}).get(c.GPU_PRODUCT_LABEL)
    if not product:
        return {}
    allocatable = ((obj.get("status") or {}).get("allocatable") or {}).get(c.GPU_RESOURCE, "0")
    gpus = int(allocatable) if str(allocatable).isdigit() else 0
    schedulable = not (obj.get("spec") or {}).get("unschedulable", False)
    return {product: (obj["metadata"]["name"], gpus, schedulable)}


# Optional APIs whose CRDs the operator looks for: KEDA's ScaledObject (autoscaler KEDA) and the
# Prometheus operator's PodMonitor (rendered when served).
SCALED_OBJECTS_CRD = "scaledobjects.keda.sh"
POD_MONITORS_CRD = "podmonitors.monitoring.coreos.com"
OPTIONAL_APIS = frozenset({SCALED_OBJECTS_CRD, POD_MONITORS_CRD})


def _served_api(obj: Mapping[str, Any]) -> dict[Any, Any]:
    name = obj["metadata"]["name"]
    return {name: True} if name in OPTIONAL_APIS else {}


LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")



# The children whose spec, data and status the planner never reads: their metadata is all it
# needs (identity, labels, owners, the spec-hash annotation), and the index of taken names
# follows them anyway.
METADATA_KINDS = frozenset(
    {"ConfigMap", "Service", "NetworkPolicy", "HorizontalPodAutoscaler", "PodDisruptionBudget"}
)


def _named(id: str, kind: str, resource: tuple[str, str, str], project: Project,
           *, managed: bool = False) -> IndexSpec:
    return IndexSpec(id, kind, resource, _by_name(project), managed=managed)


# Objects by (namespace, name), per kind the planner reads.
BY_NAME: dict[str, IndexSpec] = {
    spec.kind: spec
    for spec in (
        _named("tritonllm_deployments", c.KIND, (c.GROUP, c.VERSION, c.PLURAL),
               project_deployment),
        _named("tritonllm_engines", c.ENGINE_KIND, (c.GROUP, c.VERSION, c.ENGINE_PLURAL),
               project_engine),
        _named("tritonllm_jobs", "Job", ("batch", "v1", "jobs"), project_job, managed=True),
        _named("tritonllm_workloads", DEPLOYMENT, ("apps", "v1", "deployments"),
               project_workload, managed=True),
        _named("tritonllm_groups", LEADER_WORKER_SET, LWS, project_workload, managed=True),
        _named("tritonllm_configmaps", "ConfigMap", ("", "v1", "configmaps"), project_child,
               managed=True),
        _named("tritonllm_services", "Service", ("", "v1", "services"), project_child,
               managed=True),
        _named("tritonllm_autoscalers", "HorizontalPodAutoscaler",
               ("autoscaling", "v2", "horizontalpodautoscalers"), project_child, managed=True),
        _named("tritonllm_budgets", "PodDisruptionBudget",
               ("policy", "v1", "poddisruptionbudgets"), project_child, managed=True),
        _named("tritonllm_network_policies", "NetworkPolicy",
               ("networking.k8s.io", "v1", "networkpolicies"), project_child, managed=True),
        _named("tritonllm_scaled_objects", "ScaledObject", ("keda.sh", "v1alpha1", "scaledobjects"),
               project_child, managed=True),
        _named("tritonllm_pod_monitors", "PodMonitor",
               ("monitoring.coreos.com", "v1", "podmonitors"), project_child, managed=True),
        _named("tritonllm_claims", "PersistentVolumeClaim", ("", "v1", "persistentvolumeclaims"),
               project_claim),
        # Secrets are not watched at all: read by name (tritonllm.handlers.observe.SecretChecks).
    )
}
USERS_OF_ENGINE = IndexSpec("tritonllm_users_of_engine", c.KIND, (c.GROUP, c.VERSION, c.PLURAL),
                            _users_of_engine)
REVISIONS = IndexSpec("tritonllm_revisions", "ConfigMap", ("", "v1", "configmaps"),
                      _repository_revision, managed=True)
REPOSITORY_USERS = IndexSpec("tritonllm_repository_users", "ConfigMap", ("", "v1", "configmaps"),
                             _repository_user, managed=True)
GPU_NODES = IndexSpec("tritonllm_gpu_nodes", "Node", ("", "v1", "nodes"), _gpu_node)
SERVED_APIS = IndexSpec("tritonllm_served_apis", "CustomResourceDefinition",
                        ("apiextensions.k8s.io", "v1", "customresourcedefinitions"), _served_api)


def index_specs(*, gpu_nodes: bool) -> list[IndexSpec]:
    """Every index the reconciler reads (nodes only when NoMatchingNodes is checked)."""
    specs = [*BY_NAME.values(), USERS_OF_ENGINE, REVISIONS, REPOSITORY_USERS, SERVED_APIS]
    return [*specs, GPU_NODES] if gpu_nodes else specs


def kopf_specs(specs: Iterable[IndexSpec]) -> list[IndexSpec]:
    """The indexes kopf keeps (it watches their kinds whole)."""
    return [spec for spec in specs if not spec.metadata_only]


def metadata_indices(specs: Iterable[IndexSpec], names: TakenNames) -> dict[str, Index]:
    """The indexes the index of taken names serves, by id, in kopf's shape."""
    views: dict[str, Index] = {}
    for spec in specs:
        if not spec.metadata_only or not names.follows(spec.kind):
            continue
        if BY_NAME.get(spec.kind) is spec:
            views[spec.id] = names.by_name(spec.kind, managed)
        else:
            views[spec.id] = names.index(spec.kind, _managed_only(spec.keyed))
    return views


def _managed_only(keyed: Callable[[Mapping[str, Any]], dict[Any, Any]]
                  ) -> Callable[[Mapping[str, Any]], dict[Any, Any]]:
    def only(obj: Mapping[str, Any]) -> dict[Any, Any]:
        return keyed(obj) if managed(obj) else {}

    return only


def managed_resources(specs: Iterable[IndexSpec]) -> list[tuple[str, str, str]]:
    """The resources whose every index reads only objects labelled managed-by tritonllm: their
    list and watch requests carry that label selector, so the API server sends nothing else
    (kopf's `labels=` filter alone is applied in the process, after every object arrived)."""
    managed: dict[tuple[str, str, str], bool] = {}
    for spec in specs:
        managed[spec.resource] = managed.get(spec.resource, True) and spec.managed
    return [res for res, only in managed.items() if only]


# --- reading ------------------------------------------------------------------------------------


def _version(obj: Mapping[str, Any] | None) -> int:
    rv = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    return int(rv) if rv.isdigit() else -1


class Cache:
    """The reconciler's view of the cluster: kopf's indexes plus the overlay of our writes."""

    def __init__(self, indices: Mapping[str, Index], names: TakenNames | None = None) -> None:
        self._indices = indices
        # Every object of the kinds we create, ours or not, metadata only: is a name free?
        self.names = names
        self._overlay: dict[tuple[str, str | None, str], tuple[float, Obj]] = {}
        self._prune_at = OVERLAY_PRUNE_AT
        # Digest of each child's projection at its last watch event (see `changed`).
        self._seen: dict[tuple[str, str | None, str], int] = {}
        # resourceVersion of our last status write per deployment (to recognise its echo).
        self._statuses: dict[tuple[str | None, str], str] = {}
        # Shared objects (a content key's repository Job) this replica is creating now: the
        # passes of other deployments that need the same one wait for that POST instead of
        # sending their own (tritonllm.handlers.execute).
        self.creating: dict[tuple[str, str | None, str], asyncio.Future[None]] = {}
        self._listed = False

    async def listed(self, timeout: float = LISTED_WAIT_SECONDS) -> None:
        """Wait (once, `timeout` at most) until the index of taken names has listed the kinds it
        serves as indexes: a pass before that would see none of their objects. Past the wait a
        pass goes on (it applies what it renders and reads names it cannot see, and deletes
        nothing it does not see), and the log says which kinds are not listed yet."""
        if self._listed or self.names is None:
            return
        missing = await self.names.wait_listed(sorted(METADATA_KINDS), timeout)
        if missing:
            log.warning("not listed after %.0f s: %s; reconciling without them (nothing of "
                        "theirs is deleted meanwhile)", timeout, ", ".join(missing))
        self._listed = True

    def _values(self, spec: IndexSpec, key: Any) -> list[Any]:
        index = self._indices.get(spec.id)
        if index is None or key not in index:
            return []
        return list(index[key])

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The object (its projection), or None when it does not exist."""
        found = self._get(kind, namespace, name)
        return inflate_deployment(found) if found is not None and kind == c.KIND else found

    def exists(self, kind: str, namespace: str | None, name: str) -> bool:
        """Whether the object exists (as `get` sees it, not inflated)."""
        return self._get(kind, namespace, name) is not None

    def _get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        found = self._values(BY_NAME[kind], (namespace, name))
        indexed: Obj | None = found[0] if found else None
        ref = (kind, namespace, name)
        written = self._overlay.get(ref)
        if written is None:
            return indexed
        at, obj = written
        if _version(indexed) >= _version(obj) or time.monotonic() - at > OVERLAY_SECONDS:
            del self._overlay[ref]
            return indexed
        return obj

    def remember(self, obj: Mapping[str, Any]) -> None:
        """An object our write returned: reads see it until the watch delivers it."""
        spec = BY_NAME.get(obj.get("kind", ""))
        if spec is None:
            return
        meta = obj["metadata"]
        ref = (obj["kind"], meta.get("namespace"), meta["name"])
        values = list(spec.keyed(obj).values())
        if values:
            now = time.monotonic()
            self._overlay[ref] = (now, values[0])
            if len(self._overlay) > self._prune_at:  # drop entries nobody read again
                self._overlay = {
                    k: v for k, v in self._overlay.items() if now - v[0] <= OVERLAY_SECONDS
                }
                self._prune_at = max(OVERLAY_PRUNE_AT, 2 * len(self._overlay))  # amortised O(1)
        if obj["kind"] == c.KIND:
            self._statuses[(meta.get("namespace"), meta["name"])] = meta.get("resourceVersion", "")

    def echoes(self, body: Mapping[str, Any]) -> bool:
        """Whether a watch event of a deployment only brings back our own last write (nothing
        else changed since, or its resourceVersion would differ): no reason to reconcile."""
        meta = body["metadata"]
        rv = meta.get("resourceVersion")
        return rv is not None and self._statuses.get((meta.get("namespace"), meta["name"])) == rv

    def forget(self, namespace: str, name: str) -> None:
        """A deployment is gone."""
        self._statuses.pop((namespace, name), None)
        self._overlay.pop((c.KIND, namespace, name), None)

    def changed(self, kind: str, obj: Mapping[str, Any], *, deleted: bool = False) -> bool:
        """Whether a watch event of a child changes what the planner reads of it (its
        projection, resourceVersion aside) since the last event: if not, it needs no reconcile."""
        meta = obj["metadata"]
        ref = (kind, meta.get("namespace"), meta["name"])
        if deleted:
            self._seen.pop(ref, None)
            return True
        values = list(BY_NAME[kind].keyed(obj).values())
        if values:
            plain = {**values[0], "metadata": {k: v for k, v in values[0]["metadata"].items()
                                               if k != "resourceVersion"}}
            digest = hash(json.dumps(plain, sort_keys=True, default=str))
        else:
            digest = 0
        if self._seen.get(ref) == digest:
            return False
        self._seen[ref] = digest
        return True

    def deployments_using(self, namespace: str, engine_key: str) -> list[str]:
        """Names of the deployments whose status says they use engine `engine_key` (as their
        engine or as the previous engine their pods still serve)."""
        return sorted(set(self._values(USERS_OF_ENGINE, (namespace, engine_key))))

    def repository_revisions(self, namespace: str, name: str) -> list[str]:
        return sorted(set(self._values(REVISIONS, (namespace, name))))

    def deployment_controls(self, namespace: str, live: Mapping[str, Any] | None) -> str | None:
        """The uid of the TritonLLMDeployment of the namespace that controls `live` (an object
        of a content key shared by its deployments), when the watch shows that deployment with
        that uid (tritonllm.plan.ownership.shared_controller)."""
        controller = shared_controller(live)
        if controller is None:
            return None
        found = self._values(BY_NAME[c.KIND], (namespace, controller[0]))
        return controller[1] if found and found[0]["metadata"].get("uid") == controller[1] else None

    def repository_users(self, namespace: str, repo_key: str) -> list[str]:
        """Names of the deployments with a plan ConfigMap of this repository key."""
        return sorted({n for n in self._values(REPOSITORY_USERS, (namespace, repo_key)) if n})

    def gpu_nodes(self, product: str) -> int:
        return len(self._values(GPU_NODES, product))

    def gpu_capacity(self, product: str) -> list[int]:
        """Allocatable GPUs of each schedulable node carrying `product`."""
        return sorted(gpus for _, gpus, ok in self._values(GPU_NODES, product) if ok)

    def serves(self, crd: str) -> bool:
        """Whether the cluster has the CRD (one of OPTIONAL_APIS)."""
        return bool(self._values(SERVED_APIS, crd))
