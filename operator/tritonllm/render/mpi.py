"""The per-deployment Secret of the multi-node MPI bootstrap (docs/in-pod.md).

It holds an SSH client key pair and a host key pair: random, so the operator creates it once and
never re-applies it; owned by the deployment. Only that deployment's pods mount it.
"""

from __future__ import annotations

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment

from . import naming
from .manifest import Manifest
from .pod import owner_references


def mpi_secret(dep: TritonLLMDeployment, keys: dict[str, str]) -> Manifest:
    """The `<name>-mpi-ssh` Secret with `keys` (file name -> OpenSSH text) as stringData."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": naming.mpi_secret_name(dep),
            "namespace": dep.namespace,
            "labels": naming.base_labels(dep, c.COMPONENT_SERVER),
            "ownerReferences": owner_references(dep),
        },
        "stringData": keys,
    }
    return Manifest.of(body)
