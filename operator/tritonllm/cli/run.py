"""`tritonllm run`: start the operator.

Kubeconfig from --kubeconfig or KUBECONFIG, else the in-cluster service account. Settings from
TRITONLLM_* environment variables (tritonllm.api.settings), with flags overriding them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import random
import sys
from collections.abc import AsyncIterator
from typing import Any, cast

from tritonllm.api.settings import OperatorSettings


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the operator")
    p.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig file (default: $KUBECONFIG, else in-cluster)",
    )
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        help="watch only this namespace (repeatable; default: all)",
    )
    p.add_argument(
        "--standalone",
        action="store_true",
        help="no peering (a single operator replica, e.g. for development)",
    )
    p.add_argument(
        "--leader-election",
        metavar="LEASE",
        help="elect the acting replica with this coordination.k8s.io Lease instead of kopf "
        "peering (failover in seconds; TRITONLLM_LEADER_ELECTION)",
    )
    p.add_argument("--metrics-port", type=int, help="Prometheus /metrics port (0: off)")
    p.add_argument("--health-port", type=int, help="/healthz port (0: off)")
    p.add_argument("--bind-address", help="address for metrics and health endpoints")
    p.add_argument("--log-format", choices=["json", "text"])
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--tools-image", help="image carrying tritonllm for in-pod entry points")
    p.add_argument("--resync-seconds", type=float, help="periodic reconcile interval")
    p.set_defaults(func=run)


def settings_from(args: argparse.Namespace) -> OperatorSettings:
    base = OperatorSettings.from_env()
    overrides = {
        k: v
        for k, v in {
            "namespaces": args.namespaces,
            "metrics_port": args.metrics_port,
            "health_port": args.health_port,
            "bind_address": args.bind_address,
            "log_format": args.log_format,
            "log_level": args.log_level,
            "tools_image": args.tools_image,
            "resync_seconds": args.resync_seconds,
            "peering": "" if args.standalone else None,
            "leader_election": _leader_election(args),
        }.items()
        if v is not None
    }
    return base.model_copy(update=overrides)


def _leader_election(args: argparse.Namespace) -> str | None:
    """--leader-election LEASE wins; --standalone alone turns the setting off."""
    chosen: str | None = getattr(args, "leader_election", None)
    if chosen is not None:
        return chosen
    return "" if args.standalone else None


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        # kopf logs in with the KUBECONFIG it finds: set it before kopf starts.
        os.environ["KUBECONFIG"] = os.path.abspath(args.kubeconfig)
    # The operator does not use the `kubernetes` package (tritonllm.k8s speaks HTTP itself), but
    # kopf imports it whenever it is installed (dev and test environments), which alone costs
    # about 45 MiB of resident memory: keep it out of this process.
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]
    import kopf
    from prometheus_client import start_http_server

    settings = settings_from(args)

    from tritonllm.handlers import logs, operator  # after the environment is set

    logs.setup(settings.log_level, settings.log_format)
    operator.configure(settings, args.kubeconfig)
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr=settings.bind_address)
    liveness = (
        f"http://{settings.bind_address}:{settings.health_port}/healthz"
        if settings.health_port
        else None
    )
    async def main() -> None:
        if settings.leader_election:
            await _elected(settings, args.kubeconfig, liveness)
            return
        identity = None
        if settings.peering:
            await _peering_ready(settings, args.kubeconfig)
            identity = _identity()
            # as soon as the last pass is over, on SIGTERM: the next peer resumes at once
            operator.when_stopped(functools.partial(
                _leave_peering, settings, args.kubeconfig, identity))
        await kopf.operator(
            standalone=not settings.peering,
            peering_name=settings.peering or None,
            # kopf's Identity is a NewType of str that it does not export
            identity=cast(Any, identity),
            namespaces=settings.namespaces,
            clusterwide=not settings.namespaces,
            liveness_endpoint=liveness,
            # Peers with equal priorities would all pause; a random one lets exactly one
            # replica act, and the next takes over when its peering record expires.
            priority=random.randint(1, 1_000_000),
        )

    from tritonllm.k8s.lease import LeaseLost
    from tritonllm.k8s.peering import PeeringMissing

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main())
    except (PeeringMissing, LeaseLost) as exc:
        # One line, no traceback: the object, and the ways out (or why this replica stopped).
        print(f"error: tritonllm run: {exc}", file=sys.stderr)
        return 1
    return 0


async def _elected(
    settings: OperatorSettings, kubeconfig: str | None, liveness: str | None
) -> None:
    """Lease-based leader election (tritonllm.k8s.lease): wait as a standby (its /healthz says
    so), then run kopf without peering while the Lease is renewed. A lost Lease cancels the
    passes in flight at once, stops kopf and raises LeaseLost (the process exits 1; its restart
    waits as a standby); a stop of kopf (SIGTERM) releases the Lease, so the standby takes over
    at once."""
    import logging

    import kopf

    from tritonllm.handlers import operator as handlers
    from tritonllm.k8s.lease import LeaderLease, LeaseLost, lease_client

    identity = _identity()
    kube = lease_client(kubeconfig, settings.lease_seconds)
    namespace = settings.leader_election_namespace or next(iter(settings.namespaces), "default")
    lease = LeaderLease(kube, namespace, settings.leader_election, identity,
                        duration=settings.lease_seconds)
    handlers.when_stopped(lease.release)  # as soon as the last pass is over, on SIGTERM
    try:
        async with _standby_health(settings):
            await lease.acquire()
        stop = asyncio.Event()
        operator = asyncio.create_task(kopf.operator(
            standalone=True, namespaces=settings.namespaces,
            clusterwide=not settings.namespaces, liveness_endpoint=liveness, stop_flag=stop))
        keep = asyncio.create_task(lease.keep(on_lost=handlers.lost))
        done, _ = await asyncio.wait({operator, keep}, return_when=asyncio.FIRST_COMPLETED)
        if keep in done and not lease.released:
            stop.set()  # lost: stop acting before a standby may start
            with contextlib.suppress(Exception):
                await asyncio.wait_for(operator, timeout=settings.lease_seconds)
            keep.result()  # raises LeaseLost
            raise LeaseLost("the Lease renewal ended")
        await operator  # stopping (SIGTERM): kopf's cleanup released the Lease
        keep.cancel()
        await lease.release()
    finally:
        await kube.close()
        logging.getLogger("tritonllm.lease").info("leader election ended")


@contextlib.asynccontextmanager
async def _standby_health(settings: OperatorSettings) -> AsyncIterator[None]:
    """While waiting for the Lease, /healthz answers {"state": "standby"} (kopf's probe
    endpoint takes the port over once this replica acts)."""
    from aiohttp import web

    if not settings.health_port:
        yield
        return

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"state": "standby"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, settings.bind_address, settings.health_port).start()
    try:
        yield
    finally:
        await runner.cleanup()


def _identity() -> str:
    """This replica's name in the Lease and in kopf's peering: the pod's name (the chart sets
    POD_ID from it), else host and process."""
    import socket

    return os.environ.get("POD_ID") or f"{socket.gethostname()}-{os.getpid()}"


async def _leave_peering(settings: OperatorSettings, kubeconfig: str | None, identity: str
                         ) -> None:
    import logging

    from tritonllm.k8s.client import Kube
    from tritonllm.k8s.peering import leave_peering

    kube = Kube.from_kubeconfig(kubeconfig, concurrency=1, timeout=settings.api_timeout_seconds)
    try:
        left = await leave_peering(kube, settings.peering, settings.namespaces, identity)
    finally:
        await kube.close()
    for what in left:
        logging.getLogger("tritonllm.peering").info("left %s as %s", what, identity)


async def _peering_ready(settings: OperatorSettings, kubeconfig: str | None) -> None:
    """kopf keeps a replica paused until it reads its peering object: make sure it exists
    (tritonllm.k8s.peering), before kopf starts, so that a missing one is never a silent stall."""
    import logging

    from tritonllm.k8s.client import Kube
    from tritonllm.k8s.peering import ensure_peering

    kube = Kube.from_kubeconfig(kubeconfig, concurrency=1, timeout=settings.api_timeout_seconds)
    try:
        created = await ensure_peering(kube, settings.peering, settings.namespaces)
    finally:
        await kube.close()
    for what in created:
        logging.getLogger("tritonllm.peering").info(
            "created %s: kopf peering lets one replica act at a time (--standalone: none)", what
        )


if __name__ == "__main__":  # the flags as `tritonllm run` parses them
    from tritonllm.cli.main import main

    sys.exit(main(["run", *sys.argv[1:]]))
