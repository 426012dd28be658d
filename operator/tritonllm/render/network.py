"""Who may reach a deployment's endpoint: the sources every NetworkPolicy in front of its model
admits. The serving pods' policy (serving.network_policy) and, when the deployment scales to
zero, the activator's (autoscaling.activator_network_policy) both read them here, so the pods
the Service selects admit the same clients whichever they are.
"""

from __future__ import annotations

from typing import Any

from tritonllm.api.deployment import TritonLLMDeployment

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def sources(dep: TritonLLMDeployment) -> list[dict[str, Any]]:
    """The pods of the deployment's namespace, those of `networkPolicy.fromNamespaces`, and the
    addresses of `networkPolicy.fromCidrs`."""
    np = dep.spec.networkPolicy
    found: list[dict[str, Any]] = [{"podSelector": {}}]
    if np.fromNamespaces:
        found.append({
            "namespaceSelector": {
                "matchExpressions": [{
                    "key": NAMESPACE_NAME_LABEL,
                    "operator": "In",
                    "values": list(np.fromNamespaces),
                }],
            },
        })
    found += [{"ipBlock": {"cidr": cidr}} for cidr in np.fromCidrs]
    return found
