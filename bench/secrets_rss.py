"""The operator's memory with many Secrets in the cluster that are not its own: figures, not
pass/fail.

    .venv/bin/python -m bench.secrets_rss [--secrets 5000] [--size 1024] [--source DIR ...]

Starts the local cluster (no real node), runs `tritonllm run` cluster-wide (the chart's default
scope) from each source tree given (default: this checkout; e.g. `--source /path/to/old-checkout`
to compare with an older operator), idle, and reads its resident memory once its watches have
listed the cluster; then creates `--secrets` unrelated Secrets (`--size` bytes of data each, in a
namespace of their own) and measures again. Also reports how many Secret objects the process
received (its API calls and kopf's watch log cannot say; the difference in memory can).
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from tests.cluster.operator_harness import Operator, stop
from tests.helpers import free_port, rss_mib

from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

ROOT = Path(__file__).resolve().parents[1]
SETTLE_SECONDS = 20.0
CHUNK = 500


def foreign_secrets(namespace: str, n: int, size: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"foreign-{i:05d}", "namespace": namespace,
                         "labels": {"team": "someone-else"}},
            "type": "Opaque",
            "data": {"value": base64.b64encode(secrets.token_bytes(size)).decode()},
        }
        for i in range(n)
    ]


def create_secrets(cluster: LocalCluster, namespace: str, n: int, size: int) -> float:
    t0 = time.monotonic()
    objs = foreign_secrets(namespace, n, size)
    for start in range(0, n, CHUNK):
        chunk = objs[start:start + CHUNK]
        text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": chunk})
        cluster.kubectl("create", "-f", "-", input=text, timeout=600)
    return time.monotonic() - t0


def start_operator(cluster: LocalCluster, source: Path, tmp: Path, tag: str) -> Operator:
    """The operator from `source` (its operator/ on PYTHONPATH), cluster-wide, its log in
    `tmp`; returned once it is healthy (the memory benches share it)."""
    metrics_port, health_port = free_port(), free_port()
    code = "import sys; from tritonllm.cli.main import main; sys.exit(main(sys.argv[1:]))"
    args = [sys.executable, "-c", code, "run", "--kubeconfig", str(cluster.kubeconfig),
            "--standalone", "--metrics-port", str(metrics_port), "--health-port",
            str(health_port), "--bind-address", "127.0.0.1", "--log-format", "text",
            "--log-level", "WARNING", "--resync-seconds", "60"]
    env = {**os.environ, "PYTHONPATH": str(source / "operator"), "TRITONLLM_PEERING": ""}
    log = tmp / f"{tag}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=tmp)
    op = Operator(proc, metrics_port, health_port, log)
    try:
        wait_for(op.healthy, timeout=120, what=f"operator /healthz ({tag})")
    except BaseException:
        stop(proc)
        raise
    return op


def measure(cluster: LocalCluster, source: Path, tmp: Path, tag: str) -> dict[str, float]:
    """Start the operator from `source`, let it list and settle, read its memory, stop it."""
    op = start_operator(cluster, source, tmp, tag)
    try:
        time.sleep(SETTLE_SECONDS)  # the initial lists are done long before; GC settles
        return {"rss_mib": rss_mib(op.proc.pid), "peak_mib": rss_mib(op.proc.pid, "VmHWM")}
    finally:
        stop(op.proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--secrets", type=int, default=5000, help="unrelated Secrets to create")
    ap.add_argument("--size", type=int, default=1024, help="bytes of data per Secret")
    ap.add_argument("--source", type=Path, action="append",
                    help="a checkout whose operator to measure (repeatable; default: this one)")
    ap.add_argument("--cluster", default="secrets-rss", help="local cluster name")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = ap.parse_args()
    sources = [s.resolve() for s in (args.source or [ROOT])]
    cluster = LocalCluster(name=args.cluster, real_node=False)
    started = not cluster.is_running()
    cluster.up()
    ns = f"foreign-{int(time.time())}"
    results: dict[str, dict[str, dict[str, float]]] = {}
    try:
        cluster.kubectl("create", "namespace", ns)
        with tempfile.TemporaryDirectory() as tmp:
            for i, src in enumerate(sources):
                results.setdefault(str(src), {})["0"] = measure(cluster, src, Path(tmp), f"a{i}")
            took = create_secrets(cluster, ns, args.secrets, args.size)
            print(f"[measure] created {args.secrets} Secrets of {args.size} bytes in {took:.0f} s")
            for i, src in enumerate(sources):
                results[str(src)][str(args.secrets)] = measure(cluster, src, Path(tmp), f"b{i}")
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if started and not args.keep:
            cluster.down()
    for src, by_n in results.items():
        base, full = by_n["0"], by_n[str(args.secrets)]
        print(f"[measure] {src}: RSS {base['rss_mib']:.1f} MiB with 0 foreign Secrets, "
              f"{full['rss_mib']:.1f} MiB with {args.secrets} "
              f"({full['rss_mib'] - base['rss_mib']:+.1f} MiB; peak {full['peak_mib']:.1f} MiB)")


if __name__ == "__main__":
    main()
