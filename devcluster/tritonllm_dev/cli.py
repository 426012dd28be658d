"""``tritonllm cluster up|down|status|kubeconfig|build``: the local control plane from the shell.

``up`` builds what is missing (progress on stderr), starts the cluster and prints the kubeconfig
path on stdout, so ``export KUBECONFIG=$(tritonllm cluster up)`` works. Nothing here touches
``~/.kube/config``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tritonllm_dev.build import BuildError, ensure_all
from tritonllm_dev.host import BRIDGE, GATEWAY_CIDR
from tritonllm_dev.local import DEFAULT_NAME, ClusterError, LocalCluster, default_crd_dirs
from tritonllm_dev.node import (
    NODE_NAME,
    REGISTRY_ADDR,
    STANDIN_GPUS,
    STANDIN_PRODUCT,
    STORAGE_CLASS,
    TAINT_KEY,
)
from tritonllm_dev.versions import COMPONENTS


def _cluster(args: argparse.Namespace) -> LocalCluster:
    crds = [Path(p) for p in args.crds] if args.crds else default_crd_dirs()
    real = not getattr(args, "no_real_node", True)
    return LocalCluster(name=args.name, state_dir=args.state_dir, crd_dirs=crds, real_node=real)


def _up(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    try:
        kubeconfig = cluster.up(build=not args.no_build, timeout=args.timeout)
    except (BuildError, ClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(kubeconfig)
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    left = cluster.down(purge=args.purge)
    if left:
        print(f"error: processes still alive: {left}", file=sys.stderr)
        return 1
    if cluster.host_problems:
        print(f"error: host changes not undone: {cluster.host_problems}", file=sys.stderr)
        return 1
    return 0


def _status(args: argparse.Namespace) -> int:
    status = _cluster(args).status()
    print(f"cluster    {status.name} ({'running' if status.running else 'not running'})")
    print(f"server     {status.server}")
    print(f"state dir  {status.state_dir}")
    for name, (pid, alive) in status.processes.items():
        print(f"  {name:25} pid {pid:<8} {'alive' if alive else 'dead'}")
    for listener in status.listeners:
        print(f"  listening {listener}")
    if "kubelet" in status.processes:
        print(f"real node  {NODE_NAME} (taint {TAINT_KEY}, {STANDIN_GPUS}x {STANDIN_PRODUCT})")
        print(f"registry   {REGISTRY_ADDR}")
        print(f"bridge     {BRIDGE} {GATEWAY_CIDR}")
        print(f"storage    {STORAGE_CLASS}, the default StorageClass (volumes on {NODE_NAME})")
    elif status.running:
        print("storage    no default StorageClass (no real node): pre-bind PersistentVolumes")
    for comp in COMPONENTS:
        missing = comp.missing()
        state = "cached" if not missing else "missing: " + ", ".join(missing)
        print(f"  binaries {comp.key:20} {state}")
    return 0 if status.running else 1


def _kubeconfig(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    print(cluster.kubeconfig)
    return 0 if cluster.kubeconfig.exists() else 1


def _build(args: argparse.Namespace) -> int:
    try:
        ensure_all(COMPONENTS)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``cluster`` and its sub-verbs on the top-level ``tritonllm`` parser."""
    parser = subparsers.add_parser(
        "cluster",
        help="local control plane with simulated GPU nodes",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    verbs = parser.add_subparsers(dest="cluster_verb", required=True, metavar="SUBVERB")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default=DEFAULT_NAME, help="cluster name (default: %(default)s)")
        p.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="state directory (default: ~/.cache/tritonllm/cluster/<name>)",
        )
        p.add_argument(
            "--crds",
            action="append",
            default=None,
            metavar="DIR",
            help="directory of CRD YAML to install (repeatable; default: the checkout's crds/)",
        )

    up = verbs.add_parser("up", help="build missing binaries, start, print the kubeconfig path")
    common(up)
    up.add_argument("--no-build", action="store_true", help="fail instead of building binaries")
    up.add_argument(
        "--no-real-node",
        action="store_true",
        help="kwok nodes only: no kubelet, containerd, registry, CoreDNS (no root needed)",
    )
    up.add_argument("--timeout", type=float, default=180, help="start-up timeout in seconds")
    up.set_defaults(func=_up)

    down = verbs.add_parser("down", help="stop every process of the cluster")
    common(down)
    down.add_argument("--purge", action="store_true", help="also delete the state directory")
    down.set_defaults(func=_down)

    status = verbs.add_parser("status", help="processes, listeners, cached binaries")
    common(status)
    status.set_defaults(func=_status)

    kubeconfig = verbs.add_parser("kubeconfig", help="print the kubeconfig path")
    common(kubeconfig)
    kubeconfig.set_defaults(func=_kubeconfig)

    build = verbs.add_parser("build", help="build and cache all binaries, start nothing")
    build.set_defaults(func=_build)
