"""kopf's peering object, made sure of before the operator starts.

kopf's peering (leader election between operator replicas, docs/operator.md) keeps each replica
paused until it has read its peering object: a KopfPeering in each watched namespace, or one
ClusterKopfPeering for a cluster-wide operator. Without the object a replica waits forever and
says nothing. So `tritonllm run` (unless --standalone) looks for it first and

- finds it: nothing to do (the chart creates it, and its RBAC grants no `create`);
- does not find it and may create it: creates it (an empty object; kopf fills its status);
- may not create it, or its CRD is not installed: refuses to start, with one line naming the
  object and the two ways out (create it, or run with --standalone).

On a clean stop the replica also takes its own record out of the object (`leave_peering`), as
soon as its last pass is over: kopf's own removal on exit is given up when its shutdown cancels
it a second time, which a slow API server makes likely, and the paused peers then wait for the
record to expire (kopf's peering lifetime, 60 s) before one takes over.
"""

from __future__ import annotations

import json
import logging

from .client import PEERING_API_VERSION as API_VERSION
from .client import Kube, KubeError
from .lease import RETRIED, said

log = logging.getLogger(__name__)

NAMESPACED = "KopfPeering"
CLUSTER = "ClusterKopfPeering"
CRD_FILES = {NAMESPACED: "kopf.dev_kopfpeerings.yaml", CLUSTER: "kopf.dev_clusterkopfpeerings.yaml"}


class PeeringMissing(RuntimeError):
    """The peering object is missing and cannot be created: the message is the one line to show."""


class _Peering:
    """The object as tritonllm.k8s.client.Kube.create sends it."""

    api_version = API_VERSION

    def __init__(self, name: str, namespace: str | None) -> None:
        self.kind = NAMESPACED if namespace else CLUSTER
        self.name = name
        self.namespace = namespace
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        self.body = {"apiVersion": API_VERSION, "kind": self.kind, "metadata": meta}

    def what(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.kind} {self.name!r}{where}"

    def ways_out(self) -> str:
        one_line = json.dumps({**self.body, "metadata": {"name": self.name}},
                              separators=(",", ":"))
        ns = f" -n {self.namespace}" if self.namespace else ""
        return (f"create it (echo '{one_line}' | kubectl apply{ns} -f -), or run with "
                "--standalone (one replica, no peering)")


async def ensure_peering(kube: Kube, name: str, namespaces: list[str]) -> list[str]:
    """Make sure the peering object of every watched namespace (or the cluster-wide one) exists;
    returns what was created (for the log). Raises PeeringMissing when one cannot be had."""
    created = []
    scopes: list[str | None] = list(namespaces) or [None]
    for namespace in scopes:
        peering = _Peering(name, namespace)
        try:
            found = await kube.get(API_VERSION, peering.kind, namespace, name)
        except KubeError as exc:
            raise PeeringMissing(
                f"cannot read {peering.what()} ({exc.status} {exc.reason}: "
                f"{exc.message.strip()}): grant get, list, watch and patch on it (the chart "
                "does), or run with --standalone (one replica, no peering)"
            ) from exc
        if found is not None:
            continue
        try:
            if await kube.create(peering):
                created.append(peering.what())
        except KubeError as exc:
            raise PeeringMissing(_refusal(peering, exc)) from exc
    return created


def _refusal(peering: _Peering, exc: KubeError) -> str:
    """One line: which object, why it cannot be created, and the two ways out."""
    if exc.status == 404 and "could not find the requested resource" in exc.message:
        crd = CRD_FILES[peering.kind]
        return (f"kopf peering needs {peering.what()}, and its CustomResourceDefinition is not "
                f"installed: kubectl apply -f crds/{crd} (the chart installs it) and run again, "
                "or run with --standalone (one replica, no peering)")
    why = "may not create it" if exc.status == 403 else "cannot create it"
    return (f"{peering.what()} does not exist and this operator {why} ({exc.status} "
            f"{exc.reason}: {exc.message.strip()}); without it every replica stays paused: "
            f"{peering.ways_out()}")


async def leave_peering(kube: Kube, name: str, namespaces: list[str], identity: str) -> list[str]:
    """Take this replica's record out of its peering objects (kopf keeps one per replica under
    `status`, keyed by its identity): each paused peer sees the change and the one with the
    highest priority resumes at once. Returns what was left (for the log); a failure is logged,
    and the peers then take over when the record expires."""
    left = []
    scopes: list[str | None] = list(namespaces) or [None]
    for namespace in scopes:
        peering = _Peering(name, namespace)
        try:
            await kube.merge_patch(API_VERSION, peering.kind, namespace, name,
                                   {"status": {identity: None}})
            left.append(peering.what())
        except RETRIED as exc:
            log.warning("could not leave %s (%s): the peers take over when this replica's "
                        "record expires", peering.what(), said(exc))
    return left
