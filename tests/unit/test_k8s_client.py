"""tritonllm.k8s: the API client over aiohttp, against a small HTTP stand-in for the API server,
and the credentials it reads from a kubeconfig (the cluster tier runs it against a real one)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from tritonllm.api import constants as c
from tritonllm.k8s import auth
from tritonllm.k8s.client import (
    API_CALLS,
    API_THROTTLED,
    CONVERGE,
    MAX_THROTTLED_RETRIES,
    REPORT,
    RETRY_AFTER_DEFAULT_SECONDS,
    RETRY_AFTER_MAX_SECONDS,
    Kube,
    KubeError,
    Slots,
    retry_after_seconds,
)
from tritonllm.render import Manifest

CM = Manifest.of({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "cm", "namespace": "ns"}, "data": {"a": "b"}})


def kubeconfig(tmp: Path, server: str, user: dict[str, Any]) -> Path:
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
    }))
    return path


class Server:
    """Records requests; answers with what the test set for (method, path)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: dict[tuple[str, str], tuple[int, Any]] = {}
        self.in_flight = 0
        self.most_in_flight = 0
        self.delay = 0.0

    async def handle(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            body = await request.text()
            self.requests.append({
                "method": request.method, "path": request.path, "query": dict(request.query),
                "type": request.headers.get("Content-Type"),
                "auth": request.headers.get("Authorization"),
                "body": json.loads(body) if body else None,
            })
            status, reply = self.replies.get((request.method, request.path), (200, {"ok": True}))
            return web.json_response(reply, status=status)
        finally:
            self.in_flight -= 1


async def serve(server: Server) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def test_writes_are_server_side_applies_with_our_field_manager(tmp_path: Path) -> None:
    server = Server()
    path = "/api/v1/namespaces/ns/configmaps/cm"
    server.replies[("POST", "/api/v1/namespaces/ns/configmaps")] = (
        409, {"kind": "Status", "reason": "AlreadyExists", "message": "exists"})
    server.replies[("DELETE", path)] = (404, {"kind": "Status", "reason": "NotFound"})

    async def main() -> None:
        runner, url = await serve(server)
        kube = Kube.from_kubeconfig(str(kubeconfig(tmp_path, url, {"token": "t0"})))
        try:
            before = API_CALLS.labels("apply", "ConfigMap")._value.get()
            assert await kube.apply(CM) == {"ok": True}
            assert API_CALLS.labels("apply", "ConfigMap")._value.get() == before + 1
            assert await kube.create(CM) is None  # 409: it exists
            assert await kube.delete("v1", "ConfigMap", "ns", "cm") is False  # 404: gone
            server.replies[("PATCH", path)] = (
                422, {"kind": "Status", "reason": "Invalid", "message": "field is immutable"})
            with pytest.raises(KubeError) as exc:
                await kube.apply(CM)
            assert (exc.value.status, exc.value.reason) == (422, "Invalid")
            assert "immutable" in exc.value.message
        finally:
            await kube.close()
            await runner.cleanup()

    asyncio.run(main())
    apply = server.requests[0]
    assert (apply["method"], apply["path"]) == ("PATCH", "/api/v1/namespaces/ns/configmaps/cm")
    assert apply["type"] == "application/apply-patch+yaml"
    assert apply["query"] == {"fieldManager": c.FIELD_MANAGER, "force": "true"}
    assert apply["auth"] == "Bearer t0" and apply["body"] == CM.body


def test_at_most_concurrency_requests_are_in_flight(tmp_path: Path) -> None:
    server = Server()
    server.delay = 0.05

    async def main() -> None:
        runner, url = await serve(server)
        kube = Kube.from_kubeconfig(str(kubeconfig(tmp_path, url, {})), concurrency=3)
        try:
            await asyncio.gather(*(kube.apply(CM) for _ in range(12)))
        finally:
            await kube.close()
            await runner.cleanup()

    asyncio.run(main())
    assert len(server.requests) == 12 and server.most_in_flight == 3


def test_kubeconfig_certificates_tokens_and_exec_plugins(tmp_path: Path) -> None:
    data = {"client-key-data": base64.b64encode(b"key").decode()}
    path = auth._file(data, "client-key", tmp_path)
    assert path is not None and Path(path).read_bytes() == b"key"
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    assert auth._file({"certificate-authority": "ca.crt"}, "certificate-authority",
                      tmp_path) == str(tmp_path / "ca.crt")  # relative to the kubeconfig

    token = tmp_path / "token"
    token.write_text("first\n")
    creds = auth.from_kubeconfig(kubeconfig(tmp_path, "http://x", {"tokenFile": "token"}))
    assert creds.authorization() == "Bearer first"

    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json\nprint(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'from-exec', "
        "'expirationTimestamp': '2999-01-01T00:00:00Z'}}))\n")
    user = {"exec": {"command": sys.executable, "args": [str(plugin)],
                     "apiVersion": "client.authentication.k8s.io/v1"}}
    creds = auth.from_kubeconfig(kubeconfig(tmp_path, "http://x", user))
    assert creds.authorization() == "Bearer from-exec"


def test_in_a_pod_the_service_account_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    calls: list[str] = []
    monkeypatch.setattr(auth, "in_cluster", lambda: calls.append("sa") or "sa-creds")
    assert auth.load_credentials() == "sa-creds" and calls == ["sa"]
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(auth.ConfigError):
        auth.load_credentials()


def test_waiting_requests_that_converge_go_before_those_that_report(tmp_path: Path) -> None:
    server = Server()
    server.delay = 0.05
    status = Manifest.of({"apiVersion": c.API_VERSION, "kind": c.KIND,
                          "metadata": {"name": "d", "namespace": "ns"}, "status": {}})

    async def main() -> None:
        runner, url = await serve(server)
        kube = Kube.from_kubeconfig(str(kubeconfig(tmp_path, url, {})), concurrency=1)
        try:
            first = asyncio.create_task(kube.apply(CM))  # holds the only slot
            await asyncio.sleep(0.01)
            report = asyncio.create_task(kube.apply_status(status))  # waits first...
            event = asyncio.create_task(kube.post_event(CM))
            await asyncio.sleep(0.01)
            converge = asyncio.create_task(kube.delete("v1", "ConfigMap", "ns", "old"))
            await asyncio.gather(first, report, event, converge)
        finally:
            await kube.close()
            await runner.cleanup()

    asyncio.run(main())
    order = [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in server.requests]
    # ...but the deletion (it makes the cluster converge) is served before the status and Event.
    assert order == [("PATCH", "cm"), ("DELETE", "old"), ("PATCH", "status"),
                     ("POST", "events")]


def served(slots: Slots, converging: int, in_flight: float) -> list[str]:
    """The order in which one status write, then `converging` applies (all waiting for the one
    slot, each `in_flight` seconds once served), get the slot."""
    order: list[str] = []

    async def main() -> None:
        await slots.acquire(CONVERGE)  # the one slot, taken

        async def request(name: str, priority: int) -> None:
            await slots.acquire(priority)
            order.append(name)
            await asyncio.sleep(in_flight)
            slots.release()

        tasks = [asyncio.create_task(request("status", REPORT))]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(request(f"apply{i}", CONVERGE))
                  for i in range(converging)]
        await asyncio.sleep(0)
        slots.release()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return order


def test_a_report_waits_behind_converging_requests_only_so_long() -> None:
    """A burst of converging writes does not starve a status write: once it has waited its
    patience, it is served next (then the converging ones go on first)."""
    order = served(Slots(1, patience=0.2), 8, 0.06)
    # apply0..apply2 (0.18 s) before the status is 0.2 s old, then the status, then the rest
    assert order.index("status") in (3, 4), order
    assert [x for x in order if x != "status"] == [f"apply{i}" for i in range(8)]


def test_without_patience_reports_wait_for_every_converging_request() -> None:
    assert served(Slots(1), 5, 0.02)[-1] == "status"


class Throttling:
    """An API server that answers 429 Too Many Requests with `retry_after` to the first
    `throttled` requests, then 200."""

    def __init__(self, throttled: int, retry_after: str | None) -> None:
        self.throttled = throttled
        self.retry_after = retry_after
        self.times: list[float] = []

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.times.append(time.monotonic())
        if len(self.times) <= self.throttled:
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return web.json_response(
                {"kind": "Status", "reason": "TooManyRequests", "message": "too many requests"},
                status=429, headers=headers)
        return web.json_response({"ok": True})


async def serve_throttling(server: Throttling) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def test_a_429_is_sent_again_after_its_retry_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = Throttling(throttled=1, retry_after="1")
    throttled = API_THROTTLED.labels("apply", "ConfigMap")

    async def main() -> Any:
        runner, url = await serve_throttling(server)
        kube = Kube.from_kubeconfig(str(kubeconfig(tmp_path, url, {})))
        try:
            return await kube.apply(CM)
        finally:
            await kube.close()
            await runner.cleanup()

    before = throttled._value.get()
    with caplog.at_level(logging.WARNING, logger="tritonllm.k8s.client"):
        assert asyncio.run(main()) == {"ok": True}
    assert len(server.times) == 2
    assert server.times[1] - server.times[0] >= 1.0  # the header's second, honoured
    assert throttled._value.get() == before + 1  # tritonllm_api_throttled_total
    assert "429 Too Many Requests" in caplog.text and "in 1.0 s" in caplog.text


def test_a_request_throttled_every_time_fails_after_the_last_retry(tmp_path: Path) -> None:
    server = Throttling(throttled=100, retry_after="0")

    async def main() -> None:
        runner, url = await serve_throttling(server)
        kube = Kube.from_kubeconfig(str(kubeconfig(tmp_path, url, {})))
        try:
            with pytest.raises(KubeError) as exc:
                await kube.create(CM)
            assert (exc.value.status, exc.value.reason) == (429, "TooManyRequests")
        finally:
            await kube.close()
            await runner.cleanup()

    asyncio.run(main())
    assert len(server.times) == 1 + MAX_THROTTLED_RETRIES


def test_a_client_without_throttled_retries_returns_the_429_at_once(tmp_path: Path) -> None:
    """The Lease's client: a renewal must end within its deadline, so a 429 is the call's error
    (sent once, no wait for Retry-After) and the renew loop decides when to try again."""
    server = Throttling(throttled=100, retry_after="3")

    async def main() -> float:
        runner, url = await serve_throttling(server)
        kube = Kube.from_kubeconfig(str(kubeconfig(tmp_path, url, {})), throttled_retries=0)
        started = time.monotonic()
        try:
            with pytest.raises(KubeError) as exc:
                await kube.get("coordination.k8s.io/v1", "Lease", "ops", "tritonllm")
            assert exc.value.status == 429
            return time.monotonic() - started
        finally:
            await kube.close()
            await runner.cleanup()

    assert asyncio.run(main()) < 1.0  # not the 3 s of Retry-After
    assert len(server.times) == 1


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("1", 1.0),
        ("2.5", 2.5),
        ("0", 0.0),
        ("-3", 0.0),
        ("3600", RETRY_AFTER_MAX_SECONDS),
        ("1e999", RETRY_AFTER_MAX_SECONDS),
        ("nan", RETRY_AFTER_DEFAULT_SECONDS),
        (None, RETRY_AFTER_DEFAULT_SECONDS),
        ("", RETRY_AFTER_DEFAULT_SECONDS),
        ("soon", RETRY_AFTER_DEFAULT_SECONDS),
        ("Sun, 22 Nov 2026 09:00:07 GMT", 7.0),
        ("Sun, 22 Nov 2026 08:59:00 GMT", 0.0),
    ],
)
def test_retry_after_is_read_and_bounded(header: str | None, seconds: float) -> None:
    now = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)
    assert retry_after_seconds(header, now=now) == pytest.approx(seconds)
