"""The model-store PersistentVolumeClaim, when the spec asks the operator to create it.

The claim is shared (every deployment naming it shares its engine cache) and holds data users
paid GPU hours for, so it has no owner: deleting a deployment never deletes it.
"""

from __future__ import annotations

from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment


def pvc(dep: TritonLLMDeployment) -> dict[str, Any] | None:
    st = dep.spec.storage
    if st.create is None:
        return None
    spec: dict[str, Any] = {
        "accessModes": list(st.create.accessModes),
        "resources": {"requests": {"storage": st.create.size}},
    }
    if st.create.storageClassName:
        spec["storageClassName"] = st.create.storageClassName
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": st.claimName,
            "namespace": dep.namespace,
            "labels": {
                c.LABEL_NAME: c.APP_NAME,
                c.LABEL_COMPONENT: c.COMPONENT_STORE,
                c.LABEL_MANAGED_BY: c.APP_NAME,
            },
            "annotations": {f"{c.GROUP}/created-for": dep.name},
        },
        "spec": spec,
    }
