"""`tritonllm demo`: the main job, end to end on a local cluster with simulated GPU nodes.

Starts (building on first use) the local control plane, runs the operator against it, applies
every example in examples/ and shows them converging in a `kubectl get tllm` table until all are
Ready, then prints apply-to-Ready times. Engine builds and pods are simulated by kwok (no GPU
here); everything else, from admission to garbage collection, is the real Kubernetes machinery.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Dev tooling: where the local-cluster package is left out (the operator image), importing this
# module fails and `tritonllm` does not offer the verb (tritonllm.cli.main skips it).
import tritonllm.cluster  # noqa: F401

NAMESPACE = "tritonllm-demo"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="local cluster + operator + every example, to Ready")
    p.add_argument("--examples", default="examples", help="directory of CRs (default: examples)")
    p.add_argument("--cluster", default="demo", help="local cluster name (default: demo)")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for Ready")
    p.add_argument(
        "--keep", action="store_true", help="leave the cluster and operator running afterwards"
    )
    p.set_defaults(func=run)


def _ready(item: dict[str, Any]) -> bool:
    for cond in (item.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Progressing":
            return bool(cond["status"] == "False" and cond["reason"] == "Deployed")
    return False


def _multi_node(obj: dict[str, Any]) -> bool:
    from tritonllm.api.deployment import parse_deployment

    return parse_deployment(obj).spec.topology.multi_node


def needs_real_node(obj: dict[str, Any]) -> bool:
    """An example made for the local cluster's real node (examples/cpu-standin.yaml): it
    tolerates the real node's taint and runs real containers, so the simulated demo leaves it
    out (docs/examples.md walks through it)."""
    from tritonllm.cluster.node import TAINT_KEY

    tolerations = ((obj.get("spec") or {}).get("podTemplate") or {}).get("tolerations") or []
    return any(t.get("key") == TAINT_KEY for t in tolerations)


def _wait_scheduled(cluster: Any, names: list[str], timeout: float = 120) -> None:
    """Until every serving pod of these deployments is bound to a node."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = cluster.kubectl_json(
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/instance in (" + ",".join(names) + ")",
        )
        serving = [
            p
            for p in pods["items"]
            if p["metadata"]["labels"].get("app.kubernetes.io/component") in ("server", "worker")
        ]
        if serving and all(p["spec"].get("nodeName") for p in serving):
            return
        time.sleep(1)


def run(args: argparse.Namespace) -> int:
    import yaml

    from tritonllm.cluster.local import LocalCluster
    from tritonllm.cluster.manifests import DEFAULT_NODES, H100, NodeSpec

    DEMO_NODES = (
        *DEFAULT_NODES,
        NodeSpec("gpu-h100-2", gpus=8, product=H100),
        NodeSpec("gpu-h100-3", gpus=8, product=H100),
    )

    examples = sorted(Path(args.examples).glob("*.yaml"))
    if not examples:
        print(f"error: no examples in {args.examples}", file=sys.stderr)
        return 2
    # Room for every example at once (the 70B one alone takes two 8-GPU nodes).
    cluster = LocalCluster(name=args.cluster, nodes=DEMO_NODES)
    print(f"== local cluster '{args.cluster}' (binaries are built and cached on first use)")
    kubeconfig = cluster.up()
    print(f"   kubeconfig: {kubeconfig}")
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "hf-token", "namespace": NAMESPACE},
                "stringData": {"HF_TOKEN": "hf_demo_placeholder"},
            },
            # The local cluster has no storage provisioner: a volume pre-bound to the claim.
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{NAMESPACE}-model-store"},
                "spec": {
                    "capacity": {"storage": "2Ti"},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "hostPath": {"path": "/tmp/tritonllm-demo-store"},
                    "claimRef": {"namespace": NAMESPACE, "name": "tritonllm-model-store"},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "tritonllm-model-store", "namespace": NAMESPACE},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "resources": {"requests": {"storage": "2Ti"}},
                },
            },
        ]
    )
    log_path = cluster.state_dir / "operator.log"
    print(f"== operator (logs: {log_path})")
    with log_path.open("ab") as log:
        operator = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("tritonllm")),
                "run",
                "--standalone",
                "--kubeconfig",
                str(kubeconfig),
                "-n",
                NAMESPACE,
                "--bind-address",
                "127.0.0.1",
                "--metrics-port",
                "0",
                "--health-port",
                "0",
                "--resync-seconds",
                "5",
                "--tools-image",
                "ghcr.io/tritonllm/tritonllm:0.1.0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # Multi-node examples first: they need whole free nodes, and the scheduler's default
        # spreading would otherwise scatter the small deployments over every GPU node.
        objs = [yaml.safe_load(path.read_text()) for path in examples]
        real = [o["metadata"]["name"] for o in objs if needs_real_node(o)]
        if real:
            print(f"   skipped (real containers, see docs/examples.md): {', '.join(real)}")
        objs = [o for o in objs if not needs_real_node(o)]
        waves = [[o for o in objs if _multi_node(o)], [o for o in objs if not _multi_node(o)]]
        print(f"== applying {len(objs)} examples to namespace {NAMESPACE}")
        applied: dict[str, float] = {}
        for wave in waves:
            for obj in wave:
                obj["metadata"]["namespace"] = NAMESPACE
                cluster.apply([obj])
                applied[obj["metadata"]["name"]] = time.monotonic()
            if wave is waves[0] and wave:
                _wait_scheduled(cluster, [o["metadata"]["name"] for o in wave])
        ready_at: dict[str, float] = {}
        deadline = time.monotonic() + args.timeout
        tty = sys.stdout.isatty()
        while time.monotonic() < deadline:
            items = cluster.kubectl_json("get", "tllm", "-n", NAMESPACE)["items"]
            for item in items:
                name = item["metadata"]["name"]
                if _ready(item) and name not in ready_at:
                    ready_at[name] = time.monotonic() - applied[name]
            table = cluster.kubectl("get", "tllm", "-n", NAMESPACE).stdout
            elapsed = int(time.monotonic() - min(applied.values()))
            if tty:
                sys.stdout.write("\033[2J\033[H")
            print(f"[{elapsed:4d}s] {len(ready_at)}/{len(applied)} Ready\n{table}", flush=True)
            if len(ready_at) == len(applied):
                break
            if operator.poll() is not None:
                print(
                    f"error: the operator exited ({operator.returncode}); see {log_path}",
                    file=sys.stderr,
                )
                return 1
            time.sleep(2)
        print("== apply-to-Ready")
        for name in applied:
            took = ready_at.get(name)
            print(f"   {name:28s} {f'{took:.1f} s' if took is not None else 'NOT READY'}")
        print("== engine cache\n" + cluster.kubectl("get", "tllme", "-n", NAMESPACE).stdout)
        print(
            f"Explore: KUBECONFIG={kubeconfig} kubectl get tllm,deploy,lws,jobs,svc -n {NAMESPACE}"
        )
        return 0 if len(ready_at) == len(applied) else 1
    finally:
        if args.keep:
            print(
                f"Left running (--keep). Stop with: tritonllm cluster down --name {args.cluster}"
                f"; kill {operator.pid}"
            )
        else:
            os.killpg(operator.pid, signal.SIGTERM)
            operator.wait(timeout=30)
            cluster.down()
            print("== stopped the operator and the cluster")
