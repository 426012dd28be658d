"""Benchmark of the operator on the local cluster: figures, not pass/fail.

    .venv/bin/python -m bench.operator_bench [--copies N]

Applies every example (and N extra copies of a small deployment) to a fresh namespace, then prints
apply-to-Ready per object, reconcile latency (from the operator's histogram), API writes per
steady-state reconcile, and the operator's resident memory with everything applied.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.cases import EXAMPLES
from tests.cluster.operator_harness import (
    load_example,
    prepare_namespace,
    run_operator,
    wait_ready,
)
from tests.helpers import rss_mib

from tritonllm_dev.local import LocalCluster
from tritonllm_dev.manifests import DEFAULT_NODES, H100, NodeSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--copies", type=int, default=10, help="extra small deployments")
    ap.add_argument("--cluster", default="bench")
    args = ap.parse_args()
    nodes = (*DEFAULT_NODES, *(NodeSpec(f"gpu-h100-x{i}", gpus=8, product=H100) for i in range(6)))
    cluster = LocalCluster(name=args.cluster, nodes=nodes)
    started = not cluster.is_running()
    cluster.up()
    ns = f"bench-{int(time.time())}"
    cluster.kubectl("create", "namespace", ns)
    prepare_namespace(cluster, ns)
    objs = [load_example(p.stem, ns) for p in EXAMPLES]
    small = load_example("gpt2-medium", ns)
    for i in range(args.copies):
        copy = {**small, "metadata": {"name": f"copy-{i:03d}", "namespace": ns}}
        objs.append(copy)
    try:
        with tempfile.TemporaryDirectory() as tmp, run_operator(
            cluster, ns, Path(tmp), resync=10.0
        ) as op:
            rss_idle = rss_mib(op.proc.pid)
            # Multi-node first: it needs whole free nodes, which the default scheduler's
            # spreading of the small deployments would not leave (as in the demo).
            first = [o for o in objs if o["metadata"]["name"] == "llama-70b-multinode"]
            rest = [o for o in objs if o not in first]
            t0 = time.monotonic()
            times = {}
            for wave in (first, rest):
                start = time.monotonic()
                cluster.apply(wave)
                for obj in wave:
                    name = obj["metadata"]["name"]
                    wait_ready(cluster, ns, name, timeout=300)
                    times[name] = time.monotonic() - start
            total = time.monotonic() - t0
            time.sleep(5)
            writes0 = op.writes()
            rec0 = op.metric("tritonllm_reconciles_total")
            time.sleep(25)
            writes = op.writes() - writes0
            recs = op.metric("tritonllm_reconciles_total") - rec0
            dur_sum = op.metric("tritonllm_reconcile_duration_seconds_sum")
            dur_count = op.metric("tritonllm_reconcile_duration_seconds_count")
            rss = rss_mib(op.proc.pid)
        print(f"objects: {len(objs)} ({len(EXAMPLES)} examples + {args.copies} copies)")
        for p in EXAMPLES:
            print(f"  apply-to-Ready {p.stem:28s} {times[p.stem]:6.1f} s")
        print(f"  all {len(objs)} Ready after {total:.1f} s")
        print(f"reconcile mean duration: {1000 * dur_sum / max(dur_count, 1):.1f} ms "
              f"over {dur_count:.0f} reconciles")
        print(f"steady state: {recs:.0f} reconciles, {writes:.0f} API writes "
              f"({writes / max(recs, 1):.2f} per reconcile)")
        print(f"operator RSS: {rss_idle:.0f} MiB idle, {rss:.0f} MiB with {len(objs)} objects")
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if started:
            cluster.down()


if __name__ == "__main__":
    main()
