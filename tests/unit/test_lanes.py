"""The lanes that let `scripts/test` run cluster tests side by side (tests/lanes.py): which test
goes where, and the cluster lock's readers-writer behaviour across separate holders (flock on
separate open files conflicts even within one process, as between pytest-xdist workers)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import conftest, lanes


@dataclass
class Item:
    nodeid: str
    markers: set[str] = field(default_factory=set)
    stash: dict[Any, Any] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None


def test_each_cluster_test_has_its_lane() -> None:
    cases = {
        "tests/cluster/test_operator.py::test_steady_state_makes_no_writes": "kwok-operator",
        "tests/cluster/test_fit.py::test_fit": "kwok",
        "tests/cluster/test_network_policy.py::test_policy": "exclusive",
        "tests/cluster/test_real_flow.py::test_cpu_standin_example_serves": "real-node",
        "tests/cluster/test_real_node.py::test_pods_run": "real-node",
        "tests/cluster/test_real_node.py::test_down_then_up_leaves_nothing": "exclusive",
        "tests/cluster/test_faults.py::test_node_lost_with_serving_pods": "exclusive",
        "tests/chart/test_chart_upgrade.py::test_upgrade_from_the_previous_chart": "exclusive",
        "tests/autoscaling/test_stack.py::test_adapter": "exclusive",
    }
    for nodeid, want in cases.items():
        assert lanes.lane(Item(nodeid, {"cluster"})) == want, nodeid
    assert lanes.lane(Item("tests/gitops/test_argocd.py::test_sync", {"gitops"})) == "kwok"
    # without the cluster: the host tiers have a lane, the rest none
    assert lanes.lane(Item("tests/chart/test_chart.py::test_renders")) is None
    assert lanes.lane(Item("tests/triton/test_standin_metrics.py::test_x", {"triton"})) == "triton"
    assert lanes.lane(Item("tests/images/test_images.py::test_x", {"images"})) == "images"
    assert lanes.lane(Item("tests/unit/test_api.py::test_x")) is None
    assert lanes.lock_mode(Item("tests/unit/test_api.py::test_x")) is None
    assert lanes.lock_mode(Item("tests/cluster/test_fit.py::test_x", {"cluster"})) == "shared"
    assert lanes.lock_mode(None) is None


def _hold_in_thread(
    lock: lanes.ClusterLock, mode: str, log: list[str], tag: str, said: list[str] | None = None
) -> threading.Thread:
    def run() -> None:
        lock.hold(mode, tag, None if said is None else said.append)
        log.append(tag)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_exclusive_waits_for_shared_and_blocks_new_shared(tmp_path: Path) -> None:
    first, writer, late = (lanes.ClusterLock(tmp_path) for _ in range(3))
    log: list[str] = []
    said: list[str] = []
    assert first.hold("shared", "t::first", said.append) < 1
    assert said == []  # nothing to wait for, nothing said
    w = _hold_in_thread(writer, "exclusive", log, "t::exclusive", said)
    time.sleep(0.3)
    assert log == []  # the running shared test keeps it out
    # ...and the wait is said at once, with what it waits for
    assert said == ["t::exclusive waits (exclusive) for the shared lanes' running tests to end"]
    r = _hold_in_thread(late, "shared", log, "t::late", said)
    time.sleep(0.3)
    assert log == []  # the turnstile: a new shared test does not overtake the waiting writer
    assert said[1].startswith("t::late waits (shared) for an exclusive test (t::exclusive, since ")
    first.release()
    w.join(5)
    assert log == ["t::exclusive"]
    time.sleep(0.3)
    assert log == ["t::exclusive"]  # still exclusive
    writer.release()
    r.join(5)
    assert log == ["t::exclusive", "t::late"]
    assert len(said) == 2  # each waiter said it once
    late.release()


def test_shared_holders_run_together_and_a_held_mode_is_kept(tmp_path: Path) -> None:
    a, b = lanes.ClusterLock(tmp_path), lanes.ClusterLock(tmp_path)
    log: list[str] = []
    a.hold("shared")
    _hold_in_thread(b, "shared", log, "b").join(5)
    assert log == ["b"]
    b.release()
    a.release()
    assert a.hold("exclusive") < 1
    assert a.hold("exclusive") == 0.0  # consecutive exclusive tests keep the lock
    assert a.mode == "exclusive"
    a.release()
    assert a.mode is None


def test_pytest_xdist_keeps_a_lane_on_one_worker(tmp_path: Path) -> None:
    """The lanes rest on `--dist loadgroup` honouring a group added at collection (as
    tests/conftest.py adds them); pytest 9.2 broke that silently, hence its pin."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        if 'lane' in item.name:\n"
        "            item.add_marker(pytest.mark.xdist_group('lane'))\n"
    )
    (tmp_path / "test_x.py").write_text(
        "import os, time, pytest\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_lane(i):\n"
        "    time.sleep(0.1)\n"
        "    with open('workers.txt', 'a') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_free(i):\n"
        "    time.sleep(0.1)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


def test_a_file_lock_held_elsewhere_is_said_before_the_wait(tmp_path: Path) -> None:
    said: list[str] = []
    path = tmp_path / "start.lock"
    with lanes.file_lock(path, lambda: said.append("waits")):
        assert said == []  # free: nothing said
        got = threading.Event()

        def other() -> None:
            with lanes.file_lock(path, lambda: said.append("waits")):
                got.set()

        t = threading.Thread(target=other, daemon=True)
        t.start()
        time.sleep(0.3)
        assert said == ["waits"] and not got.is_set()
    t.join(5)
    assert got.is_set()


@dataclass
class Report:
    failed: bool


def _run_protocol(item: Item, nextitem: Item | None, failed: bool) -> None:
    """One test through the conftest's hooks as pytest drives them: the protocol wrapper takes
    the lock, the report wrapper sees the call's report, the protocol wrapper ends."""
    protocol = conftest.pytest_runtest_protocol(item, nextitem)
    next(protocol)
    report = conftest.pytest_runtest_makereport(item, None)
    next(report)
    with contextlib.suppress(StopIteration):
        report.send(Report(failed))
    with contextlib.suppress(StopIteration):
        protocol.send(None)


def test_a_failed_exclusive_test_releases_the_cluster_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = lanes.ClusterLock(tmp_path)
    monkeypatch.setattr(conftest, "_cluster_lock", lock)
    first, second, third = (
        Item(f"tests/autoscaling/test_x.py::test_{n}", {"cluster"}) for n in ("a", "b", "c")
    )
    _run_protocol(first, second, failed=False)
    assert lock.mode == "exclusive"  # passed, an exclusive test next: the lane keeps it
    _run_protocol(second, third, failed=True)
    assert lock.mode is None and second.stash[lanes.FAILED]
    # ...so a shared-lane test waiting behind it gets the cluster now
    log: list[str] = []
    waiting = lanes.ClusterLock(tmp_path)
    _hold_in_thread(waiting, "shared", log, "shared").join(2)
    assert log == ["shared"]
    waiting.release()
    shared = Item("tests/cluster/test_fit.py::test_fit", {"cluster"})
    assert lanes.keeps_lock(first, second) and first.stash == {}
    assert not lanes.keeps_lock(first, shared) and not lanes.keeps_lock(third, None)


def test_a_run_stops_the_cluster_only_when_no_other_run_uses_it(tmp_path: Path) -> None:
    starter, other = lanes.ClusterUsers(tmp_path), lanes.ClusterUsers(tmp_path)
    starter.join()
    other.join()
    assert not starter.alone()  # the other run's tests still use it: left running
    other.leave()
    starter.join()
    assert starter.alone()
    assert lanes.ClusterUsers(tmp_path).alone()  # nothing joined: nothing in use
