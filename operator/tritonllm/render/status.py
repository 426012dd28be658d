"""Status objects: what a server-side apply of the status subresource sends.

The operator owns the status of its two kinds (TritonLLMDeployment, TritonLLMEngine) under its
field manager; the body names the object and carries only `status`.
"""

from __future__ import annotations

from typing import Any

from tritonllm.api import constants as c

from .manifest import Manifest


def status_object(kind: str, namespace: str, name: str, status: dict[str, Any]) -> Manifest:
    """The status apply body of one of our objects (kind: KIND or ENGINE_KIND)."""
    body = {
        "apiVersion": c.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    }
    return Manifest.of(body)
