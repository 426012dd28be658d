"""The per-deployment Secret of the multi-node MPI bootstrap (docs/in-pod.md).

It holds an SSH client key pair and a host key pair (ed25519, OpenSSH format, readable by every
OpenSSH in Triton images), made with the `cryptography` package: no `ssh-keygen` in the operator
image, no subprocess. The keys are random, so the operator creates the Secret once and never
re-applies it (`ssh_key_pairs` is the one non-deterministic function of this package); it is
owned by the deployment, and only that deployment's pods mount it.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment

from . import naming
from .manifest import Manifest
from .pod import owner_references


def ssh_key_pairs(comment: str = "tritonllm-mpi") -> dict[str, str]:
    """Fresh client and host key pairs: Secret key (file name) -> OpenSSH text."""
    out: dict[str, str] = {}
    for private, public in (
        (c.MPI_SSH_CLIENT_KEY, c.MPI_SSH_CLIENT_PUB),
        (c.MPI_SSH_HOST_KEY, c.MPI_SSH_HOST_PUB),
    ):
        key = Ed25519PrivateKey.generate()
        out[private] = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()
        pub = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        out[public] = f"{pub.decode()} {comment}\n"
    return out


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
