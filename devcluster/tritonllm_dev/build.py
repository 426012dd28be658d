"""Build the local cluster's binaries from Go modules and cache them per version.

Why a build at all: the build machine and CI have no Docker and can reach only package registries
(the Go module proxy among them), never dl.k8s.io or GitHub releases. So:

- kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come from a *wrapper module*:
  ``k8s.io/kubernetes`` requires its staging modules at ``v0.0.0`` and redirects them with replace
  directives, which ``go install pkg@version`` refuses; a main module of our own requires
  ``k8s.io/kubernetes vX.Y.Z`` and replaces every staging module with its published ``v0.Y.Z``.
  The four binaries are built in one ``go build`` so shared packages compile once, and the
  version ldflags are stamped (kwok, helm and kopf read ``/version``).
- etcd: the same trick (its server module has replace directives too), with a smaller wrapper.
- kwok, LeaderWorkerSet and helm have clean go.mod files: plain ``go install pkg@version``.
- Argo CD: its go.mod replaces its gitops-engine with a local directory (published on its own as
  ``github.com/argoproj/argo-cd/gitops-engine/v3``), so it is built in a wrapper module that
  copies its other replace directives; it needs Go 1.27 (see :mod:`tritonllm_dev.versions`).
  Its web UI is embedded from ``ui/dist/app``, which the module ships as an empty placeholder:
  the binary serves no UI, which the tests never use.
- The autoscaling tier: Prometheus by ``go install`` with only its Kubernetes service discovery
  (build tags), no web UI assets; prometheus-adapter in a small wrapper module (to name its binary);
  KEDA's operator and metrics API server in one ``go build`` of a wrapper module that copies
  KEDA's replace directive (like Argo CD, but under the local toolchain); KEDA's and
  prometheus-operator's CRDs copied from their module zips (no prometheus-operator binary).
- The real node: kubelet and kube-proxy join the Kubernetes wrapper build; containerd (its
  ``containerd``, ``containerd-shim-runc-v2`` and ``ctr``, with kind's build tags), CoreDNS, the
  distribution registry and local-path-provisioner are plain ``go install``; the pause binary is
  compiled with gcc from the Kubernetes module's ``build/pause/linux/pause.c`` (static).

Every component lands in ``~/.cache/tritonllm/bin/<component>-<version>/`` (see
:mod:`tritonllm_dev.versions`), written through a temporary directory and moved in place, so a
half-finished build never looks complete. A file lock serialises concurrent builds of the same
component. A cold build is long (tens of minutes on 2 cores, mostly the API server), so progress —
component, step, packages compiled, elapsed time — is reported every few seconds.

Run as ``python -m tritonllm_dev.build [component ...]`` (CI uses this to warm the cache).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from tritonllm_dev.versions import (
    ARGOCD,
    ARGOCD_CRD_FILES,
    ARGOCD_GO_TOOLCHAIN,
    ARGOCD_SCRIPTS,
    COMPONENTS,
    CONTAINERD,
    COREDNS,
    ETCD,
    HELM,
    KEDA,
    KEDA_CRD_FILES,
    KUBE_ROUTER,
    KUBERNETES,
    KWOK,
    LOCAL_PATH,
    LWS,
    LWS_CRD_FILES,
    PAUSE,
    PROMETHEUS,
    PROMETHEUS_ADAPTER,
    PROMETHEUS_OPERATOR_CRD_FILES,
    PROMETHEUS_OPERATOR_CRDS,
    REGISTRY,
    RUNC,
    Component,
    cache_root,
)

Progress = Callable[[str], None]

#: Seconds between progress lines while a Go command runs.
PROGRESS_INTERVAL = 15.0

#: Main packages of the Kubernetes wrapper build, by binary name.
KUBERNETES_PACKAGES = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
}

#: containerd's build tags, as kind builds it: no storage drivers that need cgo or kernel bits
#: this machine lacks (btrfs, zfs, devmapper, aufs).
CONTAINERD_TAGS = "no_aufs,no_zfs,no_btrfs,no_devmapper"

#: Prometheus's build tags: no service discovery but Kubernetes' (its plugins/ files).
PROMETHEUS_TAGS = "remove_all_sd,enable_kubernetes_sd"


def prometheus_release(module_version: str) -> str:
    """Prometheus's release for its Go module version (``v0.316.0`` is 3.16.0)."""
    _, minor, patch = module_version.removeprefix("v").split(".")
    return f"{int(minor) // 100}.{int(minor) % 100}.{patch}"


class BuildError(RuntimeError):
    """A Go command failed; the message names the log file with its output."""


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fmt_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def go_env() -> dict[str, str]:
    """Environment for Go commands: module mode, the local toolchain, static binaries."""
    env = dict(os.environ)
    env.update(GOWORK="off", GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="")
    return env


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "the `go` command is not on PATH (Go >= 1.26 is needed to build the cluster)"
        )
    return go


def logs_dir() -> Path:
    path = cache_root() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(
    cmd: Sequence[str],
    *,
    label: str,
    log: Path,
    progress: Progress,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``cmd``, appending its output to ``log``, reporting progress; return its output.

    Go's ``-v`` flag prints one line per package compiled, which is what the progress counts.
    """
    start = time.monotonic()
    lines: list[str] = []
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {shlex.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env or go_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                fh.write(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while True:
            try:
                proc.wait(timeout=PROGRESS_INTERVAL)
                break
            except subprocess.TimeoutExpired:
                elapsed = _fmt_elapsed(time.monotonic() - start)
                progress(f"  {label}: {len(lines)} lines of output, {elapsed}")
        reader.join()
    if proc.returncode != 0:
        tail = "".join(lines[-15:])
        raise BuildError(f"{label} failed (exit {proc.returncode}); full log: {log}\n{tail}")
    return "".join(lines)


@contextlib.contextmanager
def _lock(component: Component) -> Iterator[None]:
    lock_path = cache_root() / "bin" / f".{component.key}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _module_info(
    module: str,
    *,
    cwd: Path,
    log: Path,
    progress: Progress,
    env: dict[str, str] | None = None,
) -> dict[str, str]:
    """``go mod download -json module@version`` (needs a go.mod in ``cwd``)."""
    out = _run(
        [_go(), "mod", "download", "-json", module],
        label=f"download {module}",
        log=log,
        progress=progress,
        cwd=cwd,
        env=env,
    )
    info: dict[str, str] = json.loads(out[out.index("{") :])
    if info.get("Error"):
        raise BuildError(f"go mod download {module}: {info['Error']}")
    return info


def _version_ldflags(version: str, build_date: str) -> str:
    """The ``-X`` flags hack/lib/version.sh sets, for component-base and client-go."""
    minor = version.split(".")[1]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={build_date}",
        ]
    return " ".join(flags)


def _install_outputs(component: Component, tmp: Path) -> None:
    """Move built files from ``tmp`` into the component's cache directory atomically, one by one."""
    component.bindir.mkdir(parents=True, exist_ok=True)
    for src in tmp.iterdir():
        os.replace(src, component.bindir / src.name)


def _build_kubernetes(
    component: Component, missing: list[str], log: Path, progress: Progress
) -> None:
    version = component.version
    staging_version = "v0." + version.removeprefix("v1.")
    src = cache_root() / "src" / component.key
    src.mkdir(parents=True, exist_ok=True)
    go = _go()
    # A throw-away go.mod so that `go mod download` runs inside a module.
    (src / "go.mod").write_text("module local.test/k8sbins\n\ngo 1.26\n")
    info = _module_info(f"k8s.io/kubernetes@{version}", cwd=src, log=log, progress=progress)
    kgomod = Path(info["GoMod"]).read_text()
    staging: list[str] = []
    godebug = ""
    for line in kgomod.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            staging.append(parts[0])
        elif line.startswith("godebug"):
            godebug = line
    if not staging:
        raise BuildError(
            f"no staging replace directives found in k8s.io/kubernetes@{version} go.mod"
        )
    replaces = "\n".join(f"\t{m} => {m} {staging_version}" for m in staging)
    (src / "go.mod").write_text(
        "module local.test/k8sbins\n\ngo 1.26\n\n"
        f"{godebug}\n\nrequire k8s.io/kubernetes {version}\n\nreplace (\n{replaces}\n)\n"
    )
    packages = [f"{p}@{version}" for p in KUBERNETES_PACKAGES.values()]
    progress(f"  k8s {version}: resolving modules")
    _run([go, "get", *packages], label="go get (k8s)", log=log, progress=progress, cwd=src)
    build_date = info.get("Time") or _info_time(info)
    ldflags = _version_ldflags(version, build_date)
    targets = [KUBERNETES_PACKAGES[b] for b in missing]
    progress(f"  k8s {version}: go build {' '.join(missing)}")
    with tempfile.TemporaryDirectory(dir=component.bindir.parent) as tmp:
        _run(
            [
                go,
                "build",
                "-v",
                "-p",
                str(os.cpu_count() or 2),
                "-trimpath",
                "-tags=selinux,notest",
                f"-ldflags={ldflags}",
                "-o",
                tmp + "/",
                *targets,
            ],
            label=f"go build k8s {version}",
            log=log,
            progress=progress,
            cwd=src,
        )
        _install_outputs(component, Path(tmp))


def _info_time(info: dict[str, str]) -> str:
    """Release time of a module version (from its .info file), used as the stamped build date."""
    info_file = info.get("Info")
    if info_file and Path(info_file).is_file():
        return str(json.loads(Path(info_file).read_text()).get("Time", "1970-01-01T00:00:00Z"))
    return "1970-01-01T00:00:00Z"


def _build_in_wrapper(
    component: Component,
    package: str,
    binary: str,
    log: Path,
    progress: Progress,
    *,
    ldflags: str = "-s -w",
) -> None:
    """``go get package@version`` in a small wrapper module, then ``go build`` it as ``binary``.

    Used where ``go install pkg@version`` does not work: modules with replace directives (etcd),
    or whose version list the proxy refuses (LWS: ``go install`` loads deprecation notices from
    ``@v/list``, which answers 403, while ``go get`` of an exact version does not).
    """
    src = cache_root() / "src" / component.key
    src.mkdir(parents=True, exist_ok=True)
    go = _go()
    (src / "go.mod").write_text(f"module local.test/{component.name}bin\n\ngo 1.26\n")
    progress(f"  {component.name} {component.version}: resolving modules")
    _run(
        [go, "get", f"{package}@{component.version}"],
        label=f"go get ({component.name})",
        log=log,
        progress=progress,
        cwd=src,
    )
    with tempfile.TemporaryDirectory(dir=component.bindir.parent) as tmp:
        progress(f"  {component.name} {component.version}: go build {package}")
        _run(
            [
                go,
                "build",
                "-v",
                "-trimpath",
                f"-ldflags={ldflags}",
                "-o",
                f"{tmp}/{binary}",
                package,
            ],
            label=f"go build {component.name} {component.version}",
            log=log,
            progress=progress,
            cwd=src,
        )
        _install_outputs(component, Path(tmp))


def _go_install(
    component: Component,
    package: str | Sequence[str],
    log: Path,
    progress: Progress,
    *,
    ldflags: str = "-s -w",
    tags: str = "",
    cgo: bool = False,
) -> None:
    packages = [package] if isinstance(package, str) else list(package)
    with tempfile.TemporaryDirectory(dir=component.bindir.parent) as tmp:
        env = go_env()
        env["GOBIN"] = tmp
        if cgo:
            env["CGO_ENABLED"] = "1"
        progress(f"  {component.name} {component.version}: go install {' '.join(packages)}")
        _run(
            [
                _go(),
                "install",
                "-v",
                "-trimpath",
                *([f"-tags={tags}"] if tags else []),
                f"-ldflags={ldflags}",
                *(f"{p}@{component.version}" for p in packages),
            ],
            label=f"go install {component.name} {component.version}",
            log=log,
            progress=progress,
            env=env,
        )
        _install_outputs(component, Path(tmp))


def _build_lws(component: Component, missing: list[str], log: Path, progress: Progress) -> None:
    if "lws" in missing:
        pkg = "sigs.k8s.io/lws/pkg/version"
        ldflags = f"-s -w -X {pkg}.GitVersion={component.version}"
        # The main package is sigs.k8s.io/lws/cmd: build it under the name `lws`.
        _build_in_wrapper(component, "sigs.k8s.io/lws/cmd", "lws", log, progress, ldflags=ldflags)
    crds = [f for f in LWS_CRD_FILES if f in missing]
    if crds:
        # The CRDs ship in the module zip: copy them from the module cache next to the binary.
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "go.mod").write_text("module local.test/lwscrd\n\ngo 1.26\n")
            info = _module_info(
                f"sigs.k8s.io/lws@{component.version}", cwd=Path(tmp), log=log, progress=progress
            )
        _copy_module_files(component, Path(info["Dir"]) / "config" / "crd" / "bases", crds)


def _copy_module_files(component: Component, source: Path, names: Sequence[str]) -> None:
    """Copy ``names`` from ``source`` (a directory of a module in the module cache) into the
    component's cache directory, each through a temporary name."""
    component.bindir.mkdir(parents=True, exist_ok=True)
    for name in names:
        dest = component.path(name)
        partial = dest.with_name(name + ".tmp")
        shutil.copyfile(source / name, partial)
        os.replace(partial, dest)


def _build_pause(component: Component, log: Path, progress: Progress) -> None:
    """The pod sandbox binary, from the Kubernetes module's own source (static, as upstream)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise BuildError("gcc is not on PATH (needed to compile the pod sandbox `pause` binary)")
    with tempfile.TemporaryDirectory() as mod:
        Path(mod, "go.mod").write_text("module local.test/pausesrc\n\ngo 1.26\n")
        info = _module_info(
            f"k8s.io/kubernetes@{KUBERNETES.version}", cwd=Path(mod), log=log, progress=progress
        )
    source = Path(info["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    with tempfile.TemporaryDirectory(dir=component.bindir.parent) as tmp:
        _run(
            [
                gcc,
                "-Os",
                "-Wall",
                "-Werror",
                "-static",
                f"-DVERSION=v{component.version}-tritonllm",
                "-o",
                f"{tmp}/pause",
                str(source),
            ],
            label="gcc pause.c",
            log=log,
            progress=progress,
        )
        _install_outputs(component, Path(tmp))


def _build_containerd(component: Component, log: Path, progress: Progress) -> None:
    mod = "github.com/containerd/containerd/v2"
    ldflags = f"-s -w -X {mod}/version.Version={component.version.removeprefix('v')}"
    packages = [f"{mod}/cmd/{b}" for b in component.binaries]
    _go_install(component, packages, log, progress, ldflags=ldflags, tags=CONTAINERD_TAGS)


def _build_runc(component: Component, log: Path, progress: Progress) -> None:
    """runc needs cgo (its nsenter C code) and libseccomp for ``seccomp: RuntimeDefault``."""
    if not Path("/usr/include/seccomp.h").is_file():
        raise BuildError(
            "libseccomp headers missing (needed to build runc with seccomp): "
            "apt-get install libseccomp-dev (the README commands do)"
        )
    ldflags = f"-s -w -X main.version={component.version.removeprefix('v')}"
    package = "github.com/opencontainers/runc"
    tags = "seccomp urfave_cli_no_docs"
    _go_install(component, package, log, progress, ldflags=ldflags, tags=tags, cgo=True)


def module_replaces(gomod: str) -> list[str]:
    """The replace directives of a go.mod (``old [v] => new v``), less those into its own tree
    (``=> ./dir``), which a module that requires it cannot follow."""
    replaces: list[str] = []
    in_block = False
    for line in gomod.splitlines():
        text = line.split("//")[0].strip()
        if text == "replace (":
            in_block = True
            continue
        if in_block and text == ")":
            in_block = False
            continue
        body = text.removeprefix("replace ").strip() if text.startswith("replace ") else text
        is_replace = in_block or text.startswith("replace ")
        if is_replace and "=>" in body and not body.split("=>")[1].strip().startswith("."):
            replaces.append(body)
    return replaces


def _replacing_wrapper(
    component: Component,
    module: str,
    go_version: str,
    env: dict[str, str],
    log: Path,
    progress: Progress,
) -> tuple[Path, dict[str, str]]:
    """A wrapper module (in the source cache) requiring ``module`` at the component's version
    with a copy of its replace directives, which ``go install`` would refuse; returns its
    directory and the module's download info."""
    src = cache_root() / "src" / component.key
    src.mkdir(parents=True, exist_ok=True)
    header = f"module local.test/{component.name}bin\n\ngo {go_version}\n"
    (src / "go.mod").write_text(header)
    (src / "go.sum").unlink(missing_ok=True)
    info = _module_info(
        f"{module}@{component.version}", cwd=src, log=log, progress=progress, env=env
    )
    replaces = module_replaces(Path(info["GoMod"]).read_text())
    if not replaces:
        raise BuildError(f"no replace directives found in {module}@{component.version} go.mod")
    block = "\n".join(f"\t{r}" for r in replaces)
    (src / "go.mod").write_text(
        f"{header}\nrequire {module} {component.version}\n\nreplace (\n{block}\n)\n"
    )
    return src, info


def _go_build(
    component: Component,
    packages: Sequence[str],
    output: str,
    *,
    src: Path,
    env: dict[str, str],
    ldflags: str,
    log: Path,
    progress: Progress,
    renames: dict[str, str] | None = None,
) -> None:
    """``go build`` ``packages`` in the wrapper module ``src`` into the component's cache, as the
    file ``output`` (one package) or under their own names (``output`` empty), then ``renames``
    (built name -> cached name)."""
    with tempfile.TemporaryDirectory(dir=component.bindir.parent) as tmp:
        progress(f"  {component.name} {component.version}: go build {' '.join(packages)}")
        _run(
            [_go(), "build", "-v", "-trimpath", f"-ldflags={ldflags}", "-o",
             f"{tmp}/{output}", *packages],
            label=f"go build {component.name} {component.version}",
            log=log,
            progress=progress,
            cwd=src,
            env=env,
        )
        for built, name in (renames or {}).items():
            os.replace(Path(tmp, built), Path(tmp, name))
        _install_outputs(component, Path(tmp))


def _build_keda(component: Component, missing: list[str], log: Path, progress: Progress) -> None:
    """KEDA's operator and metrics API server, in one ``go build`` so shared packages compile
    once; its CRDs from the module zip."""
    module = "github.com/kedacore/keda/v2"
    env = go_env()
    env["GOFLAGS"] = "-mod=mod"
    src, info = _replacing_wrapper(component, module, "1.26.0", env, log, progress)
    mains = {"keda-operator": f"{module}/cmd/operator", "keda-adapter": f"{module}/cmd/adapter"}
    wanted = [b for b in mains if b in missing]
    if wanted:
        progress(f"  keda {component.version}: resolving modules")
        _run(
            [_go(), "get", *(f"{mains[b]}@{component.version}" for b in wanted)],
            label="go get (keda)",
            log=log,
            progress=progress,
            cwd=src,
            env=env,
        )
        ldflags = f"-s -w -X {module}/version.Version={component.version.removeprefix('v')}"
        commit = json.loads(Path(info["Info"]).read_text()).get("Origin", {}).get("Hash")
        if commit:
            ldflags += f" -X {module}/version.GitCommit={commit}"
        renames = {mains[b].rsplit("/", 1)[1]: b for b in wanted}  # named after their dirs
        _go_build(component, [mains[b] for b in wanted], "", src=src, env=env, ldflags=ldflags,
                  log=log, progress=progress, renames=renames)
    crds = [f for f in KEDA_CRD_FILES if f in missing]
    _copy_module_files(component, Path(info["Dir"]) / "config" / "crd" / "bases", crds)


def _fetch_prometheus_operator_crds(component: Component, log: Path, progress: Progress) -> None:
    """Only CRDs: prometheus-operator's example CRD manifests from its module zip."""
    module = f"github.com/prometheus-operator/prometheus-operator@{component.version}"
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "go.mod").write_text("module local.test/promopcrd\n\ngo 1.26\n")
        info = _module_info(module, cwd=Path(tmp), log=log, progress=progress)
    source = Path(info["Dir"]) / "example" / "prometheus-operator-crd"
    _copy_module_files(component, source, [f for f in PROMETHEUS_OPERATOR_CRD_FILES
                                           if not component.path(f).is_file()])


def _build_argocd(component: Component, missing: list[str], log: Path, progress: Progress) -> None:
    module = "github.com/argoproj/argo-cd/v3"
    env = go_env()
    env.update(GOTOOLCHAIN=ARGOCD_GO_TOOLCHAIN, GOFLAGS="-mod=mod")
    src, info = _replacing_wrapper(component, module, "1.27.0", env, log, progress)
    if "argocd" in missing:
        progress(f"  argocd {component.version}: resolving modules ({ARGOCD_GO_TOOLCHAIN})")
        _run(
            [_go(), "get", f"{module}/cmd@{component.version}"],
            label="go get (argocd)",
            log=log,
            progress=progress,
            cwd=src,
            env=env,
        )
        pkg = f"{module}/common"
        ldflags = (
            f"-s -w -X {pkg}.version={component.version.removeprefix('v')}"
            f" -X {pkg}.buildDate={_info_time(info)} -X {pkg}.gitTreeState=clean"
        )
        _go_build(component, [f"{module}/cmd"], "argocd", src=src, env=env, ldflags=ldflags,
                  log=log, progress=progress)
    crds = [f for f in ARGOCD_CRD_FILES if f in missing]
    _copy_module_files(component, Path(info["Dir"]) / "manifests" / "crds", crds)
    for name in (f for f in ARGOCD_SCRIPTS if f in missing):
        dest = component.path(name)
        partial = dest.with_name(name + ".tmp")
        shutil.copyfile(Path(info["Dir"]) / "hack" / name, partial)
        partial.chmod(0o755)
        os.replace(partial, dest)


def build_component(component: Component, progress: Progress = _stderr) -> bool:
    """Build ``component`` if anything of it is missing; return True when it built something."""
    if not component.missing():
        return False
    component.bindir.parent.mkdir(parents=True, exist_ok=True)
    with _lock(component):
        missing = component.missing()  # another process may have built it meanwhile
        if not missing:
            return False
        log = logs_dir() / f"build-{component.key}.log"
        start = time.monotonic()
        progress(f"building {component.key} ({', '.join(missing)}); log: {log}")
        if component is KUBERNETES:
            _build_kubernetes(
                component, [b for b in missing if b in KUBERNETES_PACKAGES], log, progress
            )
        elif component is ETCD:
            _build_in_wrapper(component, "go.etcd.io/etcd/server/v3", "etcd", log, progress)
        elif component is KWOK:
            _go_install(component, "sigs.k8s.io/kwok/cmd/kwok", log, progress)
        elif component is LWS:
            _build_lws(component, missing, log, progress)
        elif component is HELM:
            ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={component.version}"
            _go_install(component, "helm.sh/helm/v3/cmd/helm", log, progress, ldflags=ldflags)
        elif component is CONTAINERD:
            _build_containerd(component, log, progress)
        elif component is RUNC:
            _build_runc(component, log, progress)
        elif component is COREDNS:
            _go_install(component, "github.com/coredns/coredns", log, progress)
        elif component is REGISTRY:
            pkg = "github.com/distribution/distribution/v3"
            ldflags = f"-s -w -X {pkg}/version.version={component.version}"
            _go_install(component, f"{pkg}/cmd/registry", log, progress, ldflags=ldflags)
        elif component is LOCAL_PATH:
            _go_install(component, "github.com/rancher/local-path-provisioner", log, progress)
            built = component.bindir / "local-path-provisioner"
            if not built.exists():  # go install names it after the module's last element
                raise BuildError(f"local-path-provisioner binary missing in {component.bindir}")
        elif component is PAUSE:
            _build_pause(component, log, progress)
        elif component is KUBE_ROUTER:
            pkg = "github.com/cloudnativelabs/kube-router/v2"
            ldflags = f"-s -w -X {pkg}/pkg/version.Version={component.version}"
            _go_install(component, f"{pkg}/cmd/kube-router", log, progress, ldflags=ldflags)
        elif component is ARGOCD:
            _build_argocd(component, missing, log, progress)
        elif component is PROMETHEUS:
            release = prometheus_release(component.version)
            ldflags = f"-s -w -X github.com/prometheus/common/version.Version={release}"
            _go_install(component, "github.com/prometheus/prometheus/cmd/prometheus", log,
                        progress, ldflags=ldflags, tags=PROMETHEUS_TAGS)
        elif component is PROMETHEUS_ADAPTER:
            _build_in_wrapper(
                component,
                "sigs.k8s.io/prometheus-adapter/cmd/adapter",
                "prometheus-adapter",
                log,
                progress,
            )
        elif component is KEDA:
            _build_keda(component, missing, log, progress)
        elif component is PROMETHEUS_OPERATOR_CRDS:
            _fetch_prometheus_operator_crds(component, log, progress)
        else:  # pragma: no cover - COMPONENTS is closed
            raise BuildError(f"no recipe for {component.key}")
        still = component.missing()
        if still:
            raise BuildError(f"{component.key}: build finished but {still} are missing")
        progress(f"built {component.key} in {_fmt_elapsed(time.monotonic() - start)}")
        return True


def ensure_all(components: Sequence[Component] = COMPONENTS, progress: Progress = _stderr) -> None:
    """Build every missing component (cheap no-op when the cache is warm)."""
    for component in components:
        build_component(component, progress)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonllm_dev.build",
        description="Build and cache the local cluster's binaries (no-op when cached).",
    )
    names = [c.name for c in COMPONENTS]
    parser.add_argument(
        "components",
        nargs="*",
        metavar="COMPONENT",
        help=f"subset to build: {', '.join(names)} (default all)",
    )
    parser.add_argument(
        "--list", action="store_true", help="print cache paths and status, build nothing"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.components) - set(names))
    if unknown:
        parser.error(f"unknown component(s) {unknown}; choose from {names}")
    selected = [c for c in COMPONENTS if not args.components or c.name in args.components]
    if args.list:
        for c in selected:
            missing = c.missing()
            state = "ok" if not missing else "missing " + ",".join(missing)
            print(f"{c.key:20} {state:30} {c.bindir}")
        return 0
    start = time.monotonic()
    try:
        ensure_all(selected)
    except BuildError as exc:
        _stderr(f"error: {exc}")
        return 1
    _stderr(f"all components ready ({_fmt_elapsed(time.monotonic() - start)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
