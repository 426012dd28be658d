"""examples/cpu-standin.yaml on real containers: apply -> first answer, cold and warm. Figures,
not pass/fail (tests/cluster/test_real_flow.py checks the flow itself).

    .venv/bin/python -m bench.real_flow [--cluster NAME] [--rounds N]

Uses the local cluster NAME with its real node (a running one is reused and left running; one
started here is stopped at the end). Each round takes a fresh namespace, so the engine cache is
empty: the store is seeded (examples/cpu-standin/seed.yaml), the example is applied with kubectl
while the operator runs on the host, and the time until /v2/models/ensemble/generate answers
through the Service is the **cold** figure (engine build Job, repository Job, two tritonserver
ranks). The deployment is then deleted and a second one of the same model applied: the time to
its first answer is the **warm** figure (cached engine, no build).

Then the lifecycle of tests/cluster/test_real_lifecycle.py under a steady load of 3 clients (tp 1
so a surge pod fits): an engine change rolled over (requests sent, **failed**, seconds from the
spec change to the new pod alone), one of two pods deleted (requests sent, **failed**, seconds to
the container's exit after its drain, and to the pod's removal), and the deployment deleted with
engineRetention Delete (its engine files removed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from tests.cluster.operator_harness import jobs, run_operator
from tests.cluster.test_real_flow import EXAMPLE, SEED, _first_answer, _pods, _timeline, restrict
from tests.cluster.test_real_lifecycle import (
    NAME,
    Figures,
    delete_deployment,
    delete_one_pod,
    lifecycle_cr,
    rollover,
)
from tests.helpers import example_body

from tritonllm_dev import images
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import REGISTRY_ADDR
from tritonllm_dev.testing import fresh_namespace, wait_for


def one_round(
    cluster: LocalCluster, refs: dict[str, str], tmp: Path, i: int
) -> tuple[float, float, Figures]:
    with fresh_namespace(cluster, f"bench-real-flow-{i}") as ns:
        restrict(cluster, ns)
        cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
        cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                        "--timeout=240s", timeout=270)
        with run_operator(cluster, ns, tmp, tools_image=refs["operator"], tag=f"op{i}") as op:
            start = time.monotonic()
            cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
            _first_answer(cluster, ns, "cpu-standin", op, 420)
            cold = time.monotonic() - start
            print(f"  cold phases: {phases_line(_timeline(cluster, ns, 'cpu-standin'))}",
                  flush=True)
            cluster.kubectl("delete", "tllm", "cpu-standin", "-n", ns, "--wait=true")
            wait_for(lambda: not _pods(cluster, ns, "server")
                     and not jobs(cluster, ns, "tritonllm-build-"),
                     timeout=180, what="first deployment collected")
            second = example_body(EXAMPLE.stem)
            second["metadata"]["name"] = "cpu-standin-warm"
            start = time.monotonic()
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(second))
            cr, _ = _first_answer(cluster, ns, "cpu-standin-warm", op, 300)
            warm = time.monotonic() - start
            assert cr["status"]["engine"]["cached"] is True, cr["status"]
            print(f"  warm phases: {phases_line(_timeline(cluster, ns, 'cpu-standin-warm'))}",
                  flush=True)
            cluster.kubectl("delete", "tllm", "cpu-standin-warm", "-n", ns, "--wait=true")
            wait_for(lambda: not _pods(cluster, ns, "server"), timeout=180,
                     what="warm deployment collected")
            figures = Figures()
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(lifecycle_cr()))
            _first_answer(cluster, ns, NAME, op, 420)
            rollover(cluster, ns, op, figures)
            delete_one_pod(cluster, ns, op, figures)
            delete_deployment(cluster, ns, op)
    return cold, warm, figures


def phases_line(phases: list[dict[str, Any]]) -> str:
    """status.phases as `Name start+offset..end (seconds)`, offsets from the first start: the
    phases overlap where the serving pods start while the repository Job writes."""
    if not phases:
        return "none"
    t0 = min(dt.datetime.fromisoformat(p["start"]) for p in phases)

    def at(s: str) -> float:
        return (dt.datetime.fromisoformat(s) - t0).total_seconds()

    return ", ".join(f"{p['name']} {at(p['start']):.0f}..{at(p['end']):.0f} s "
                     f"({p['seconds']:.0f} s)" for p in phases)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", default="bench", help="local cluster name (default: bench)")
    ap.add_argument("--rounds", type=int, default=1, help="cold + warm rounds (default: 1)")
    args = ap.parse_args()
    cluster = LocalCluster(name=args.cluster, real_node=True)
    started = not cluster.is_running()
    cluster.up()
    try:
        refs = images.ensure_images(REGISTRY_ADDR)
        colds, warms = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.rounds):
                cold, warm, f = one_round(cluster, refs, Path(tmp), i)
                colds.append(cold)
                warms.append(warm)
                print(f"round {i + 1}: apply -> first answer  cold {cold:6.1f} s   "
                      f"warm {warm:6.1f} s", flush=True)
                print(f"  rollover to a new engine under load: {f.rollover_failed} failed of "
                      f"{f.rollover_requests} requests, {f.rollover_seconds:.1f} s", flush=True)
                print(f"  one of two pods deleted under load: {f.delete_failed} failed of "
                      f"{f.delete_requests} requests; drained and exited after "
                      f"{f.drain_seconds:.1f} s, pod gone after {f.gone_seconds:.1f} s",
                      flush=True)
        print(f"cpu-standin (tp 2, world size 2, real node): cold median "
              f"{statistics.median(colds):.1f} s (engine build), warm median "
              f"{statistics.median(warms):.1f} s (cached engine), {args.rounds} round(s)")
    finally:
        if started:
            cluster.down()


if __name__ == "__main__":
    main()
