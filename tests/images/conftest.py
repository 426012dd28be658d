"""Fixtures of the images tier: the local images (tritonllm_dev.images), a throw-away registry
(distribution's `registry` on a free 127.0.0.1 port, storage in a temporary directory) and a way
to run a rendered pod's containers from those images with `buildah run --isolation chroot`.

The images are built (or found in the content cache) once, right after collection and outside the
per-test timeout, with progress on the terminal, like the cluster tier's binaries. The tests then
push them to their own registry and measure the second, cached, call. The figures (build, push,
cached times; sizes) are printed at the end of the session (of a run without workers: under
`pytest -n` they stay in the worker that ran the tier; `pytest tests/images` prints them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import yaml

from tests import lanes
from tests.helpers import cmdline, descendants, free_port, pids
from tritonllm_dev import images, oci
from tritonllm_dev.versions import REGISTRY

#: Figures for the terminal summary (filled by the fixtures and tests).
REPORT: dict[str, Any] = {}


def _selected(session: pytest.Session) -> bool:
    return any(item.get_closest_marker("images") for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _selected(session):
        return
    # Under `pytest -n` every worker collects: one builds, the others find its cache.
    with lanes.uncaptured(session.config), lanes.file_lock(lanes.BUILD_LOCK):
        t0 = time.monotonic()
        try:
            results = images.ensure_images_report(
                None, lambda msg: print(f"[images] {msg}", file=sys.stderr, flush=True))
        except images.ImageError as exc:
            pytest.exit(f"images: {exc}", returncode=1)
        REPORT["build"] = (time.monotonic() - t0, results)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "build" not in REPORT:
        return
    write = terminalreporter.write_line
    terminalreporter.section("images: times and sizes")
    seconds, built = REPORT["build"]
    states = ", ".join(f"{r.name} {r.state}" for r in built)
    write(f"build into local storage: {oci.elapsed(seconds)} ({states})")
    for label in ("push", "cached"):
        if label in REPORT:
            seconds, _ = REPORT[label]
            write(f"ensure_images, {label}: {oci.elapsed(seconds)}")
    if "push" in REPORT:
        for r in REPORT["push"][1]:
            write(f"  {r.name:15} {oci.megabytes(r.size):>8} local, "
                  f"{oci.megabytes(r.pushed_size):>8} in the registry  {r.reference}")


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A registry of its own on 127.0.0.1 (real-nodes.md section 6 configuration)."""
    if REGISTRY.missing():
        from tritonllm_dev.build import build_component

        build_component(REGISTRY)
    root = tmp_path_factory.mktemp("registry")
    addr = f"127.0.0.1:{free_port()}"
    config = {"version": 0.1, "log": {"level": "warn"},
              "storage": {"filesystem": {"rootdirectory": str(root / "data")},
                          "delete": {"enabled": True}},
              "http": {"addr": addr}}
    (root / "config.yml").write_text(yaml.safe_dump(config))
    with open(root / "registry.log", "wb") as log:
        proc = subprocess.Popen([str(REGISTRY.path("registry")), "serve", str(root / "config.yml")],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"http://{addr}/v2/",
                                                                      timeout=2):
                break
            assert proc.poll() is None, (root / "registry.log").read_text()
            assert time.monotonic() < deadline, "registry did not answer"
            time.sleep(0.2)
        yield addr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def pushed(registry: str) -> dict[str, images.ImageResult]:
    """ensure_images against the empty registry: everything pushed (built before collection)."""
    t0 = time.monotonic()
    results = images.ensure_images_report(registry, lambda msg: None)
    REPORT["push"] = (time.monotonic() - t0, results)
    return {r.name: r for r in results}


@pytest.fixture(scope="session")
def buildah() -> oci.Buildah:
    session = images.Session(lambda msg: None)
    return session.buildah


class Runner:
    """Containers from images, run with `buildah run --isolation chroot` (no OCI runtime)."""

    def __init__(self, buildah: oci.Buildah) -> None:
        self.b = buildah

    @contextlib.contextmanager
    def container(self, image: str) -> Iterator[str]:
        """A working container of ``image`` (pulled from the registry when it is a registry
        reference: plain HTTP on loopback)."""
        out = subprocess.run(self.b.argv("from", "--tls-verify=false", "--quiet", image),
                             capture_output=True, text=True, check=True)
        name = out.stdout.strip().splitlines()[-1]
        try:
            yield name
        finally:
            self.kill_inside(name)
            subprocess.run(self.b.argv("rm", name), capture_output=True, check=False)

    def argv(self, name: str, cmd: Sequence[str], *, volumes: Sequence[str] = (),
             env: dict[str, str] | None = None, user: str | None = None) -> list[str]:
        args = ["run", "--isolation", "chroot"]
        for v in volumes:
            args += ["-v", v]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        if user is not None:
            args += ["--user", user]
        return self.b.argv(*args, name, "--", *cmd)

    def run(self, name: str, cmd: Sequence[str], *, timeout: float = 300,
            **kw: Any) -> subprocess.CompletedProcess[str]:
        return run_tree(self.argv(name, cmd, **kw), timeout)

    def sh(self, image: str, script: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        with self.container(image) as name:
            return self.run(name, ["/bin/sh", "-c", script], **kw)

    def kill_inside(self, name: str) -> None:
        """Kill what still runs in the container: `buildah run` on it and its descendants."""
        for pid in self.runs(name):
            kill_tree(pid)

    def runs(self, name: str) -> list[int]:
        """pids of the `buildah ... run ... <name> -- ...` processes."""
        out = []
        for pid in pids():
            cmd = cmdline(pid)
            if cmd[:1] and cmd[0].endswith("buildah") and "run" in cmd and name in cmd:
                out.append(pid)
        return out


def run_tree(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """subprocess.run, but a timeout kills the whole process tree (buildah's chroot children
    would outlive buildah itself)."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        err += f"\n(killed after {timeout}s)"
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and everything below it (children first found, then the process)."""
    for victim in [*descendants(pid), pid]:
        with contextlib.suppress(OSError):
            os.kill(victim, signal.SIGKILL)


@pytest.fixture(scope="session")
def runner(buildah: oci.Buildah) -> Runner:
    if shutil.which("buildah") is None:
        pytest.fail("buildah not found: apt-get install buildah (scripts/test does)")
    return Runner(buildah)
