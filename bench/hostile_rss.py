"""The operator's memory with objects planted by another tenant to make it grow: figures, not
pass/fail.

    .venv/bin/python -m bench.hostile_rss [--objects 300] [--owners 5000] [--labels 3500]
                                          [--source DIR ...] [--direct]

Another tenant may create, in any namespace the operator watches, objects of the kinds it
follows (their names may be taken, tritonllm.k8s.names) and label them as the operator's (the
watches of its own children select on that label). Two sorts, `--objects` of each: ConfigMaps
carrying `--owners` owner references, and ConfigMaps carrying `--labels` labels, all labelled
managed-by tritonllm.

On the local cluster (no real node): the operator of each source tree (`--source`, repeatable;
default this checkout, e.g. `--source /path/to/old-checkout` to compare), cluster-wide, idle,
is measured (resident memory once its watches listed the cluster); then, still running, while the
objects are created (the watch path); then started again with them there (the list path, and its
peak). The owners are Leases of the same namespace (the garbage collector removes a ConfigMap
whose owners do not exist, and strips owner references to missing objects from one that has an
existing owner).

`--direct`, no cluster: a process per source feeds the same objects, as JSON parsed one watch
event at a time, to the operator's index of taken names (with the views the reconciler reads)
and reads its own resident memory before and after; the owner references name
TritonLLMDeployments there (the kind whose references a build object keeps).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETTLE_SECONDS = 20.0
CHUNK_BYTES = 8 << 20  # per kubectl call


def owner_refs(n: int, uids: list[str] | None) -> list[dict[str, Any]]:
    """n owner references: to the Leases `uids` (cluster), else to TritonLLMDeployments."""
    if uids is not None:
        return [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": f"owner-{i:05d}",
                 "uid": uids[i]} for i in range(n)]
    return [{"apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
             "name": f"owner-{i:05d}", "uid": f"00000000-0000-4000-8000-{i:012d}"}
            for i in range(n)]


def hostile(namespace: str, i: int, sort: str, n: int, uids: list[str] | None = None
            ) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "tritonllm"}
    meta: dict[str, Any] = {"name": f"{sort}-{i:04d}", "namespace": namespace, "labels": labels}
    if sort == "owners":
        meta["ownerReferences"] = owner_refs(n, uids)
    else:
        labels.update({f"team.example.com/label-{j:05d}": f"value-{j:05d}" for j in range(n)})
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"x": "y"}}


# --- without a cluster: the index fed in a process of its own -----------------------------------

DIRECT = r"""
import asyncio, gc, json, sys
from bench.hostile_rss import hostile
from tritonllm.handlers.cache import index_specs, keep_name, metadata_indices
from tritonllm.k8s.names import TakenNames

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

objects, owners, labels = (int(x) for x in sys.argv[1:4])

class Source:
    async def list_metadata(self, api_version, kind, namespace, each=None):
        return [], "1"

    async def watch_metadata(self, api_version, kind, namespace, rv):
        for sort, n in (("owners", owners), ("labels", labels)):
            for i in range(objects):  # as a watch delivers them: parsed one at a time
                text = json.dumps(hostile("team", i, sort, n))
                yield {"type": "ADDED", "object": json.loads(text)}
        await asyncio.Event().wait()

names = TakenNames(Source(), kinds=[("v1", "ConfigMap")], keep=keep_name)
views = metadata_indices(index_specs(gpu_nodes=False), names)
gc.collect()
before = rss()

async def main():
    task = asyncio.create_task(names.run())
    while len(names) < 2 * objects:
        await asyncio.sleep(0.05)
    task.cancel()

asyncio.run(main())
gc.collect()
kept = [names.lookup("ConfigMap", "team", f"{s}-0000")[1]["metadata"] for s in ("owners", "labels")]
print(json.dumps({"before_mib": before, "after_mib": rss(), "indexed": len(names),
                  "owners_kept": len(kept[0].get("ownerReferences") or []),
                  "labels_kept": len(kept[1].get("labels") or {})}))
"""


def direct(source: Path, objects: int, owners: int, labels: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source / "operator"), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", DIRECT, str(objects), str(owners), str(labels)],
                         env=env, check=True, capture_output=True, text=True, timeout=1800)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# --- on the local cluster ------------------------------------------------------------------------


def create(cluster: Any, objs: list[dict[str, Any]]) -> None:
    """kubectl create, a few MiB per call."""
    batch: list[dict[str, Any]] = []
    size = 0
    for obj in [*objs, None]:
        text = json.dumps(obj) if obj is not None else ""
        if batch and (obj is None or size + len(text) > CHUNK_BYTES):
            doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": batch})
            cluster.kubectl("create", "-f", "-", "-o", "name", input=doc, timeout=900)
            batch, size = [], 0
        if obj is not None:
            batch.append(obj)
            size += len(text)


def plant(cluster: Any, ns: str, objects: int, owners: int, labels: int) -> float:
    t0 = time.monotonic()
    create(cluster, [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": f"owner-{i:05d}", "namespace": ns}}
                     for i in range(owners)])
    leases = cluster.kubectl_json("get", "leases", "-n", ns, "-o", "json")["items"]
    uid = {x["metadata"]["name"]: x["metadata"]["uid"] for x in leases}
    uids = [uid[f"owner-{i:05d}"] for i in range(owners)]
    create(cluster, [hostile(ns, i, "owners", owners, uids) for i in range(objects)])
    create(cluster, [hostile(ns, i, "labels", labels) for i in range(objects)])
    return time.monotonic() - t0


def start(cluster: Any, source: Path, tmp: Path, tag: str) -> Any:
    from bench.secrets_rss import start_operator

    return start_operator(cluster, source, tmp, tag)


def rss(op: Any) -> dict[str, float]:
    from tests.helpers import rss_mib

    return {"rss_mib": rss_mib(op.proc.pid), "peak_mib": rss_mib(op.proc.pid, "VmHWM")}


def on_cluster(args: argparse.Namespace, sources: list[Path]) -> dict[str, dict[str, Any]]:
    from tests.cluster.operator_harness import stop

    from tritonllm_dev.local import LocalCluster

    cluster = LocalCluster(name=args.cluster, real_node=False)
    started = not cluster.is_running()
    cluster.up()
    ns = f"hostile-{int(time.time())}"
    results: dict[str, dict[str, Any]] = {str(s): {} for s in sources}
    try:
        cluster.kubectl("create", "namespace", ns)
        with tempfile.TemporaryDirectory() as tmp:
            ops = [start(cluster, s, Path(tmp), f"a{i}") for i, s in enumerate(sources)]
            try:
                time.sleep(SETTLE_SECONDS)
                for s, op in zip(sources, ops, strict=True):
                    results[str(s)]["idle"] = rss(op)
                took = plant(cluster, ns, args.objects, args.owners, args.labels)
                print(f"[measure] planted {args.objects} + {args.objects} ConfigMaps in "
                      f"{took:.0f} s", flush=True)
                time.sleep(SETTLE_SECONDS)
                for s, op in zip(sources, ops, strict=True):
                    results[str(s)]["watched"] = rss(op)
            finally:
                for op in ops:
                    stop(op.proc)
            for i, s in enumerate(sources):  # one at a time: each lists them all at its start
                op = start(cluster, s, Path(tmp), f"b{i}")
                try:
                    time.sleep(SETTLE_SECONDS)
                    results[str(s)]["listed"] = rss(op)
                finally:
                    stop(op.proc)
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if started and not args.keep:
            cluster.down()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=300, help="ConfigMaps of each sort")
    ap.add_argument("--owners", type=int, default=5000, help="owner references per ConfigMap")
    ap.add_argument("--labels", type=int, default=3500, help="labels per ConfigMap")
    ap.add_argument("--source", type=Path, action="append",
                    help="a checkout whose operator to measure (repeatable; default: this one)")
    ap.add_argument("--direct", action="store_true", help="no cluster: feed the index directly")
    ap.add_argument("--cluster", default="hostile-rss", help="local cluster name")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = ap.parse_args()
    sources = [s.resolve() for s in (args.source or [ROOT])]
    what = (f"{args.objects} ConfigMaps with {args.owners} owner references and "
            f"{args.objects} with {args.labels} labels")
    if args.direct:
        for s in sources:
            r = direct(s, args.objects, args.owners, args.labels)
            print(f"[measure] {s} (direct): RSS {r['before_mib']:.1f} MiB -> "
                  f"{r['after_mib']:.1f} MiB with {what} "
                  f"({r['after_mib'] - r['before_mib']:+.1f} MiB; kept per object: "
                  f"{r['owners_kept']} owners, {r['labels_kept']} labels)", flush=True)
        return
    for s, r in on_cluster(args, sources).items():
        idle, watched, listed = r["idle"], r["watched"], r["listed"]
        print(f"[measure] {s}: RSS idle {idle['rss_mib']:.1f} MiB; with {what}: "
              f"{watched['rss_mib']:.1f} MiB as they were created "
              f"({watched['rss_mib'] - idle['rss_mib']:+.1f} MiB), "
              f"{listed['rss_mib']:.1f} MiB started with them there "
              f"(peak {listed['peak_mib']:.1f} MiB)")


if __name__ == "__main__":
    main()
