"""Our finalizer, and what the pass that sees a deletion does.

Only storage.engineRetention Delete needs a finalizer (to forget engines when the deployment goes);
with the default Retain the object has none, so nothing can block its deletion. Children carry
owner references and are collected by Kubernetes.
"""

from __future__ import annotations

from tritonllm.api import constants as c
from tritonllm.api.engine import ENGINE_KEY_LENGTH, is_engine_key

from .observed import Obj

FINALIZER = f"{c.GROUP}/engine-cleanup"
# The Warning Event when the key in status is not an engine key: nothing is deleted.
UNSAFE_ENGINE_KEY = "UnsafeEngineKey"


def finalizers_for(body: Obj, want: bool) -> list[str] | None:
    """The finalizers list with ours added or removed as `want` says; None if already right."""
    current = list(body["metadata"].get("finalizers") or [])
    if (FINALIZER in current) == want:
        return None
    return [*current, FINALIZER] if want else [f for f in current if f != FINALIZER]


def engine_to_forget(body: Obj) -> tuple[str | None, str | None]:
    """(the engine key in status.engine to forget on deletion, why none is although one is
    named). The key becomes a path in the cleanup Job's `rm -rf`: anything that is not exactly
    an engine key (lowercase hex, fixed length) is refused, whoever wrote the status."""
    key = ((body.get("status") or {}).get("engine") or {}).get("key")
    if key is None or key == "":
        return None, None
    if not is_engine_key(key):
        return None, (
            f"status.engine.key {str(key)[:80]!r} is not an engine key ({ENGINE_KEY_LENGTH} "
            "lowercase hex digits): no engine record or files were deleted"
        )
    return key, None


def plan_deletion(body: Obj, users_of_engine: list[str]) -> tuple[bool, list[str]]:
    """On deletion with our finalizer: (forget the engine record?, the new finalizers list).

    The engine record goes only when no other deployment uses its key. The finalizer is released
    in the same pass whatever happens, so deletion is never blocked on the cleanup.
    """
    name = body["metadata"]["name"]
    others = [u for u in users_of_engine if u != name]
    return not others, [f for f in body["metadata"].get("finalizers") or [] if f != FINALIZER]
