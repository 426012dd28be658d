"""The pure parts of the local image builds (tritonllm_dev.images / oci): content keys, build
contexts, apt sources, pip targets, tarballs; and the CLI without the cluster tooling."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tritonllm.api.versions import version_for_image
from tritonllm_dev import images, oci

ROOT = Path(__file__).resolve().parents[2]


def _files(tmp_path: Path, **contents: str) -> dict[str, Path]:
    out = {}
    for name, text in contents.items():
        path = tmp_path / name
        path.write_text(text)
        out[name] = path
    return out


def test_content_key_is_stable(tmp_path: Path) -> None:
    files = _files(tmp_path, a="one", b="two")
    params = {"BASE": "localhost/x:1", "PIP_OFFLINE": "1"}
    key = images.content_key(files, params)
    assert len(key) == 16 and int(key, 16) >= 0
    assert images.content_key(dict(reversed(files.items())), dict(reversed(params.items()))) == key


@pytest.mark.parametrize("change", ["content", "mode", "name", "param", "new file"])
def test_content_key_changes_with_any_input(tmp_path: Path, change: str) -> None:
    files = _files(tmp_path, a="one", b="two")
    params = {"BASE": "localhost/x:1"}
    before = images.content_key(files, params)
    if change == "content":
        files["a"].write_text("ONE")
    elif change == "mode":
        files["a"].chmod(0o755)
    elif change == "name":
        files = {"renamed": files["a"], "b": files["b"]}
    elif change == "param":
        params = {"BASE": "localhost/x:2"}
    else:
        files |= _files(tmp_path, c="three")
    assert images.content_key(files, params) != before


def test_operator_context_leaves_out_the_cluster_tooling_and_caches() -> None:
    files = images.operator_files(ROOT)
    assert "Dockerfile" in files and "pyproject.toml" in files
    assert "operator/tritonllm/cli/main.py" in files
    assert not [f for f in files if f.startswith("devcluster/tritonllm_dev/")]
    assert not [f for f in files if "__pycache__" in f or ".egg-info" in f or f.endswith(".pyc")]


def test_standin_context_stages_the_cpu_standin_and_fakes() -> None:
    files = images.standin_files(ROOT)
    for rel in ("images/triton-standin/Dockerfile", "images/triton-standin/packages.txt",
                "images/triton-standin/fakes/trtllm-build",
                "images/triton-standin/fakes/trtllm-llmapi-launch",
                "images/triton-standin/fakes/tensorrt_llm/llmapi/llm.py",
                f"tests/contract/tables/llm_args-{images.STANDIN_TRTLLM}.json",
                "tests/triton/standin/tensorrt_llm_cpu_standin.py"):
        assert rel in files, rel
    # The Dockerfile copies the LLM API table of the image's TensorRT-LLM, which is staged.
    dockerfile = (ROOT / "images/triton-standin/Dockerfile").read_text()
    assert "COPY tests/contract/tables/llm_args-${TRTLLM_VERSION}.json" in dockerfile
    assert not [f for f in files if f.startswith("operator/")]


def test_dockerfile_keeps_a_public_base_for_users() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE=python:3.11-slim" in text
    assert "/usr/local/share/tritonllm/tritonllm.pyz" in text
    assert "USER 65532" in text
    assert "devcluster" in (ROOT / ".dockerignore").read_text().split()
    standin = (ROOT / "images/triton-standin/Dockerfile").read_text()
    assert "ARG BASE=debian:bookworm-slim" in standin


def test_standin_tag_renders_like_the_ngc_image() -> None:
    """The stand-in wears an NGC tag, so the operator derives the same TensorRT-LLM version."""
    ref = f"127.0.0.1:5000/tritonllm/triton-standin:{images.STANDIN_TAG}@sha256:{'0' * 64}"
    found = version_for_image(ref)
    ngc = version_for_image(f"nvcr.io/nvidia/tritonserver:{images.STANDIN_TAG}")
    assert found is not None and found == ngc
    assert str(found) == images.STANDIN_TRTLLM


def test_wheelhouse_key_follows_the_requirements() -> None:
    a = images.Wheelhouse("x", ("numpy<2",))
    assert a.key == images.Wheelhouse("x", ("numpy<2",)).key
    assert a.key != images.Wheelhouse("x", ("numpy<3",)).key
    assert a.key != images.Wheelhouse("x", ("numpy<2",), no_deps=("nvidia-pytriton==0.7.0",)).key
    house = images.operator_wheelhouse(ROOT)
    assert any(r.startswith("kopf") for r in house.requirements)
    assert any(r.startswith("setuptools") for r in house.requirements)  # build isolation
    # the image runs the OpenAI frontend: its extra's wheels are staged too
    assert any(r.startswith("tokenizers") for r in house.requirements)


DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main contrib
"""


def test_debian_sources_deb822_and_one_line() -> None:
    assert oci.debian_sources(DEB822) == [
        ("http://deb.debian.org/debian", "bookworm", "main"),
        ("http://deb.debian.org/debian", "bookworm-updates", "main"),
        ("http://deb.debian.org/debian-security", "bookworm-security", "main contrib"),
    ]
    one = "deb [arch=amd64] http://mirror/debian trixie main # comment\ndeb-src http://x y z\n"
    assert oci.debian_sources(one) == [("http://mirror/debian", "trixie", "main")]


def test_mirror_lines_keep_the_hosts_mirrors_with_our_suite() -> None:
    entries = [("http://m/debian", "trixie", "main"), ("http://m/debian", "trixie-updates", "main"),
               ("http://m/debian-security", "trixie-security", "main")]
    assert oci.mirror_lines(entries, "bookworm") == [
        "deb http://m/debian bookworm main",
        "deb http://m/debian bookworm-updates main",
        "deb http://m/debian-security bookworm-security main",
    ]
    assert oci.mirror_lines([], "bookworm") == ["deb http://deb.debian.org/debian bookworm main"]


def test_pip_targets_bookworms_python_and_every_older_manylinux() -> None:
    args = oci.pip_target_args("3.11", 36)
    assert args[:8] == ["--only-binary=:all:", "--python-version", "3.11", "--implementation",
                        "cp", "--abi", "cp311", "--platform"]
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in platforms
    assert "manylinux2014_x86_64" in platforms and "manylinux_2_37_x86_64" not in platforms


def test_write_tar_is_reproducible(tmp_path: Path) -> None:
    members = [images.Member("bin"), images.Member("tmp", 0o1777),
               images.Member("bin/tool", 0o755, b"#!/bin/sh\n"),
               images.Member("bin/alias", 0o777, target="tool")]
    images.write_tar(tmp_path / "a.tar", members)
    images.write_tar(tmp_path / "b.tar", members)
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        infos = {i.name: i for i in tar.getmembers()}
    assert infos["tmp"].mode == 0o1777 and infos["bin/alias"].linkname == "tool"
    assert all(i.uid == 0 and i.mtime == 0 for i in infos.values())


def test_is_static_elf(tmp_path: Path) -> None:
    assert not images.is_static_elf(Path(sys.executable).resolve())  # dynamically linked
    not_elf = tmp_path / "script"
    not_elf.write_text("#!/bin/sh\n")
    assert not images.is_static_elf(not_elf)


def test_unknown_image_name_is_one_clear_error() -> None:
    with pytest.raises(images.ImageError, match="unknown image"):
        images.ensure_images_report(None, names=["nope"])


def test_cli_without_the_cluster_tooling_says_what_is_missing(tmp_path: Path) -> None:
    """As in the operator image: tritonllm_dev absent, `cluster`/`demo` explain themselves."""
    hide = ("import sys; sys.modules['tritonllm_dev'] = None; "
            "from tritonllm.cli.main import main; sys.exit(main(sys.argv[1:]))")
    for verb in (["cluster", "up"], ["demo"]):
        out = subprocess.run([sys.executable, "-c", hide, *verb], capture_output=True, text=True,
                             check=False, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr
        assert "tritonllm_dev" in out.stderr and "source checkout" in out.stderr
    helps = subprocess.run([sys.executable, "-c", hide, "--help"], capture_output=True, text=True,
                           check=False, cwd=tmp_path)
    assert helps.returncode == 0 and "render" in helps.stdout


def test_parse_size_reads_buildahs_human_sizes() -> None:
    assert oci.parse_size("260 MB") == 260_000_000
    assert oci.parse_size("775 kB") == oci.parse_size("775 KB") == 775_000
    assert oci.parse_size("1.25 GB") == 1_250_000_000
    assert oci.megabytes(775_000) == "0.8 MB" and oci.megabytes(260_000_000) == "260 MB"


DOCKERFILES = ("Dockerfile", "images/activator/Dockerfile", "images/triton-standin/Dockerfile")


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_every_image_writes_its_package_list_as_root(dockerfile: str) -> None:
    final = (ROOT / dockerfile).read_text().rsplit("\nFROM ", 1)[1]
    sbom_at = final.index(f"| sort > {images.SBOM_PATH}")
    assert "dpkg-query -W" in final[:sbom_at]
    assert "USER " not in final[:sbom_at]


def test_the_package_list_command_runs_on_debian(tmp_path: Path) -> None:
    """The Dockerfiles' own dpkg-query line, run on this (Debian) host: one `name=version arch`
    line per installed package, sorted."""
    final = (ROOT / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    line = next(x for x in final.splitlines() if "dpkg-query -W" in x).strip()
    command = line.removeprefix("&& ").replace(images.SBOM_PATH, str(tmp_path / "packages.txt"))
    subprocess.run(["sh", "-c", command], check=True)
    rows = (tmp_path / "packages.txt").read_text().splitlines()
    assert rows == sorted(rows) and len(rows) > 50
    assert any(r.startswith("dpkg=") for r in rows)
    assert all(len(r.split("=", 1)[1].split(" ")) == 2 for r in rows)


class RecordingBuildah:
    """Stands in for buildah (no image is built): answers `inspect` with a digest and records
    the build arguments `bud` is given."""

    def __init__(self, digest: str) -> None:
        self.digest, self.builds = digest, []

    def inspect(self, ref: str) -> dict:
        return {"FromImageDigest": self.digest}

    def bud(self, ctx, dockerfile, ref, args, *, log, progress, labels) -> None:
        self.builds.append((dockerfile, ref, args, labels))


def test_the_build_labels_the_bases_digest_without_changing_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    digest = "sha256:" + "1" * 64
    session = object.__new__(images.Session)
    session.progress, session.logs, session.mirrors = (lambda _m: None), tmp_path, []
    session._buildah = RecordingBuildah(digest)
    monkeypatch.setattr(images.Session, "ensure_base", lambda self, base: self.base_ref(base))
    monkeypatch.setattr(images.Session, "ensure_wheels", lambda self, w: tmp_path)
    monkeypatch.setattr(images.Session, "context",
                        lambda self, files, wheels: contextlib.nullcontext(tmp_path))
    recipe = images.activator_recipe(session)
    recipe.build(session, recipe.local)
    ((dockerfile, ref, args, labels),) = session._buildah.builds
    assert (dockerfile, ref) == ("images/activator/Dockerfile", recipe.local)
    assert labels == {"org.opencontainers.image.base.name": args["BASE"],
                      "org.opencontainers.image.base.digest": digest,
                      "io.tritonllm.packages": images.SBOM_PATH}
    assert args["BASE"].startswith("localhost/tritonllm/base-activator:")
    assert images.activator_recipe(session).key == recipe.key
    session._buildah = RecordingBuildah("")
    with pytest.raises(oci.ImageError, match="no manifest digest"):
        recipe.build(session, recipe.local)
