"""kopf registration facts the operator's behaviour depends on."""

from __future__ import annotations

import kopf

from tritonllm.handlers import operator


def test_no_handler_puts_a_finalizer_on_every_object() -> None:
    """Only engineRetention Delete may add a finalizer (ours, from the reconciler): kopf must not
    add one for the resync timer or any other handler."""
    registry = kopf.get_default_registry()
    spawning = registry._spawning.get_all_handlers()
    assert any(h.fn is operator.resync for h in spawning)
    assert not any(h.requires_finalizer for h in spawning)
    assert not any(h.requires_finalizer for h in registry._changing.get_all_handlers())
