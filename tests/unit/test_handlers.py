"""kopf registration facts the operator's behaviour depends on."""

from __future__ import annotations

import asyncio

import kopf
import pytest

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


def test_a_child_with_thousands_of_owner_references_asks_for_the_passes_of_existing_owners_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Job labelled as ours is anyone's to create: one naming 5,000 TritonLLMDeployments as
    owners must not start 5,000 passes per watch event, only those of deployments that exist."""
    from tests.fake_kube import FakeKube
    from tritonllm.api import constants as c
    from tritonllm.api.settings import OperatorSettings
    from tritonllm.handlers import cache as cache_module
    from tritonllm.handlers.reconciler import Reconciler

    dep = {"apiVersion": c.API_VERSION, "kind": c.KIND,
           "metadata": {"name": "real", "namespace": "ns", "uid": "u1"}}
    index = {("ns", "real"): [cache_module.project_deployment(dep)]}
    rec = Reconciler(FakeKube([]), OperatorSettings(),
                     cache_module.Cache({cache_module.BY_NAME[c.KIND].id: index}))
    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(rec, "request", lambda ns, name: asked.append((ns, name)))
    monkeypatch.setitem(operator._state, "reconciler", rec)
    owners = [{"apiVersion": c.API_VERSION, "kind": c.KIND, "name": f"d{i}", "uid": f"x{i}"}
              for i in range(5_000)]
    owners.append({"apiVersion": c.API_VERSION, "kind": c.KIND, "name": "real", "uid": "u1"})
    job = kopf.Body({"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "planted", "namespace": "ns", "uid": "j",
                                  "labels": {c.LABEL_MANAGED_BY: c.APP_NAME},
                                  "ownerReferences": owners}})
    asyncio.run(operator.job_event(event={"type": "ADDED"}, body=job, namespace="ns"))
    assert asked == [("ns", "real")]
