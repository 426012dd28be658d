"""The tools behind the local image builds: buildah, mmdebstrap, pip and a registry's HTTP API.

Thin wrappers that run one command each, append its output to a log file, turn a failure into an
:class:`ImageError` that names the fix (never a stack trace in the CLI), and report progress
lines. What to build and when lives in :mod:`tritonllm_dev.images`.

buildah runs daemonless with its own storage under the cache (``--root``/``--runroot``), the
``overlay`` driver (``vfs`` when overlay cannot be mounted here) and ``--isolation chroot``:
``RUN`` steps need no OCI runtime and no cgroups, which sidesteps this VM's hybrid cgroup layout.
chroot isolation has no network namespace, so builds see the host's network; nothing in our
Dockerfiles downloads, though: pip reads a staged wheelhouse (``--no-index``) and the apt steps
are skipped when the base already has the packages.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]


class ImageError(RuntimeError):
    """An image could not be built or pushed; the message says what to do about it."""


class ToolMissing(ImageError):
    """buildah, mmdebstrap, pip or busybox-static is not installed."""


class NoSpace(ImageError):
    """The disk under the image cache is (or would be) full."""


class BuildFailed(ImageError):
    """A build step failed (the message names the log with its full output)."""


class RegistryError(ImageError):
    """The registry did not answer or refused a push."""


def stderr_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def elapsed(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def megabytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.1f} MB" if n < 10e6 else f"{n / 1e6:.0f} MB"


def parse_size(text: str) -> int:
    """A size as Go's units.HumanSize writes it ("260 MB", "775 kB", "1.2 GB") in bytes."""
    number, _, unit = text.strip().partition(" ")
    scale = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}[(unit or "B").upper()]
    return int(float(number) * scale)


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else "")
    if not path:
        raise ToolMissing(
            f"`{name}` is not installed: apt-get install {package} (the README commands do)"
        )
    return path


def _failure(label: str, code: int, log: Path, lines: Sequence[str]) -> ImageError:
    tail = "".join(lines[-15:])
    if any("no space left on device" in line.lower() for line in lines):
        return NoSpace(
            f"{label}: no space left on device; free space under {log.parent.parent} "
            f"(df -h) or move the cache with TRITONLLM_CACHE. Log: {log}"
        )
    return BuildFailed(f"{label} failed (exit {code}); full log: {log}\n{tail}")


def run(
    cmd: Sequence[str],
    *,
    label: str,
    log: Path,
    progress: Progress | None = None,
    steps: re.Pattern[str] | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``cmd``, appending its output to ``log``; return the output.

    Output lines matching ``steps`` become progress lines (with the time since the start).
    """
    start = time.monotonic()
    lines: list[str] = []
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {shlex.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(
                list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, text=True, errors="replace", env=env,
            )
        except FileNotFoundError as exc:
            raise ToolMissing(f"{label}: {cmd[0]} not found") from exc
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            fh.write(line)
            if progress is not None and steps is not None and steps.search(line):
                text = line.strip()
                text = text if len(text) <= 110 else text[:107] + "..."
                progress(f"    {text} [{elapsed(time.monotonic() - start)}]")
        code = proc.wait()
    if code != 0:
        raise _failure(label, code, log, lines)
    return "".join(lines)


# --- buildah ---------------------------------------------------------------------------------

BUILDAH_STEP = re.compile(r"STEP \d+/\d+:")


class Buildah:
    """buildah with its own storage (root, runroot, driver); every call is one command."""

    def __init__(self, root: Path, runroot: Path, driver: str, logs: Path) -> None:
        self.root, self.runroot, self.driver, self.logs = root, runroot, driver, logs
        self.exe = require_tool("buildah", "buildah")

    def argv(self, *args: str) -> list[str]:
        return [self.exe, "--root", str(self.root), "--runroot", str(self.runroot),
                "--storage-driver", self.driver, *args]

    def run(self, *args: str, label: str, log: str = "buildah.log",
            progress: Progress | None = None) -> str:
        steps = BUILDAH_STEP if progress is not None else None
        return run(self.argv(*args), label=label, log=self.logs / log, progress=progress,
                   steps=steps)

    def exists(self, ref: str) -> bool:
        argv = self.argv("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode == 0

    def inspect(self, ref: str) -> dict[str, Any]:
        out = self.run("inspect", "--type", "image", ref, label=f"buildah inspect {ref}")
        data: dict[str, Any] = json.loads(out)
        return data

    def size(self, ref: str) -> int:
        """Bytes of the image's layers in local storage (uncompressed; 4 significant digits, as
        `buildah images` shows it: the manifest's sizes are the compressed ones once the image
        was pulled back from a registry)."""
        out = self.run("images", "--json", ref, label=f"buildah images {ref}")
        return parse_size(json.loads(out)[0]["size"])

    def from_tar(self, tar: Path, ref: str, config: Sequence[str], log: str) -> None:
        """A one-layer image: the tarball's files at /, then ``buildah config`` ``config``."""
        name = f"tritonllm-import-{os.getpid()}"
        subprocess.run(self.argv("rm", name), capture_output=True, check=False)
        label = f"import {tar.name} as {ref}"
        self.run("from", "--name", name, "scratch", label=label, log=log)
        try:
            self.run("add", name, str(tar), "/", label=label, log=log)
            self.run("config", *config, name, label=label, log=log)
            self.run("commit", "--rm", name, ref, label=label, log=log)
        finally:
            subprocess.run(self.argv("rm", name), capture_output=True, check=False)

    def bud(self, context: Path, dockerfile: str, ref: str, build_args: dict[str, str],
            *, log: str, progress: Progress, labels: Mapping[str, str] | None = None) -> None:
        args = ["bud", "--isolation", "chroot", "--network", "host", "--pull=never", "--layers",
                "--format", "oci", "-f", str(context / dockerfile), "-t", ref]
        for key, value in sorted(build_args.items()):
            args += ["--build-arg", f"{key}={value}"]
        for key, value in sorted((labels or {}).items()):
            args += ["--label", f"{key}={value}"]
        self.run(*args, str(context), label=f"buildah bud {dockerfile}", log=log,
                 progress=progress)

    def push(self, ref: str, dest: str, *, log: str) -> str:
        """Push to ``docker://dest`` (plain HTTP, gzip layers); return the manifest digest.

        (buildah 1.28 compresses even with --disable-compression; its parallel gzip is also
        faster here than zstd: 9 s against 26 s for the 661 MB stand-in.)
        """
        digest_file = self.logs / f".digest-{os.getpid()}"
        args = ["push", "--tls-verify=false", "--digestfile", str(digest_file)]
        self.run(*args, ref, f"docker://{dest}", label=f"buildah push {dest}", log=log)
        digest = digest_file.read_text().strip()
        digest_file.unlink()
        return digest


def open_storage(base: Path, logs: Path, progress: Progress) -> Buildah:
    """buildah on overlay storage under ``base``, or vfs when overlay cannot work here."""
    for driver in ("overlay", "vfs"):
        root, runroot = base / f"storage-{driver}", base / f"run-{driver}"
        root.mkdir(parents=True, exist_ok=True)
        runroot.mkdir(parents=True, exist_ok=True)
        b = Buildah(root, runroot, driver, logs)
        probe = subprocess.run(b.argv("images", "--quiet"), capture_output=True, text=True,
                               check=False)
        if probe.returncode == 0:
            return b
        first = (probe.stderr.strip().splitlines() or ["?"])[-1]
        if driver == "overlay":
            progress(f"images: overlay storage unusable here ({first}); using vfs (slower, "
                     "every layer a full copy)")
        else:
            raise BuildFailed(f"buildah cannot open its storage under {base}: {first}")
    raise AssertionError("unreachable")


# --- Debian base root filesystems (mmdebstrap) -------------------------------------------------

MMDEBSTRAP_STEP = re.compile(r"^I: (downloading|extracting|installing|creating|success)")
#: Leave out documentation, man pages and translations (copyright files stay).
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)


def debian_sources(text: str) -> list[tuple[str, str, str]]:
    """(URI, suite, components) of the ``Types: deb`` entries of a deb822 ``.sources`` file, or
    of the ``deb`` lines of a one-line-style ``sources.list``."""
    out: list[tuple[str, str, str]] = []
    if not re.search(r"^uris:", text, re.IGNORECASE | re.MULTILINE):
        for raw in text.splitlines():
            words = re.sub(r"\[[^]]*\]", "", raw.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                out.append((words[1], words[2], " ".join(words[3:]) or "main"))
        return out
    for stanza in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            if raw.startswith("#") or ":" not in raw or raw[:1] in " \t":
                continue
            key, _, value = raw.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                out.append((uri, suite, fields.get("components", "main")))
    return out


def mirror_lines(entries: Sequence[tuple[str, str, str]], suite: str) -> list[str]:
    """One-line sources for ``suite``: the host's mirrors, with the host's codename in each suite
    (``trixie-security``) replaced by ours (``bookworm-security``). Debian's main archive when the
    host names none."""
    lines: list[str] = []
    for uri, host_suite, components in entries:
        rest = host_suite.split("-", 1)[1] if "-" in host_suite else ""
        line = f"deb {uri} {suite}{'-' + rest if rest else ''} {components}"
        if line not in lines:
            lines.append(line)
    return lines or [f"deb http://deb.debian.org/debian {suite} main"]


def host_mirror_lines(suite: str) -> list[str]:
    entries: list[tuple[str, str, str]] = []
    apt = Path("/etc/apt")
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]:
        if path.suffix in (".sources", ".list") and path.is_file():
            entries += debian_sources(path.read_text())
    return mirror_lines(entries, suite)


def mmdebstrap(out: Path, *, suite: str, packages: Sequence[str], mirrors: Sequence[str],
               debs: Path, log: Path, progress: Progress) -> None:
    """A Debian ``minbase`` root filesystem with ``packages`` as a tarball at ``out``.

    Downloaded .deb files are kept in ``debs`` (synced in before, out after), so a second base,
    or a rebuild after a package list change, downloads only what is new.
    """
    exe = require_tool("mmdebstrap", "mmdebstrap")
    debs.mkdir(parents=True, exist_ok=True)
    cache = shlex.quote(str(debs))
    cmd = [
        exe, "--variant=minbase", "--format=tar", f"--include={','.join(packages)}",
        "--aptopt=Acquire::Retries \"3\"",
        *(f"--dpkgopt={opt}" for opt in DPKG_EXCLUDES),
        "--skip=download/empty", "--skip=essential/unlink",
        "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/",
        f"--setup-hook=sync-in {cache} /var/cache/apt/archives/",
        f"--customize-hook=sync-out /var/cache/apt/archives {cache}",
        # No baked-in SSH host keys: sshd in pods uses the deployment's key (runtime/ssh.py).
        "--customize-hook=rm -f \"$1\"/var/cache/apt/archives/*.deb \"$1\"/etc/ssh/ssh_host_*",
        suite, str(out), *mirrors,
    ]
    run(cmd, label=f"mmdebstrap {out.name}", log=log, progress=progress, steps=MMDEBSTRAP_STEP)


# --- wheels (pip download on the host) ---------------------------------------------------------


def pip_target_args(python: str, glibc_minor: int) -> list[str]:
    """``pip download`` options for wheels that install on CPython ``python`` (e.g. "3.11") on
    x86_64 glibc 2.``glibc_minor`` (pip does not widen manylinux_2_X to older tags itself)."""
    short = python.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            "--abi", f"cp{short}"]
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(glibc_minor, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    for platform in platforms:
        args += ["--platform", platform]
    return args


def pip_download(dest: Path, requirements: Sequence[str], *, target: Sequence[str],
                 no_deps: bool, log: Path, progress: Progress) -> None:
    if not requirements:
        return
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
           "--progress-bar", "off", "--dest", str(dest), *target]
    if no_deps:
        cmd.append("--no-deps")
    run([*cmd, *requirements], label="pip download", log=log, progress=progress,
        steps=re.compile(r"^Successfully downloaded"))


# --- a registry's HTTP API (distribution, plain HTTP on loopback) -------------------------------

MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
))


def _request(url: str, method: str = "GET", data: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except OSError as exc:
        raise RegistryError(
            f"registry {url.split('/v2/')[0]} does not answer ({exc}): start it first "
            "(`tritonllm cluster up` runs one on 127.0.0.1:5000)"
        ) from exc


def registry_check(registry: str) -> None:
    status, _, _ = _request(f"http://{registry}/v2/")
    if status != 200:
        raise RegistryError(f"http://{registry}/v2/ answered {status}: not a registry API")


def manifest_digest(registry: str, repo: str, tag: str) -> str | None:
    """The digest ``repo:tag`` points at, or None when the registry lacks it."""
    status, headers, _ = _request(f"http://{registry}/v2/{repo}/manifests/{tag}", "HEAD",
                                  headers={"Accept": MANIFEST_TYPES})
    if status == 404:
        return None
    if status != 200:
        raise RegistryError(f"registry {registry}: HEAD {repo}:{tag} answered {status}")
    digest = {k.lower(): v for k, v in headers.items()}.get("docker-content-digest")
    return digest or None


def manifest(registry: str, repo: str, ref: str) -> tuple[str, bytes]:
    """(media type, bytes) of a manifest, by tag or digest."""
    status, headers, body = _request(f"http://{registry}/v2/{repo}/manifests/{ref}",
                                     headers={"Accept": MANIFEST_TYPES})
    if status != 200:
        raise RegistryError(f"registry {registry}: GET {repo}:{ref} answered {status}")
    media = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
    return media.split(";")[0], body


def retag(registry: str, repo: str, source: str, tag: str) -> str:
    """Point ``repo:tag`` at the manifest of ``repo:source`` (no blob moves); its digest."""
    media, body = manifest(registry, repo, source)
    status, headers, text = _request(f"http://{registry}/v2/{repo}/manifests/{tag}", "PUT",
                                     data=body, headers={"Content-Type": media})
    if status not in (200, 201):
        raise RegistryError(f"registry {registry}: tagging {repo}:{tag} answered {status}: "
                            f"{text[:200]!r}")
    return {k.lower(): v for k, v in headers.items()}.get("docker-content-digest", "")


def pushed_size(registry: str, repo: str, ref: str) -> int:
    """Bytes of the layers of ``repo:ref`` as stored in the registry."""
    _, body = manifest(registry, repo, ref)
    return sum(int(layer["size"]) for layer in json.loads(body).get("layers", []))
