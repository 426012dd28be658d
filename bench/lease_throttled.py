"""Seconds until a leader notices a lost Lease when the API server throttles: every renewal is
answered 429 with Retry-After: 3, the default 6 s Lease (renew deadline 4 s), the client built as
`tritonllm run` builds it. A local Lease API; figures, not pass/fail:

    python -m bench.lease_throttled                                  # this tree
    PYTHONPATH=<other checkout>/operator python -m bench.lease_throttled
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import tempfile
import time
from typing import Any

import yaml
from aiohttp import web

from tritonllm.k8s import lease as leases
from tritonllm.k8s.client import Kube

RETRY_AFTER = "3"
DURATION = 6.0
state: dict[str, Any] = {"lease": None, "throttle": False, "written": []}


async def handle(request: web.Request) -> web.Response:
    body = await request.text()
    if state["throttle"]:
        return web.json_response({"kind": "Status", "reason": "TooManyRequests"}, status=429,
                                 headers={"Retry-After": RETRY_AFTER})
    if request.method == "GET":
        return web.json_response(state["lease"] or {}, status=200 if state["lease"] else 404)
    new = json.loads(body)
    new["metadata"]["resourceVersion"] = str(len(state["written"]) + 1)
    state["lease"] = new
    state["written"].append(time.monotonic())
    return web.json_response(new)


def kubeconfig(port: int) -> str:
    path = pathlib.Path(tempfile.mkdtemp()) / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {}}]}))
    return str(path)


async def main() -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = kubeconfig(port)
    if hasattr(leases, "lease_client"):
        kube = leases.lease_client(config, DURATION)
    else:  # how `tritonllm run` built the Lease's client before it had its own
        kube = Kube.from_kubeconfig(config, concurrency=2, timeout=DURATION / 3)
    lease = leases.LeaderLease(kube, "ops", "tritonllm", "a", duration=DURATION)
    assert await lease.try_acquire()
    state["throttle"] = True
    start = time.monotonic()
    try:
        await lease.keep()
    except leases.LeaseLost as exc:
        now = time.monotonic()
        print(f"LeaseLost after {now - start:.2f} s from keep()'s start, "
              f"{now - state['written'][-1]:.2f} s after the last renewal "
              f"(renew deadline {lease.renew_deadline:.1f} s): {exc}")
    finally:
        await kube.close()
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
