"""The set-up step both README commands run first (tritonllm_dev.preflight): what is missing
is named with its fix within seconds, before any build, never as a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tritonllm.cli import main as cli_main
from tritonllm_dev import preflight

REPO = Path(__file__).resolve().parents[2]


def _path_without(tmp_path: Path, hidden: str, keep: tuple[str, ...]) -> str:
    """A PATH of links to the tools in ``keep`` that exist here, and never to ``hidden``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in keep:
        found = shutil.which(tool)
        if found and tool != hidden:
            (bindir / tool).symlink_to(found)
    return str(bindir)


def _preflight(path: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ, PATH=path, PYTHONPATH=str(REPO / "operator"))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tritonllm_dev.preflight", *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    return proc, time.monotonic() - t0


def test_go_hidden_from_path_is_named_with_its_fix(tmp_path: Path) -> None:
    path = _path_without(tmp_path, "go", ("go", "gcc", "openssl", "git", "dpkg-query"))
    proc, took = _preflight(path, "--tier", "base", "--check")
    assert proc.returncode == 1
    assert "`go` is not on PATH" in proc.stderr
    assert "Go >= 1.26" in proc.stderr and "put its bin/ on PATH" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 10


def test_a_missing_debian_tool_is_named_with_the_package(tmp_path: Path) -> None:
    if not shutil.which("go"):
        pytest.fail("Go >= 1.26 must be on PATH for the test suite (the cluster is built with it)")
    path = _path_without(tmp_path, "buildah",
                         ("go", "buildah", "mmdebstrap", "skopeo", "dpkg-query"))
    proc, took = _preflight(path, "--tier", "images", "--check")
    assert proc.returncode == 1
    assert "buildah (daemonless image builds) is missing: apt-get install buildah" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 10


def test_every_tier_ready_on_this_machine_after_scripts_test() -> None:
    """scripts/test ran the step before pytest: nothing is missing now, and it says so fast."""
    proc, took = _preflight(os.environ["PATH"], "--check",
                            *(["--no-real-node"] if os.geteuid() != 0 else []))
    assert proc.returncode == 0, proc.stderr
    assert "ready" in proc.stdout
    assert took < 10


def test_without_root_the_real_node_is_refused_with_the_way_out() -> None:
    msg = preflight.root_problem(1000)
    assert msg is not None
    assert "needs root" in msg and "scripts/demo --no-real-node" in msg
    assert preflight.root_problem(0) is None


def test_old_python_is_named() -> None:
    msg = preflight.python_problem((3, 10))
    assert msg is not None and "Python >= 3.11" in msg
    assert preflight.python_problem((3, 11)) is None


def test_too_little_disk_names_the_space_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = types.SimpleNamespace(total=100 * 2**30, used=99 * 2**30, free=2**30)
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda _: usage)
    msg = preflight.disk_problem(tmp_path / "cache")
    assert msg is not None
    assert "1.0 GiB free" in msg and f"{preflight.COLD_FREE_GIB} GiB" in msg
    assert "TRITONLLM_CACHE" in msg


def test_missing_cgroup_controllers_are_named(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cgroup.procs").write_text("")
    msg = preflight.cgroup_problem(tmp_path)
    assert msg is not None and "'memory'" in msg and "'cpu'" not in msg
    assert "--no-real-node" in msg


def test_apt_that_cannot_reach_its_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "apt-get"
    fake.write_text("#!/bin/sh\necho 'E: Failed to fetch http://mirror/ Could not resolve' >&2\n"
                    "exit 100\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 0)
    with pytest.raises(preflight.SetupError) as err:
        preflight._apt(["buildah"], lambda _: None)
    assert "apt cannot reach its mirror" in str(err.value)
    assert "Could not resolve" in str(err.value)
    assert "apt-get install buildah" in str(err.value)


def test_unknown_tier_is_refused() -> None:
    with pytest.raises(preflight.SetupError, match="unknown tiers"):
        preflight.ensure(["gpu"], install=False)


def _boom_module(exc: Exception) -> types.ModuleType:
    mod = types.ModuleType("tritonllm.cli._boom")

    def add_parser(sub: object) -> None:
        p = sub.add_parser("boom")  # type: ignore[attr-defined]

        def run(_: object) -> int:
            raise exc

        p.set_defaults(func=run)

    mod.add_parser = add_parser  # type: ignore[attr-defined]
    return mod


def test_cli_error_is_one_line_and_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "tritonllm.cli._boom",
                        _boom_module(RuntimeError("libseccomp headers missing: apt-get install x")))
    monkeypatch.setitem(cli_main.VERBS, "boom", "tritonllm.cli._boom")
    monkeypatch.delenv("TRITONLLM_DEBUG", raising=False)
    assert cli_main.main(["boom"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: tritonllm boom: libseccomp headers missing")
    assert "--debug" in err and "Traceback" not in err
    with pytest.raises(RuntimeError, match="libseccomp"):
        cli_main.main(["boom", "--debug"])
