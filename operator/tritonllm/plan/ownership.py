"""Ownership: the operator changes and deletes only objects it created. Pure.

An object is the deployment's when it carries the operator's managed-by label and an owner
reference to the deployment's uid. Objects shared by the deployments of one engine key (the build
Job and its plan ConfigMap: several owners, none the controller) need only the label. Anything
else with a name the deployment needs (a Service that was there first, the cluster's own
`kubernetes` Service, a Secret someone planted under the MPI key Secret's name) is a name
conflict: nothing is applied to it, nothing deletes it, and the deployment says which object is
in the way (Degraded, reason NameConflict) until it is renamed or removed.

What the watches show is checked here, before any write; an object the watches cannot show
(one without our label) is found by the executor's read before it creates an object
(`tritonllm.handlers.execute`), which reports it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonllm.api import constants as c
from tritonllm.render import Manifest

from .observed import Observed
from .writes import Plan


def is_ours(live: Mapping[str, Any], uid: str, *, shared: bool = False) -> bool:
    """Whether a live object was created for the deployment with this uid."""
    meta = live.get("metadata") or {}
    if (meta.get("labels") or {}).get(c.LABEL_MANAGED_BY) != c.APP_NAME:
        return False
    if shared:
        return True
    return bool(uid) and uid in {r.get("uid") for r in meta.get("ownerReferences") or []}


def is_shared(obj: Manifest) -> bool:
    """Objects of an engine key (owned by all its deployments, controlled by none)."""
    refs = obj.body["metadata"].get("ownerReferences") or []
    return bool(refs) and not any(r.get("controller") for r in refs)


def is_shared_live(live: Mapping[str, Any]) -> bool:
    """A live object of an engine key (its labels name the key and no deployment)."""
    labels = (live.get("metadata") or {}).get("labels") or {}
    return c.LABEL_ENGINE_KEY in labels and c.LABEL_INSTANCE not in labels


def conflict_message(kind: str, name: str, live: Mapping[str, Any] | None = None) -> str:
    """Which object is in the way, whose it looks like, and the fix."""
    meta = (live or {}).get("metadata") or {}
    owners = ", ".join(
        f"{r.get('kind', '?')}/{r.get('name', '?')}" for r in meta.get("ownerReferences") or []
        if r.get("name")
    )
    by = (meta.get("labels") or {}).get(c.LABEL_MANAGED_BY)
    whose = f" (owned by {owners})" if owners else (f" (managed by {by})" if by else "")
    return (
        f"{kind}/{name} already exists and was not created by this TritonLLMDeployment{whose}; "
        "the operator neither adopts nor changes it: rename the deployment, or delete or "
        f"rename that {kind}"
    )


def conflicts(p: Plan, obs: Observed, uid: str) -> list[str]:
    """Messages for every planned write or deletion that would touch another's object."""
    out = list(obs.foreign)
    for obj in p.apply:
        live = obs.live.get(obj.ref)
        if live is not None and not is_ours(live, uid, shared=is_shared(obj)):
            out.append(conflict_message(obj.kind, obj.name, live))
    for _, kind, name in p.delete:
        live = obs.live.get((kind, name))
        if live is not None and not is_ours(live, uid, shared=is_shared_live(live)):
            out.append(conflict_message(kind, name, live))
    return out
