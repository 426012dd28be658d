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


def test_kopf_builds_no_diff_base_because_nothing_reads_it() -> None:
    """kopf would deep-copy every watched object's body on every event to diff it for change
    handlers and idle daemons; the operator registers neither, so its storage keeps nothing."""
    registry = kopf.get_default_registry()
    assert registry._changing.get_all_handlers() == []
    # The one spawning handler is the schedule's daemon, which never idles (only timers do).
    assert [h.fn for h in registry._spawning.get_all_handlers()] == [operator.resync]
    body = kopf.Body({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "repo", "namespace": "ns", "labels": {"a": "b"},
                     "annotations": {"c": "d"}},
        "data": {"config.pbtxt": "x" * 100_000},
    })
    storage = operator.NoDiffBase()
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None


def test_tls_connections_read_into_small_buffers() -> None:
    """Every TLS connection's read buffer stays resident while it is open: the operator's are
    32 KiB, not asyncio's 256 KiB (tritonllm.handlers.operator.TLS_READ_BUFFER)."""
    import asyncio.sslproto

    from tritonllm.handlers import operator

    assert asyncio.sslproto.SSLProtocol.max_size == operator.TLS_READ_BUFFER == 32 * 1024


def test_kopfs_line_per_handled_event_is_not_logged_unless_debugging() -> None:
    import logging

    from tritonllm.handlers import logs

    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger(logs.KOPF_OBJECTS).level)
    try:
        logs.setup("INFO", "text")
        objects = logging.getLogger(logs.KOPF_OBJECTS)
        assert not objects.isEnabledFor(logging.INFO)  # "Handler 'pod_event' succeeded."
        assert objects.isEnabledFor(logging.WARNING)
        assert logging.getLogger("tritonllm.reconcile").isEnabledFor(logging.INFO)
        logs.setup("DEBUG", "text")
        assert objects.isEnabledFor(logging.DEBUG)
    finally:
        root.handlers[:], level, objects_level = saved
        root.setLevel(level)
        logging.getLogger(logs.KOPF_OBJECTS).setLevel(objects_level)
