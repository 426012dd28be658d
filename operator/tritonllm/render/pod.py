"""Pod-level pieces shared by the build Job and the serving pods.

Security defaults: every pod passes Pod Security Admission `restricted` as rendered: non-root
(podTemplate.runAsUser, default 1000, the `triton-server` user of NGC Triton images, which run as
root unless told), the runtime's default seccomp profile, no privilege escalation, all
capabilities dropped and a read-only root filesystem, with writable emptyDirs where programs
write (/tmp, also HOME and TMPDIR; /dev/shm). The Hugging Face token is a file mounted only into
the build pod, which downloads. GPUs come from the `nvidia.com/gpu` resource, the GPU product
from a required node affinity on `nvidia.com/gpu.product`, and a toleration for the usual
`nvidia.com/gpu` taint is always present.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.settings import OperatorSettings

from . import naming

TOOLS_VOLUME = "tritonllm-tools"
STORE_VOLUME = "model-store"
SOURCE_VOLUME = "model-source"
TOKENIZER_SOURCE_VOLUME = "tokenizer-source"
PLAN_VOLUME = "plan"
SHM_VOLUME = "dshm"
SCRATCH_VOLUME = "scratch"
HF_TOKEN_VOLUME = "hf-token"
PYZ = f"{c.TOOLS_MOUNT}/tritonllm.pyz"
# Where the operator image keeps the zipapp of tritonllm's in-pod entry points.
PYZ_IN_TOOLS_IMAGE = "/usr/local/share/tritonllm/tritonllm.pyz"


@dataclasses.dataclass(frozen=True)
class RenderOptions:
    """What shapes rendered objects from outside the CR: the operator's settings, whole (each
    setting is declared once, in OperatorSettings), and the facts one pass observed."""

    # The tools image, the activator image, the default Prometheus, the operator's namespace...
    settings: OperatorSettings = dataclasses.field(default_factory=OperatorSettings)
    # The engine is already on the store (observed by the operator): pods start faster.
    engine_cached: bool = False
    # Live replica count to keep when an autoscaler owns it (None: leave the field out).
    observed_replicas: int | None = None
    # The cluster serves monitoring.coreos.com/v1 PodMonitor (a Prometheus operator's CRDs).
    pod_monitors: bool = False
    # The engine digests its build reported (the TritonLLMEngine's status.digest and
    # fingerprintDigest): the launch plan carries them, serving pods refuse another engine.
    engine_digest: str | None = None
    engine_fingerprints: str | None = None
    # The revision the live serving workload's pods run (None: no serving workload yet): with
    # spec.openai.enabled empty, a live revision without the OpenAI frontend keeps it off
    # (tritonllm.render.frontend).
    live_revision: str | None = None


def owner_references(dep: TritonLLMDeployment, *, controller: bool = True) -> list[dict[str, Any]]:
    """Owner reference to the CR (only when it exists in a cluster and so has a UID)."""
    if not dep.metadata.uid:
        return []
    return [
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "name": dep.name,
            "uid": dep.metadata.uid,
            "controller": controller,
            "blockOwnerDeletion": controller,
        }
    ]


def metadata(
    dep: TritonLLMDeployment,
    name: str,
    labels: dict[str, str],
    *,
    controller: bool = True,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": dep.namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    refs = owner_references(dep, controller=controller)
    if refs:
        meta["ownerReferences"] = refs
    return meta


def container_security(dep: TritonLLMDeployment) -> dict[str, Any]:
    """Every container: the fields Pod Security Admission `restricted` checks, set on the
    container itself so they hold whatever the pod level says."""
    uid = dep.spec.podTemplate.runAsUser
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": dep.spec.podTemplate.readOnlyRootFilesystem,
        "runAsNonRoot": uid != 0,
        "runAsUser": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security(dep: TritonLLMDeployment) -> dict[str, Any]:
    uid = dep.spec.podTemplate.runAsUser
    return {
        "fsGroup": uid,
        "runAsGroup": uid,
        "runAsNonRoot": uid != 0,
        "runAsUser": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def tolerations(dep: TritonLLMDeployment) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
    ]
    out += [t.to_wire() for t in dep.spec.podTemplate.tolerations]
    return out


def affinity(dep: TritonLLMDeployment) -> dict[str, Any] | None:
    product = dep.spec.gpu.product
    if not product:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": c.GPU_PRODUCT_LABEL, "operator": "In", "values": [product]}
                        ]
                    }
                ]
            }
        }
    }


def env(dep: TritonLLMDeployment) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": f"{c.STORE_MOUNT}/.cache/huggingface"},
        # The root filesystem is read-only: home and temporary files go to the scratch emptyDir.
        {"name": "HOME", "value": c.SCRATCH_MOUNT},
        {"name": "TMPDIR", "value": c.SCRATCH_MOUNT},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        # Open MPI inside containers: shared-memory single-copy needs ptrace, which restricted
        # pods do not have; this falls back to plain copies.
        {"name": "OMPI_MCA_btl_vader_single_copy_mechanism", "value": "none"},
    ]
    out += [e.to_wire() for e in dep.spec.podTemplate.env]
    return out


def token_volume(dep: TritonLLMDeployment) -> list[dict[str, Any]]:
    """The Hugging Face token as one file (only for the pods that download)."""
    creds = dep.spec.model.credentials
    if not creds:
        return []
    items = [{"key": creds.key, "path": "token"}]
    return [
        {
            "name": HF_TOKEN_VOLUME,
            "secret": {"secretName": creds.secretName, "items": items, "defaultMode": 0o440},
        }
    ]


def token_mounts(dep: TritonLLMDeployment) -> list[dict[str, Any]]:
    if not dep.spec.model.credentials:
        return []
    return [{"name": HF_TOKEN_VOLUME, "mountPath": c.HF_TOKEN_MOUNT, "readOnly": True}]


def scratch_volume() -> dict[str, Any]:
    return {"name": SCRATCH_VOLUME, "emptyDir": {}}


def scratch_mount() -> dict[str, Any]:
    return {"name": SCRATCH_VOLUME, "mountPath": c.SCRATCH_MOUNT}


def tools_init_container(dep: TritonLLMDeployment, opts: RenderOptions) -> dict[str, Any]:
    """Copies tritonllm's zipapp into the pod; the Triton image runs it with its own python3."""
    return {
        "name": "tritonllm-tools",
        "image": opts.settings.tools_image,
        "command": ["cp", PYZ_IN_TOOLS_IMAGE, PYZ],
        "volumeMounts": [{"name": TOOLS_VOLUME, "mountPath": c.TOOLS_MOUNT}],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {**container_security(dep), "readOnlyRootFilesystem": True},
    }


def store_volumes(dep: TritonLLMDeployment) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = [
        {"name": STORE_VOLUME, "persistentVolumeClaim": {"claimName": dep.spec.storage.claimName}},
    ]
    for claim, mount in naming.source_claims(dep).items():
        vols.append(
            {
                "name": _source_volume(mount),
                "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
            }
        )
    return vols


def _source_volume(mount: str) -> str:
    return SOURCE_VOLUME if mount == naming.SOURCE_MOUNT else TOKENIZER_SOURCE_VOLUME


def store_mounts(
    dep: TritonLLMDeployment, *, read_only: bool, writable: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The store at /store; with `writable` (directories under /store), the store read-only
    and only those directories writable, each mounted over its own place (subPath), so a Job
    cannot change what another deployment or engine keeps there."""
    mounts: list[dict[str, Any]] = [
        {"name": STORE_VOLUME, "mountPath": c.STORE_MOUNT, "readOnly": read_only or bool(writable)}
    ]
    prefix = c.STORE_MOUNT + "/"
    for path in sorted(set(writable)):
        if not path.startswith(prefix) or naming.plain_path_problem(path):
            raise ValueError(f"{path!r} is not a plain directory on the store ({c.STORE_MOUNT})")
        mounts.append({"name": STORE_VOLUME, "mountPath": path,
                       "subPath": path.removeprefix(prefix)})
    for mount in naming.source_claims(dep).values():
        mounts.append({"name": _source_volume(mount), "mountPath": mount, "readOnly": True})
    return mounts


def shm_volume(dep: TritonLLMDeployment) -> dict[str, Any]:
    return {
        "name": SHM_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": dep.spec.podTemplate.shmSize},
    }


def gpu_resources(dep: TritonLLMDeployment, gpus: int) -> dict[str, Any]:
    r = dep.spec.podTemplate.resources
    return {
        "requests": {"cpu": r.cpu, "memory": r.memory, c.GPU_RESOURCE: str(gpus)},
        "limits": {"cpu": r.cpu, "memory": r.memory, c.GPU_RESOURCE: str(gpus)},
    }


# No pod the operator renders calls the Kubernetes API (the in-pod code is the standard library,
# and the multi-node group uses SSH, not pods/exec): none gets a ServiceAccount token, so code
# running in a pod (a model's Python, a compromised tokenizer) cannot act as its ServiceAccount.
NO_API_TOKEN: dict[str, Any] = {"automountServiceAccountToken": False}


def pod_spec_common(dep: TritonLLMDeployment) -> dict[str, Any]:
    """Fields every GPU pod of a deployment shares."""
    pt = dep.spec.podTemplate
    spec: dict[str, Any] = {
        "securityContext": pod_security(dep),
        "tolerations": tolerations(dep),
        "enableServiceLinks": False,
        **NO_API_TOKEN,
    }
    aff = affinity(dep)
    if aff:
        spec["affinity"] = aff
    if pt.nodeSelector:
        spec["nodeSelector"] = dict(pt.nodeSelector)
    if pt.serviceAccountName:
        spec["serviceAccountName"] = pt.serviceAccountName
    spec.update(pull_secrets(dep))
    if pt.priorityClassName:
        spec["priorityClassName"] = pt.priorityClassName
    return spec


def pull_secrets(dep: TritonLLMDeployment) -> dict[str, Any]:
    """podTemplate.imagePullSecrets as a pod spec's field (nothing when there are none)."""
    names = dep.spec.podTemplate.imagePullSecrets
    return {"imagePullSecrets": [{"name": n} for n in names]} if names else {}


def store_placement(dep: TritonLLMDeployment) -> dict[str, Any]:
    """podTemplate's nodeSelector and tolerations for a CPU pod that mounts the store (the
    repository Job), so it reaches a node-local claim where the GPU pods run; nothing when
    podTemplate places nothing (the Job then runs on any node, as before)."""
    pt = dep.spec.podTemplate
    out: dict[str, Any] = {}
    if pt.tolerations or pt.nodeSelector:
        out["tolerations"] = tolerations(dep)
    if pt.nodeSelector:
        out["nodeSelector"] = dict(pt.nodeSelector)
    return out


def _user_keys(values: Mapping[str, str]) -> dict[str, str]:
    """A user's pod labels or annotations without the keys only the operator writes (refused
    at admission as well; this holds for an object admitted under an older schema too)."""
    return {k: v for k, v in values.items() if k not in c.OPERATOR_POD_KEYS}


def pod_labels(dep: TritonLLMDeployment, labels: dict[str, str]) -> dict[str, str]:
    """User labels first, so the operator's labels (selectors) always win."""
    return {**_user_keys(dep.spec.podTemplate.labels), **labels}


def pod_annotations(
    dep: TritonLLMDeployment, annotations: Mapping[str, str] | None = None
) -> dict[str, str]:
    """User annotations first, so the operator's annotations always win."""
    return {**_user_keys(dep.spec.podTemplate.annotations), **(annotations or {})}
