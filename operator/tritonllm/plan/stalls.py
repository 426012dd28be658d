"""Why a build or repository Job's pod does not start, in the words of whoever said so, and the fix.

A Job whose pod cannot start says nothing on the Job itself: it stays active. What stands in the
way is told elsewhere, and read here (the handlers list these only while the Job has no running
pod, tritonllm.handlers.observe):

    the pod's PodScheduled=False/Unschedulable  the scheduler: no node with the GPU product, not
                                                enough GPUs, a taint, an unbound claim
    a container's waiting reason                the kubelet: ErrImagePull, ImagePullBackOff,
                                                InvalidImageName, CreateContainerConfigError, ...
    the Job's FailedCreate Event (no pod)       the API server refused the pod: a ResourceQuota
                                                (named in its message), a LimitRange, Pod
                                                Security or an admission webhook

`job_stall` picks the first that applies; `explain` turns it into a condition message naming the
spec field or command that fixes it. The serving path reads the scheduler the same way
(`unschedulable`, used by tritonllm.plan.observed.unschedulable_message).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.render.jobs import REPOSITORY_RESOURCES

Obj = Mapping[str, Any]

# The kubelet's waiting reasons that mean "this container will not start until something changes".
PULL_FAILURES = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
START_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError"})
# What the repository Job's pod asks for.
FIXED_REQUESTS = (
    f"{REPOSITORY_RESOURCES['requests']['cpu']} CPU and "
    f"{REPOSITORY_RESOURCES['requests']['memory']} of memory, limited to "
    f"{REPOSITORY_RESOURCES['limits']['memory']}"
)
# Quoted words are cut here (a condition message stays readable; the pod has the rest).
MAX_QUOTE = 600


@dataclasses.dataclass(frozen=True)
class Stall:
    """A Job's pod that does not start: the condition reason, and what the cluster said."""

    reason: str  # one of r.POD_STALLS
    said: str  # "pod NAME: <the scheduler's or kubelet's message>" or the FailedCreate Event's
    pod: str = ""  # the pod's name ("" when none was created)


def unschedulable(pod: Obj) -> str | None:
    """The scheduler's message when it cannot place `pod`, else None."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message", "")).strip()
    return None


def _waiting(pod: Obj) -> tuple[str, str, str] | None:
    """(container, reason, message) of the first container that waits on a pull or start error."""
    st = pod.get("status") or {}
    for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURES | START_FAILURES:
            return str(cs.get("name", "")), waiting["reason"], str(waiting.get("message", ""))
    return None


def job_stall(pods: Sequence[Obj], events: Sequence[Obj] = ()) -> Stall | None:
    """Why the Job's newest live pod does not start; with no pod, why none was created."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") in (None, "Pending")]
    live.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    for pod in live:
        name = str(pod["metadata"]["name"])
        waiting = _waiting(pod)
        if waiting is not None:
            container, why, detail = waiting
            reason = r.IMAGE_PULL_FAILED if why in PULL_FAILURES else r.POD_NOT_STARTING
            said = f"pod {name}: container {container}: {why}: {detail}".rstrip(": ")
            return Stall(reason, _cut(said), name)
        verdict = unschedulable(pod)
        if verdict is not None:
            return Stall(r.UNSCHEDULABLE, _cut(f"pod {name}: {verdict}"), name)
    if pods:
        return None  # a pod exists and nothing holds it (yet): being scheduled, pulling, starting
    refused = [e for e in events if e.get("reason") == "FailedCreate"]
    if not refused:
        return None
    last = max(refused, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    message = str(last.get("message", "")).strip()
    return Stall(refusal_reason(message), _cut(message))


# The LimitRanger admission plugin's words: "maximum memory usage per Container is 1Gi, but
# limit is 4Gi", "minimum cpu usage per Pod is ...", "cpu max limit to request ratio per
# Container is 2, but provided ratio is 4.000000".
LIMIT_RANGE_SAYS = re.compile(r"(maximum|minimum) \S+ usage per \w+ is|limit to request ratio per")


def refusal_reason(message: str) -> str:
    """Who refused a pod, from the API server's message: a ResourceQuota (which its message
    names: "exceeded quota: NAME"), a LimitRange, or another admission check."""
    if "exceeded quota" in message:
        return r.QUOTA_EXCEEDED
    if LIMIT_RANGE_SAYS.search(message):
        return r.LIMIT_RANGE_EXCEEDED
    return r.ADMISSION_REFUSED


def _cut(text: str) -> str:
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."


@dataclasses.dataclass(frozen=True)
class Context:
    """What the fix names: the deployment's claim, GPU product and namespace."""

    namespace: str
    claim: str
    gpu_product: str | None  # None for a pod that needs no GPU (the repository Job)
    # The pod's requests come from spec.podTemplate.resources (False: the repository Job's own,
    # small and fixed).
    spec_resources: bool = True


def fixes(stall: Stall, ctx: Context) -> list[str]:
    """What to do about a stall, most specific first."""
    said = stall.said.lower()
    describe = f"`kubectl describe pod {stall.pod} -n {ctx.namespace}` says more"
    if stall.reason == r.IMAGE_PULL_FAILED:
        return [
            "check the image name and tag (spec.image; the tools image is the operator's "
            "--tools-image) and spec.podTemplate.imagePullSecrets for a private registry"
        ]
    if stall.reason == r.POD_NOT_STARTING:
        return [f"a Secret, ConfigMap or volume the pod needs is missing: {describe}"]
    if stall.reason == r.QUOTA_EXCEEDED:
        if not ctx.spec_resources:
            return [f"raise the namespace's ResourceQuota (this pod asks for {FIXED_REQUESTS})"]
        return ["raise the namespace's ResourceQuota or lower spec.podTemplate.resources"]
    if stall.reason == r.LIMIT_RANGE_EXCEEDED:
        within = "keep spec.podTemplate.resources within" if ctx.spec_resources else (
            f"this pod asks for {FIXED_REQUESTS}: it must fit")
        return [
            f"{within} the namespace's LimitRange (`kubectl describe limitrange -n "
            f"{ctx.namespace}` lists them), or have it changed"
        ]
    if stall.reason == r.ADMISSION_REFUSED:
        return ["change what the message names, or ask the cluster's administrators"]
    out: list[str] = []
    if "persistentvolumeclaim" in said or "persistent volume" in said or "volume node" in said:
        out.append(
            f"the model-store claim {ctx.claim} (spec.storage.claimName) is not bound: "
            f"`kubectl describe pvc {ctx.claim} -n {ctx.namespace}` says why (no default "
            "StorageClass? set spec.storage.create.storageClassName, or create a "
            "PersistentVolume for the claim)"
        )
    if "node affinity/selector" in said:
        where = f"{c.GPU_PRODUCT_LABEL}={ctx.gpu_product} (spec.gpu.product) and " \
            if ctx.gpu_product else ""
        out.append(
            f"no node matches {where}spec.podTemplate.nodeSelector: check "
            f"`kubectl get nodes -L {c.GPU_PRODUCT_LABEL}`"
        )
    if "insufficient nvidia.com/gpu" in said:
        out.append(
            "not enough free GPUs of spec.gpu.product: wait for other pods to finish, add nodes, "
            "or lower spec.engine.parallelism"
        )
    if "insufficient cpu" in said or "insufficient memory" in said:
        out.append("lower spec.podTemplate.resources, or add nodes")
    if "untolerated taint" in said:
        out.append("add the taint's toleration to spec.podTemplate.tolerations")
    return out or [describe]


def explain(stall: Stall, job: str, what: str, ctx: Context) -> str:
    """The condition message: the Job, what holds its pod (quoted), and the fix."""
    head = f"Job {job} cannot start its {what} pod"
    if stall.reason in (r.QUOTA_EXCEEDED, r.LIMIT_RANGE_EXCEEDED, r.ADMISSION_REFUSED):
        head = f"Job {job} cannot create its {what} pod"
    return f"{head}: {stall.said.rstrip('. ')}; " + "; ".join(fixes(stall, ctx))
