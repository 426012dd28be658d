"""One set-up step for the README's two commands: check, and install where it can, what the demo
and the tests need, in seconds and before any build.

``scripts/demo`` and ``scripts/test`` both run this first, with the system Python and before the
virtualenv exists (standard library only, so ``PYTHONPATH=operator python3 -m
tritonllm_dev.preflight`` works on a bare checkout). Each need belongs to a *tier*:

====================  ==========================================================================
``base``              Python 3.11+, Go 1.26+, gcc, openssl, git, free disk for the caches
``real-node``         root, cgroup v1 controllers, libseccomp-dev (runc), CNI plugins, iptables,
                      iproute2
``images``            buildah, mmdebstrap, busybox-static (the real node's images), skopeo
``mpi``               sshd, ssh-keygen, mpirun (the triton tier and the multi-node tests)
``argocd``            redis-server (Argo CD's cache)
``metrics``           promtool (the chart's Prometheus rules, checked and evaluated), haproxy (the
                      activator's rendered config, checked)
====================  ==========================================================================

What Debian ships is installed with ``apt-get`` when missing (printed first); what cannot be
fixed here (no root, no Go or too old a Go, no disk, an apt that cannot reach its mirror) ends
the step in its first seconds with one line per problem naming the fix. Exit status: 0 ready,
1 something cannot be fixed here. ``--check`` reports without installing anything.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Both standard library only, like this module (it runs before the virtualenv exists).
from tritonllm_dev.host import CGROUP_FS, CNI_BIN_DIR, CNI_PLUGINS, NEEDED_CONTROLLERS
from tritonllm_dev.versions import cache_root

TIERS = ("base", "real-node", "images", "mpi", "argocd", "metrics")
#: What each README command needs.
DEMO_TIERS = ("base", "real-node", "images")
TEST_TIERS = TIERS

MIN_PYTHON = (3, 11)
MIN_GO = (1, 26)
#: Free space the caches need on a cold machine (Go module and build caches, the cluster's
#: binaries, Argo CD, images: about 14 GiB measured) and on a warm one (logs, cluster state).
COLD_FREE_GIB = 20
WARM_FREE_GIB = 2


class SetupError(RuntimeError):
    """Something the README's commands need that this step cannot provide; one line per fix."""


@dataclass(frozen=True)
class Need:
    """One thing a tier needs: present when ``present()`` is true, else the Debian ``package``
    installs it (None: nothing here can, and ``fix`` says what to do)."""

    tier: str
    what: str
    present: Callable[[], bool]
    package: str | None = None
    fix: str = ""


def _on_path(tool: str) -> Callable[[], bool]:
    return lambda: shutil.which(tool) is not None


def _file(path: str) -> Callable[[], bool]:
    return lambda: Path(path).exists()


def _dpkg(package: str) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                                 capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return "ok installed" in out.stdout

    return probe


def _sshd() -> bool:
    return shutil.which("sshd") is not None or Path("/usr/sbin/sshd").is_file()


def _cni() -> bool:
    return all((CNI_BIN_DIR / p).is_file() for p in CNI_PLUGINS)


NEEDS: tuple[Need, ...] = (
    Need("base", "gcc (the pod sandbox's pause binary, cgo)", _on_path("gcc"), "gcc"),
    Need("base", "openssl (the cluster's certificates)", _on_path("openssl"), "openssl"),
    Need("base", "git", _on_path("git"), "git"),
    Need("real-node", "libseccomp headers (runc is built with seccomp)",
         _file("/usr/include/seccomp.h"), "libseccomp-dev"),
    Need("real-node", f"CNI plugins in {CNI_BIN_DIR}", _cni, "containernetworking-plugins"),
    Need("real-node", "iptables", _on_path("iptables"), "iptables"),
    Need("real-node", "ip (iproute2)", _on_path("ip"), "iproute2"),
    Need("real-node", "ipset (kube-router's NetworkPolicy sets)", _on_path("ipset"), "ipset"),
    Need("images", "buildah (daemonless image builds)", _on_path("buildah"), "buildah"),
    Need("images", "mmdebstrap (Debian base images)", _on_path("mmdebstrap"), "mmdebstrap"),
    Need("images", "busybox-static (the helper image)", _dpkg("busybox-static"), "busybox-static"),
    Need("images", "skopeo (registry reads)", _on_path("skopeo"), "skopeo"),
    Need("mpi", "sshd (multi-node MPI bootstrap)", _sshd, "openssh-server"),
    Need("mpi", "ssh-keygen", _on_path("ssh-keygen"), "openssh-client"),
    Need("mpi", "mpirun (Open MPI)", _on_path("mpirun"), "openmpi-bin"),
    Need("argocd", "redis-server (Argo CD's cache)", _on_path("redis-server"), "redis-server"),
    Need("metrics", "promtool (the chart's rules)", _on_path("promtool"), "prometheus"),
    Need("metrics", "haproxy (the scale-to-zero activator's config, checked)",
         _on_path("haproxy"), "haproxy"),
)


def _version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"go(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def go_problem() -> str | None:
    """Why the local toolchain cannot build the cluster, or None."""
    go = shutil.which("go")
    if not go:
        return ("`go` is not on PATH: Go >= 1.26 builds the local cluster; install it "
                "(https://go.dev/doc/install) and put its bin/ on PATH")
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{go} env GOVERSION` failed ({exc}): reinstall Go >= 1.26"
    found = _version(out)
    if found is None or found < MIN_GO:
        return (f"{go} is {out.strip() or 'of unknown version'}; the local cluster needs Go >= "
                f"{MIN_GO[0]}.{MIN_GO[1]}: install a newer Go and put it first on PATH")
    return None


def python_problem(version: Sequence[int] = tuple(sys.version_info[:2])) -> str | None:
    if tuple(version) < MIN_PYTHON:
        return (f"Python {version[0]}.{version[1]} is too old: tritonllm needs Python >= 3.11 "
                "(run with PYTHON=python3.11 scripts/...)")
    return None


def _cold(cache: Path) -> bool:
    """No cluster binaries cached yet: the first build is ahead."""
    return not any((cache / "bin").glob("k8s-*"))


def disk_problem(cache: Path) -> str | None:
    probe = cache
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free / 2**30
    need = COLD_FREE_GIB if _cold(cache) else WARM_FREE_GIB
    if free < need:
        return (f"{free:.1f} GiB free under {probe}, the caches need about {need} GiB "
                f"({'first build' if need == COLD_FREE_GIB else 'warm'}): free space, or point "
                "TRITONLLM_CACHE (and GOMODCACHE, GOCACHE) at a larger disk")
    return None


def root_problem(uid: int) -> str | None:
    if uid != 0:
        return ("the real node needs root (containers, bridges, iptables, cgroups): run as root, "
                "or leave it out with `scripts/demo --no-real-node` "
                "(tests: TRITONLLM_TEST_REAL_NODE=0 scripts/test)")
    return None


def cgroup_problem(root: Path = CGROUP_FS) -> str | None:
    absent = [c for c in NEEDED_CONTROLLERS if not (root / c / "cgroup.procs").exists()]
    if absent:
        return (f"cgroup v1 controllers {absent} are not mounted under {root}: the real node's "
                "kubelet needs hybrid cgroups (boot with systemd.unified_cgroup_hierarchy=0), "
                "or leave it out with `scripts/demo --no-real-node`")
    return None


def missing(tiers: Sequence[str]) -> list[Need]:
    return [n for n in NEEDS if n.tier in tiers and not n.present()]


def problems(tiers: Sequence[str], uid: int | None = None) -> list[str]:
    """What nothing here can fix, one line each (empty: go on)."""
    uid = os.geteuid() if uid is None else uid
    found = [python_problem(), go_problem(), disk_problem(cache_root())]
    if "real-node" in tiers:
        found += [root_problem(uid), cgroup_problem()]
    return [p for p in found if p]


def _apt(packages: Sequence[str], say: Callable[[str], None]) -> None:
    """Install Debian packages, or raise SetupError naming the command to run by hand."""
    by_hand = f"apt-get install {' '.join(packages)}"
    sudo: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            raise SetupError(f"missing Debian packages, and not root: run `{by_hand}` as root")
        sudo = ["sudo", "-n"]
    if not shutil.which("apt-get"):
        raise SetupError(f"no apt-get on this machine: install by hand what `{by_hand}` would")
    say(f"   installing (apt-get): {' '.join(packages)}")
    update = subprocess.run([*sudo, "apt-get", "update", "-qq"], capture_output=True, text=True,
                            check=False)
    if update.returncode != 0:
        last = (update.stderr or update.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SetupError(f"apt cannot reach its mirror ({last[0]}): fix apt's sources or the "
                         f"network, then `{by_hand}`")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    inst = subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends",
                           *packages], capture_output=True, text=True, env=env, check=False)
    if inst.returncode != 0:
        tail = (inst.stderr or inst.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SetupError(f"`{by_hand}` failed: {tail[0]}")


def ensure(tiers: Sequence[str], *, install: bool = True,
           say: Callable[[str], None] = print) -> list[str]:
    """Check every tier's needs, install the missing Debian packages when ``install``; returns
    the packages installed. Raises SetupError (every line that needs a person) otherwise."""
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        raise SetupError(f"unknown tiers {unknown}; known: {', '.join(TIERS)}")
    fatal = problems(tiers)
    if fatal:
        raise SetupError("\n".join(fatal))
    need = missing(tiers)
    if not need:
        return []
    packages = sorted({n.package for n in need if n.package})
    if not install:
        raise SetupError("\n".join(
            f"{n.what} is missing: apt-get install {n.package}" for n in need))
    _apt(packages, say)
    still = missing(tiers)
    if still:
        raise SetupError("\n".join(f"{n.what} still missing after installing {n.package}"
                                   for n in still))
    return packages


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonllm_dev.preflight",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tier", action="append", choices=TIERS,
                        help="a tier to check (repeatable; default: every tier)")
    parser.add_argument("--demo", action="store_true", help="the tiers scripts/demo needs")
    parser.add_argument("--no-real-node", action="store_true",
                        help="leave out the real-node tier (no root needed)")
    parser.add_argument("--check", action="store_true", help="report only, install nothing")
    args = parser.parse_args(argv)
    tiers = list(args.tier or (DEMO_TIERS if args.demo else TEST_TIERS))
    if args.no_real_node:
        tiers = [t for t in tiers if t != "real-node"]
    t0 = time.monotonic()
    print(f"== set-up: {', '.join(tiers)}", flush=True)
    try:
        installed = ensure(tiers, install=not args.check)
    except SetupError as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    done = f"installed {', '.join(installed)}; " if installed else ""
    print(f"   ready ({done}{time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
