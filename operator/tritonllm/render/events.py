"""core/v1 Events about a TritonLLMDeployment (posted when a condition flips)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from tritonllm.api import constants as c

from .manifest import Manifest

MAX_MESSAGE = 1024


def event(
    involved: Mapping[str, Any], *, type_: str, reason: str, message: str, now: dt.datetime
) -> Manifest:
    """An Event about `involved` (the live object, for its uid and resourceVersion)."""
    meta = involved["metadata"]
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": c.APP_NAME},
        "reportingComponent": c.APP_NAME,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    # generateName: the server picks the name.
    return Manifest("v1", "Event", "", meta["namespace"], body)
