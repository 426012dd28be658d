"""The real node's container images, built with no Docker daemon and served by the local registry.

No container registry is reachable from the build machine, and there is no Docker. So:

- **Bases** are Debian bookworm root filesystems bootstrapped by ``mmdebstrap --variant=minbase``
  from the host's own Debian mirror (its apt sources), with the packages each image needs, and
  imported into buildah's storage as ``localhost/tritonllm/base-<name>:<key>``. Downloaded .deb
  files are kept on the host (``<cache>/images/debs``) and reused by the next bootstrap.
- **Python packages** come from a wheelhouse that ``pip download`` fills on the host (its pip
  cache helps), staged into the build context; the Dockerfiles install with ``--no-index`` when
  ``PIP_OFFLINE=1``. A plain ``docker build`` of the same Dockerfiles uses a public base
  (``python:3.11-slim``, ``debian:bookworm-slim``) and PyPI.
- **Images** are built by buildah from our Dockerfiles (``buildah bud --isolation chroot``, storage
  under ``<cache>/images``): the operator image (``Dockerfile``) and the CPU stand-in for NGC's
  Triton TensorRT-LLM image (``images/triton-standin/Dockerfile``). Two more are assembled from
  single static binaries: the pod sandbox (pause, from :data:`versions.PAUSE`) and a busybox
  helper (Debian's busybox-static) for local-path-provisioner's helper pods and tests.
- **Content cache**: each image's key hashes exactly its inputs (the staged files, build
  arguments, base recipe, wheelhouse requirements). An image whose key is already in the target
  registry is neither built nor pushed again, one already in local storage is only pushed; the key
  is also its tag (``<registry>/tritonllm/<name>:<key>``), next to the stable tag that examples
  name (``:dev``, ``:3.10.2``, ``:1.35``, ``:26.07-trtllm-python-py3``).
- **Push** goes over plain HTTP to the registry on 127.0.0.1 (gzip layers), under the content
  tag; the stable tag is then pointed at the same manifest through the registry API, and
  :func:`ensure_images` returns ``<registry>/tritonllm/<name>:<stable tag>@<digest>``: pods pull
  by name and tag as in production, pinned to the exact content.

Entry points: :func:`ensure_images` (the cluster's ``up`` calls it once the registry runs) and
``python -m tritonllm_dev.images [--registry HOST:PORT] [--list] [--sbom] [NAME ...]``.

- **Provenance**: the Dockerfile images carry their base in OCI labels
  (``org.opencontainers.image.base.name``: the base's content-keyed tag; ``...base.digest``: its
  manifest digest in local storage) and their Debian package list at ``SBOM_PATH``
  (``dpkg-query -W`` at build time; label ``io.tritonllm.packages`` points at it); the busybox
  image names its one package in that label. ``--sbom`` prints both for built images.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from tritonllm.api.versions import NGC_TRTLLM
from tritonllm_dev import oci
from tritonllm_dev.oci import (
    BuildFailed,
    ImageError,
    NoSpace,
    Progress,
    ToolMissing,
    elapsed,
    stderr_progress,
)
from tritonllm_dev.versions import PAUSE, PAUSE_VERSION, cache_root

__all__ = [
    "IMAGES",
    "BuildFailed",
    "ImageError",
    "ImageResult",
    "NoSpace",
    "ToolMissing",
    "build_images",
    "ensure_images",
    "ensure_images_report",
]

#: Bump to rebuild every image after a change to how they are made (not what goes in them).
RECIPE_VERSION = "1"
SUITE = "bookworm"
#: bookworm's python3 and glibc: the wheelhouses are downloaded for them.
PYTHON = "3.11"
GLIBC_MINOR = 36
#: The NGC release whose tag the stand-in wears, so the operator renders for it exactly what it
#: renders for nvcr.io/nvidia/tritonserver:<release>-trtllm-python-py3 (the examples' image).
STANDIN_RELEASE = "26.07"
STANDIN_TAG = f"{STANDIN_RELEASE}-trtllm-python-py3"
STANDIN_TRTLLM = NGC_TRTLLM[STANDIN_RELEASE]
#: The wheel that carries a real tritonserver 2.51 for the CPU (reference: triton-on-cpu.md).
PYTRITON = "nvidia-pytriton==0.7.0"
BUSYBOX_TAG = "1.35"
#: bookworm's haproxy (2.6, with the Prometheus exporter built in).
ACTIVATOR_TAG = "2.6"
#: Free space the cache's filesystem needs before a build (bases, layers, wheels, contexts).
MIN_FREE_BYTES = 8 * 2**30
CHECKOUT = Path(__file__).resolve().parents[2]
OPERATOR_BASE_PACKAGES = ("python3", "python3-venv", "openssh-client", "ca-certificates")
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")


@dataclasses.dataclass(frozen=True)
class Image:
    """One image: its name (the key in :func:`ensure_images`' result) and stable tag."""

    name: str
    tag: str
    description: str

    @property
    def repository(self) -> str:
        return f"tritonllm/{self.name}"


IMAGES: tuple[Image, ...] = (
    Image("pause", PAUSE_VERSION, "pod sandbox (containerd's pinned sandbox image)"),
    Image("busybox", BUSYBOX_TAG, "busybox-static: local-path helper pods, tests"),
    Image("operator", "dev", "the operator (Dockerfile): tritonllm run, repository Jobs, pyz"),
    Image("triton-standin", STANDIN_TAG, "CPU stand-in for NGC's Triton TensorRT-LLM image"),
    Image("activator", ACTIVATOR_TAG, "HAProxy (Debian's): the scale-to-zero activator"),
)
BY_NAME = {image.name: image for image in IMAGES}


@dataclasses.dataclass
class ImageResult:
    """What :func:`ensure_images_report` did for one image."""

    name: str
    reference: str  # <registry>/tritonllm/<name>:<stable tag>@<digest> ("" without a registry)
    key: str
    local: str  # localhost/tritonllm/<name>:<key>
    state: str  # "cached" (nothing to do), "pushed" (was built before), "built" (and pushed)
    seconds: float
    size: int | None  # bytes in local storage (uncompressed); None when not there
    pushed_size: int | None = None  # bytes of its layers in the registry


# --- content keys (pure) --------------------------------------------------------------------


def content_key(files: Mapping[str, Path], params: Mapping[str, str]) -> str:
    """16 hex digits of a SHA-256 over the files (relative path, exec bit, content) and the
    parameters: equal inputs give an equal key, any changed byte, mode, path or parameter a
    different one."""
    h = hashlib.sha256(RECIPE_VERSION.encode())
    h.update(json.dumps(sorted(params.items())).encode())
    for rel in sorted(files):
        src = files[rel]
        mode = "x" if src.stat().st_mode & 0o111 else "-"
        h.update(f"\0{rel}\0{mode}\0".encode())
        h.update(hashlib.sha256(src.read_bytes()).digest())
    return h.hexdigest()[:16]


def tree(root: Path, rel: str, exclude: Sequence[str] = ()) -> dict[str, Path]:
    """Files under ``root/rel`` by path relative to ``root``, without caches and ``exclude``."""
    out: dict[str, Path] = {}
    for path in sorted((root / rel).rglob("*")):
        name = path.relative_to(root).as_posix()
        parts = set(path.relative_to(root).parts)
        if (not path.is_file() or "__pycache__" in parts or path.suffix == ".pyc"
                or any(p.endswith(".egg-info") for p in parts)
                or any(name == e or name.startswith(e + "/") for e in exclude)):
            continue
        out[name] = path
    return out


def checkout() -> Path:
    if not ((CHECKOUT / "Dockerfile").is_file() and (CHECKOUT / "images").is_dir()):
        raise ImageError(
            f"the images are built from a source checkout, and {CHECKOUT} is not one: run "
            "from a clone of the repository (pip install -e . -e devcluster)"
        )
    return CHECKOUT


# --- bases and wheelhouses -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Base:
    """A Debian minbase root filesystem with ``packages``, bootstrapped by mmdebstrap."""

    name: str
    packages: tuple[str, ...]

    def key(self, mirrors: Sequence[str]) -> str:
        params = {"suite": SUITE, "mirrors": "\n".join(mirrors),
                  "packages": ",".join(sorted(self.packages)),
                  "dpkg": "\n".join(oci.DPKG_EXCLUDES), "env": "\n".join(BASE_ENV)}
        return content_key({}, params)


@dataclasses.dataclass(frozen=True)
class Wheelhouse:
    """Wheels for bookworm's python3, downloaded on the host and cached by requirements."""

    name: str
    requirements: tuple[str, ...]
    no_deps: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return content_key({}, {"requirements": "\n".join(self.requirements),
                                "no_deps": "\n".join(self.no_deps), "python": PYTHON,
                                "glibc": str(GLIBC_MINOR)})

    @property
    def path(self) -> Path:
        return cache_root() / "images" / "wheels" / f"{self.name}-{self.key}"


def operator_wheelhouse(root: Path) -> Wheelhouse:
    """The operator's dependencies and build requirements, from pyproject.toml, with its
    `openai` extra (the image runs the OpenAI frontend too)."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    reqs = (*project["build-system"]["requires"], *project["project"]["dependencies"],
            *project["project"]["optional-dependencies"]["openai"])
    return Wheelhouse("operator", tuple(reqs))


def standin_wheelhouse(root: Path) -> Wheelhouse:
    text = (root / "images" / "triton-standin" / "requirements.txt").read_text()
    reqs = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return Wheelhouse("triton-standin", tuple(r for r in reqs if r), no_deps=(PYTRITON,))


def packages_file(path: Path) -> tuple[str, ...]:
    words = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return tuple(w for w in words if w)


# --- the build session ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How to make one image, and the content key of everything that goes into it."""

    image: Image
    key: str
    build: Callable[[Session, str], None]  # (session, local reference) -> builds it

    @property
    def local(self) -> str:
        return f"localhost/{self.image.repository}:{self.key}"


class Session:
    """One ensure/build run: buildah storage, logs, the host's Debian mirrors, progress."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.dir = cache_root() / "images"
        self.logs = self.dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.mirrors = oci.host_mirror_lines(SUITE)
        self._buildah: oci.Buildah | None = None
        self._space_checked = False

    @property
    def buildah(self) -> oci.Buildah:
        if self._buildah is None:
            self._buildah = oci.open_storage(self.dir, self.logs, self.progress)
        return self._buildah

    def require_space(self) -> None:
        if self._space_checked:
            return
        free = shutil.disk_usage(self.dir).free
        if free < MIN_FREE_BYTES:
            raise NoSpace(
                f"image builds need about {MIN_FREE_BYTES / 2**30:.0f} GiB free under {self.dir} "
                f"and {free / 2**30:.1f} GiB are: free space (`python -m "
                "tritonllm_dev.images --prune` drops unused layers) or set TRITONLLM_CACHE"
            )
        self._space_checked = True

    def base_ref(self, base: Base) -> str:
        return f"localhost/tritonllm/base-{base.name}:{base.key(self.mirrors)}"

    def ensure_base(self, base: Base) -> str:
        ref = self.base_ref(base)
        if self.buildah.exists(ref):
            return ref
        t0 = time.monotonic()
        self.progress(f"images: base-{base.name}: mmdebstrap {SUITE} minbase + "
                      f"{', '.join(base.packages)} (from {', '.join(self.mirrors)})")
        log = self.logs / f"base-{base.name}.log"
        log.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="base-", dir=self.dir) as tmp:
            tar = Path(tmp) / f"base-{base.name}.tar"
            oci.mmdebstrap(tar, suite=SUITE, packages=base.packages, mirrors=self.mirrors,
                           debs=self.dir / "debs", log=log, progress=self.progress)
            config = [arg for env in BASE_ENV for arg in ("--env", env)]
            config += ["--cmd", "/bin/bash", "--label", f"io.tritonllm.base={base.name}"]
            self.buildah.from_tar(tar, ref, config, log=log.name)
        size = oci.megabytes(self.buildah.size(ref))
        self.progress(f"images: base-{base.name}: {ref} ({size}) "
                      f"in {elapsed(time.monotonic() - t0)}")
        return ref

    def ensure_wheels(self, wheels: Wheelhouse) -> Path:
        path = wheels.path
        if (path / ".complete").is_file():
            return path
        t0 = time.monotonic()
        self.progress(f"images: wheels-{wheels.name}: pip download (CPython {PYTHON}, glibc "
                      f"2.{GLIBC_MINOR}) into {path}")
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        target = oci.pip_target_args(PYTHON, GLIBC_MINOR)
        log = self.logs / f"wheels-{wheels.name}.log"
        oci.pip_download(tmp, wheels.requirements, target=target, no_deps=False, log=log,
                         progress=self.progress)
        oci.pip_download(tmp, wheels.no_deps, target=target, no_deps=True, log=log,
                         progress=self.progress)
        names = sorted(p.name for p in tmp.iterdir())
        (tmp / ".complete").write_text("\n".join(names) + "\n")
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        size = sum(p.stat().st_size for p in path.iterdir())
        self.progress(f"images: wheels-{wheels.name}: {len(names)} wheels, {size / 1e6:.0f} MB "
                      f"in {elapsed(time.monotonic() - t0)}")
        return path

    @contextlib.contextmanager
    def context(self, files: Mapping[str, Path], wheels: Path) -> Iterator[Path]:
        """A build context holding exactly ``files`` and the wheelhouse (in images/wheels/)."""
        contexts = self.dir / "contexts"
        contexts.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="ctx-", dir=contexts) as tmp:
            ctx = Path(tmp)
            for rel, src in files.items():
                (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, ctx / rel)
            for wheel in wheels.glob("*.whl"):
                dest = ctx / "images" / "wheels" / wheel.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(wheel, dest)
                except OSError:
                    shutil.copy2(wheel, dest)
            yield ctx

    def bud(self, ref: str, *, files: Mapping[str, Path], dockerfile: str,
            args: Mapping[str, str], base: Base, wheels: Wheelhouse) -> None:
        base_ref = self.ensure_base(base)
        # Where the image comes from and what it carries, as labels: the base's name (its tag is
        # the base's content key) and manifest digest, and the package list the Dockerfile
        # writes. Not part of the image's key: the key already covers the base's content.
        labels = {"org.opencontainers.image.base.name": base_ref,
                  "org.opencontainers.image.base.digest": base_digest(self.buildah, base_ref),
                  "io.tritonllm.packages": SBOM_PATH}
        house = self.ensure_wheels(wheels)
        name = ref.split("/")[-1].split(":")[0]
        log = self.logs / f"build-{name}.log"
        log.unlink(missing_ok=True)
        with self.context(files, house) as ctx:
            self.buildah.bud(ctx, dockerfile, ref, dict(args), log=log.name,
                             progress=self.progress, labels=labels)

    def import_tar(self, ref: str, members: Sequence[Member], config: Sequence[str]) -> None:
        name = ref.split("/")[-1].split(":")[0]
        with tempfile.TemporaryDirectory(prefix="rootfs-", dir=self.dir) as tmp:
            tar = Path(tmp) / f"{name}.tar"
            write_tar(tar, members)
            self.buildah.from_tar(tar, ref, config, log=f"build-{name}.log")


# --- single-binary images: pause and busybox ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Member:
    """A tar entry: a directory (data None, no target), a file or a symlink (target)."""

    path: str
    mode: int = 0o755
    data: bytes | None = None
    target: str | None = None


def write_tar(out: Path, members: Sequence[Member]) -> None:
    """A reproducible tarball: root-owned, mtime 0, in the given order."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.path)
            info.mode, info.mtime, info.uid, info.gid = m.mode, 0, 0, 0
            if m.target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, m.target
                tar.addfile(info)
            elif m.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(m.data)
                tar.addfile(info, fileobj=_BytesReader(m.data))


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        chunk, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return chunk


def is_static_elf(path: Path) -> bool:
    """An ELF executable without a program interpreter (PT_INTERP), i.e. statically linked."""
    with path.open("rb") as fh:
        head = fh.read(64)
        if head[:5] != b"\x7fELF\x02":  # 64-bit ELF
            return False
        phoff = int.from_bytes(head[32:40], "little")
        phentsize = int.from_bytes(head[54:56], "little")
        phnum = int.from_bytes(head[56:58], "little")
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    types = (int.from_bytes(table[i:i + 4], "little") for i in range(0, len(table), phentsize))
    return 3 not in types  # PT_INTERP


def debian_package(path: Path) -> str:
    """`name=version arch` of the Debian package that installed `path` (the busybox image is that
    one file: its whole package list); empty when dpkg does not know the file."""
    # dpkg records the path it unpacked (/bin/busybox), which usrmerge links under /usr.
    names = {str(path), str(path.resolve()), f"/bin/{path.name}", f"/usr/bin/{path.name}"}
    for candidate in sorted(names):
        owner = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True,
                               check=False)
        if owner.returncode == 0:
            break
    else:
        return ""
    name = owner.stdout.split(":", 1)[0].strip()
    row = subprocess.run(["dpkg-query", "-W", "-f", "${Package}=${Version} ${Architecture}", name],
                         capture_output=True, text=True, check=False)
    return row.stdout.strip()


def base_digest(buildah: oci.Buildah, ref: str) -> str:
    """The manifest digest (sha256:...) of a base image in local storage."""
    digest = str(buildah.inspect(ref).get("FromImageDigest") or "")
    if not digest.startswith("sha256:"):
        raise ImageError(f"{ref} has no manifest digest in buildah's storage ({digest!r})")
    return digest


SBOM_PATH = "/usr/share/tritonllm/packages.txt"


def sbom(session: Session, ref: str) -> str:
    """The package list an image carries at SBOM_PATH (`dpkg-query -W` at build time)."""
    labels = session.buildah.inspect(ref).get("OCIv1", {}).get("config", {}).get("Labels") or {}
    if labels.get("io.tritonllm.packages") != SBOM_PATH:
        raise ImageError(f"{ref} has no package list (label io.tritonllm.packages)")
    name = f"tritonllm-sbom-{os.getpid()}"
    session.buildah.run("from", "--name", name, "--pull=never", ref, label=f"buildah from {ref}")
    try:
        mount = session.buildah.run("mount", name, label=f"buildah mount {name}").strip()
        return (Path(mount) / SBOM_PATH.lstrip("/")).read_text()
    finally:
        session.buildah.run("rm", name, label=f"buildah rm {name}")


def _labels(image: Image, **extra: str) -> list[str]:
    labels = {"org.opencontainers.image.title": f"tritonllm {image.name}",
              "org.opencontainers.image.description": image.description, **extra}
    return [arg for k, v in labels.items() for arg in ("--label", f"{k}={v}")]


def pause_recipe(session: Session) -> Recipe:
    image = BY_NAME["pause"]
    binary = PAUSE.path("pause")
    if not binary.is_file():
        from tritonllm_dev.build import BuildError, build_component

        try:
            build_component(PAUSE, session.progress)
        except BuildError as exc:
            raise BuildFailed(f"the pause binary: {exc}") from exc
    key = content_key({"pause": binary}, {"image": image.name, "version": PAUSE_VERSION})

    def build(s: Session, ref: str) -> None:
        members = [Member("pause", 0o755, binary.read_bytes())]
        config = ["--entrypoint", '["/pause"]', "--user", "65535:65535",
                  *_labels(image, **{"org.opencontainers.image.version": PAUSE_VERSION})]
        s.import_tar(ref, members, config)

    return Recipe(image, key, build)


def busybox_recipe(session: Session) -> Recipe:
    image = BY_NAME["busybox"]
    exe = Path(shutil.which("busybox") or "/bin/busybox")
    if not exe.is_file() or not is_static_elf(exe.resolve()):
        raise ToolMissing("a static busybox is needed for the helper image: apt-get install "
                          "busybox-static (scripts/test installs it)")
    listed = subprocess.run([str(exe), "--list"], capture_output=True, text=True, check=True)
    applets = sorted(a for a in listed.stdout.split() if a and a != "busybox")
    package = debian_package(exe)
    key = content_key({"bin/busybox": exe.resolve()}, {"applets": " ".join(applets),
                                                       "package": package})

    def build(s: Session, ref: str) -> None:
        members = [Member("bin"), Member("etc"), Member("root", 0o700), Member("tmp", 0o1777),
                   Member("bin/busybox", 0o755, exe.resolve().read_bytes())]
        members += [Member(f"bin/{a}", 0o777, target="busybox") for a in applets]
        members += [
            Member("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n"
                   b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
            Member("etc/group", 0o644, b"root:x:0:\nnogroup:x:65534:\n"),
        ]
        config = ["--cmd", '["sh"]', "--env", BASE_ENV[0],
                  *_labels(image, **{"io.tritonllm.packages": package})]
        s.import_tar(ref, members, config)

    return Recipe(image, key, build)


# --- Dockerfile images: the operator and the Triton stand-in -----------------------------------


def operator_files(root: Path) -> dict[str, Path]:
    """The operator image's build context: its package only (devcluster/ is dev tooling)."""
    files = {rel: root / rel for rel in ("Dockerfile", ".dockerignore", "pyproject.toml",
                                         "README.md", "images/wheels/README.md")}
    files.update(tree(root, "operator"))
    return files


def standin_files(root: Path) -> dict[str, Path]:
    # The LLM API table of the image's TensorRT-LLM goes in (its simulated LLM() checks against
    # it), so a change of the table changes the image's key.
    files = {rel: root / rel for rel in (".dockerignore", "images/wheels/README.md",
                                         "tests/triton/standin/tensorrt_llm_cpu_standin.py",
                                         f"tests/contract/tables/llm_args-{STANDIN_TRTLLM}.json")}
    files.update(tree(root, "images/triton-standin"))
    return files


def _dockerfile_recipe(session: Session, image: Image, files: dict[str, Path], dockerfile: str,
                       base: Base, wheels: Wheelhouse, args: dict[str, str]) -> Recipe:
    args = {"BASE": session.base_ref(base), "PIP_OFFLINE": "1", **args}
    key = content_key(files, {**args, "dockerfile": dockerfile, "wheels": wheels.key})

    def build(s: Session, ref: str) -> None:
        s.bud(ref, files=files, dockerfile=dockerfile, args=args, base=base, wheels=wheels)

    return Recipe(image, key, build)


def operator_recipe(session: Session) -> Recipe:
    root = checkout()
    base = Base("python", OPERATOR_BASE_PACKAGES)
    return _dockerfile_recipe(session, BY_NAME["operator"], operator_files(root), "Dockerfile",
                              base, operator_wheelhouse(root), {})


def standin_recipe(session: Session) -> Recipe:
    root = checkout()
    base = Base("serving", packages_file(root / "images/triton-standin/packages.txt"))
    args = {"TRTLLM_VERSION": STANDIN_TRTLLM, "NGC_RELEASE": STANDIN_RELEASE,
            "PYTRITON_VERSION": PYTRITON.split("==")[1]}
    return _dockerfile_recipe(session, BY_NAME["triton-standin"], standin_files(root),
                              "images/triton-standin/Dockerfile", base,
                              standin_wheelhouse(root), args)


def activator_recipe(session: Session) -> Recipe:
    root = checkout()
    files = {rel: root / rel for rel in (".dockerignore", "images/activator/Dockerfile")}
    return _dockerfile_recipe(session, BY_NAME["activator"], files,
                              "images/activator/Dockerfile", Base("activator", ("haproxy",)),
                              Wheelhouse("activator", ()), {})


RECIPES: dict[str, Callable[[Session], Recipe]] = {
    "pause": pause_recipe,
    "busybox": busybox_recipe,
    "operator": operator_recipe,
    "triton-standin": standin_recipe,
    "activator": activator_recipe,
}


# --- ensure: build what is missing, push what the registry lacks --------------------------------


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """One image run at a time per cache (another process waits)."""
    path = cache_root() / "images" / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _selected(names: Sequence[str] | None) -> list[Image]:
    unknown = sorted(set(names or ()) - set(BY_NAME))
    if unknown:
        raise ImageError(f"unknown image(s) {unknown}; choose from {sorted(BY_NAME)}")
    return [image for image in IMAGES if not names or image.name in names]


def _build(session: Session, recipe: Recipe) -> bool:
    """Build ``recipe.local`` unless local storage has it; True when it was built."""
    if session.buildah.exists(recipe.local):
        return False
    session.require_space()
    t0 = time.monotonic()
    session.progress(f"images: {recipe.image.name}: building {recipe.local}")
    recipe.build(session, recipe.local)
    stable = f"localhost/{recipe.image.repository}:{recipe.image.tag}"
    session.buildah.run("tag", recipe.local, stable, label=f"buildah tag {stable}")
    session.progress(f"images: {recipe.image.name}: built in {elapsed(time.monotonic() - t0)}")
    return True


def _publish(session: Session, recipe: Recipe, registry: str) -> tuple[str, str]:
    """Push ``recipe`` under its key unless the registry has it, then point the stable tag at
    it. Returns (state, digest)."""
    repo, name = recipe.image.repository, recipe.image.name
    digest = oci.manifest_digest(registry, repo, recipe.key)
    state = "cached"
    if digest is None:
        state = "built" if _build(session, recipe) else "pushed"
        t0 = time.monotonic()
        session.progress(f"images: {name}: pushing {registry}/{repo}:{recipe.key}")
        digest = session.buildah.push(recipe.local, f"{registry}/{repo}:{recipe.key}",
                                      log=f"push-{name}.log")
        session.progress(f"images: {name}: pushed in {elapsed(time.monotonic() - t0)}")
    if oci.manifest_digest(registry, repo, recipe.image.tag) != digest:
        oci.retag(registry, repo, recipe.key, recipe.image.tag)
    return state, digest


def ensure_images_report(
    registry: str | None,
    progress: Progress = stderr_progress,
    *,
    names: Sequence[str] | None = None,
) -> list[ImageResult]:
    """Make the images ``names`` (default all) exist in local storage and, with a registry,
    under ``<registry>/tritonllm/<name>`` (content tag and stable tag); what was done, per image.

    Raises :class:`ImageError` (with the fix in its message) when a tool is missing, a build
    fails, the disk is full or the registry does not answer.
    """
    selected = _selected(names)
    if registry:
        oci.registry_check(registry)
    results: list[ImageResult] = []
    with _lock():
        session = Session(progress)
        for image in selected:
            t0 = time.monotonic()
            recipe = RECIPES[image.name](session)
            reference, pushed = "", None
            if registry:
                state, digest = _publish(session, recipe, registry)
                reference = f"{registry}/{image.repository}:{image.tag}@{digest}"
                pushed = oci.pushed_size(registry, image.repository, digest)
            else:
                state = "built" if _build(session, recipe) else "cached"
            size = session.buildah.size(recipe.local) if session.buildah.exists(
                recipe.local) else None
            seconds = time.monotonic() - t0
            results.append(ImageResult(image.name, reference, recipe.key, recipe.local, state,
                                       seconds, size, pushed))
            progress(f"images: {image.name}: {state} {reference or recipe.local} "
                     f"[{elapsed(seconds)}]")
    return results


def ensure_images(
    registry: str,
    progress: Progress = stderr_progress,
    *,
    names: Sequence[str] | None = None,
) -> dict[str, str]:
    """Build (when their inputs changed) and push the real node's images to ``registry``
    (``127.0.0.1:PORT``); returns name -> ``<registry>/tritonllm/<name>:<tag>@sha256:<digest>``.

    Names: ``pause`` (tag 3.10.2), ``busybox`` (1.35), ``operator`` (dev) and ``triton-standin``
    (26.07-trtllm-python-py3). A warm call (nothing changed, all pushed) takes about a second.
    """
    results = ensure_images_report(registry, progress, names=names)
    return {r.name: r.reference for r in results}


def build_images(
    progress: Progress = stderr_progress, *, names: Sequence[str] | None = None
) -> dict[str, str]:
    """Build into local storage only (no registry): name -> ``localhost/tritonllm/<name>:<key>``.

    For warming the cache before a time-limited step (a test's timeout); a later
    :func:`ensure_images` then only pushes.
    """
    return {r.name: r.local for r in ensure_images_report(None, progress, names=names)}


def image_keys(names: Sequence[str] | None = None) -> dict[str, str]:
    """name -> the content key the current inputs give (nothing is built)."""
    session = Session(stderr_progress)
    return {image.name: RECIPES[image.name](session).key for image in _selected(names)}


def prune(progress: Progress = stderr_progress) -> None:
    """Remove images no stable tag or current key names, and dangling build layers."""
    with _lock():
        session = Session(progress)
        keep = {f"localhost/{i.repository}:{i.tag}" for i in IMAGES}
        keep |= {RECIPES[i.name](session).local for i in IMAGES}
        out = session.buildah.run("images", "--format", "{{.Name}}:{{.Tag}}", label="images")
        for ref in sorted(set(out.split())):
            if ref.startswith("localhost/tritonllm/") and "/base-" not in ref and ref not in keep:
                session.buildah.run("rmi", ref, label=f"buildah rmi {ref}")
                progress(f"images: removed {ref}")
        session.buildah.run("rmi", "--prune", label="buildah rmi --prune")


# --- command line -----------------------------------------------------------------------------


def _table(results: Sequence[ImageResult]) -> str:
    rows = [("image", "state", "time", "size", "pushed", "reference")]
    for r in results:
        rows.append((r.name, r.state, elapsed(r.seconds), oci.megabytes(r.size),
                     oci.megabytes(r.pushed_size), r.reference or r.local))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  "
                     + row[-1] for row in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonllm_dev.images",
        description="Build the local cluster's images (cached by content) and push them.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"images to make: {', '.join(BY_NAME)} (default all)")
    parser.add_argument("--registry", metavar="HOST:PORT",
                        help="push to this registry (e.g. 127.0.0.1:5000); default: build only")
    parser.add_argument("--list", action="store_true",
                        help="print each image's content key and whether it is built; no build")
    parser.add_argument("--sbom", action="store_true",
                        help="print each built image's labels of origin and its package list")
    parser.add_argument("--prune", action="store_true",
                        help="remove superseded images and dangling layers from local storage")
    args = parser.parse_args(argv)
    try:
        if args.prune:
            prune()
            return 0
        if args.list:
            return _list(args.names, args.registry)
        if args.sbom:
            return _sbom(args.names)
        results = ensure_images_report(args.registry, names=args.names)
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(_table(results))
    return 0


def _sbom(names: Sequence[str]) -> int:
    session = Session(stderr_progress)
    for image in _selected(names):
        recipe = RECIPES[image.name](session)
        if not session.buildah.exists(recipe.local):
            print(f"# {image.name}: {recipe.local} is not built", file=sys.stderr)
            continue
        labels = session.buildah.inspect(recipe.local)["OCIv1"]["config"].get("Labels") or {}
        print(f"# {image.name} {recipe.local}")
        for key in ("org.opencontainers.image.base.name", "org.opencontainers.image.base.digest"):
            print(f"# {key}={labels.get(key, '')}")
        packages = labels.get("io.tritonllm.packages", "")
        print(sbom(session, recipe.local) if packages == SBOM_PATH else packages + "\n", end="")
    return 0


def _list(names: Sequence[str], registry: str | None) -> int:
    session = Session(stderr_progress)
    for image in _selected(names):
        recipe = RECIPES[image.name](session)
        local = "built" if session.buildah.exists(recipe.local) else "not built"
        pushed = ""
        if registry:
            there = oci.manifest_digest(registry, image.repository, recipe.key)
            pushed = f"  {registry}: {'pushed' if there else 'not pushed'}"
        print(f"{image.name:15} {recipe.local:55} {local}{pushed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
