"""The layout holds: import contracts (and that they catch the leaks they exist for), the in-pod
zipapp matching its contract, small functions where the logic lives, and an operator that runs
without the local-cluster tooling (which the operator image leaves out)."""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cases import ROOT
from tritonllm.runtime import pyz

PACKAGE = ROOT / "operator" / "tritonllm"
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(source_root: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the repository's contracts, on the package under `source_root`."""
    env = {**os.environ, "PYTHONPATH": str(source_root)}
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=tmp, env=env, capture_output=True, text=True, check=False,
    )


@pytest.fixture(scope="module")
def leaky_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package where the operator imports the in-pod runtime again (the old leak:
    the handler generated the MPI keys with tritonllm.runtime.ssh)."""
    root = tmp_path_factory.mktemp("leak") / "src"
    shutil.copytree(PACKAGE, root / "tritonllm", ignore=shutil.ignore_patterns("__pycache__"))
    execute = root / "tritonllm" / "handlers" / "execute.py"
    execute.write_text(execute.read_text() + "\nfrom tritonllm.runtime.ssh import SECRET_KEYS\n")
    return root


def test_the_import_contracts_hold(tmp_path: Path) -> None:
    out = lint_imports(PACKAGE.parent, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " broken" not in out.stdout.lower().replace("0 broken", "")


def test_the_contracts_fail_on_the_operator_importing_the_runtime(
    leaky_copy: Path, tmp_path: Path
) -> None:
    out = lint_imports(leaky_copy, tmp_path)
    assert out.returncode != 0
    text = " ".join(out.stdout.split())
    assert "The operator never imports the in-pod runtime" in text
    assert "tritonllm.handlers.execute -> tritonllm.runtime.ssh" in text
    assert "2 broken" in text  # the layers contract catches it too


def _contract_sources(name: str) -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return set(config[f"importlinter:contract:{name}"]["source_modules"].split())


def test_the_zipapp_holds_exactly_the_modules_of_the_in_pod_contract() -> None:
    packed = set()
    for pattern in pyz.MODULES:
        for path in PACKAGE.glob(pattern):
            module = path.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", ".")
            packed.add(module.removesuffix(".__init__"))
    sources = _contract_sources("in-pod-stdlib-only")
    # Every packed module is covered by the contract (runtime as a package), and vice versa.
    covered = {m for m in packed if any(m == s or m.startswith(s + ".") for s in sources)}
    assert packed - covered <= {"tritonllm", "tritonllm.api", "tritonllm.cli"}  # bare __init__s
    assert sources <= packed | {"tritonllm.runtime"}


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    return [
        (node.name, node.end_lineno - node.lineno + 1)  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


@pytest.mark.parametrize("package", ["plan", "render", "handlers"])
def test_no_function_of_the_reconcile_core_exceeds_60_lines(package: str) -> None:
    long = [
        f"{path.relative_to(PACKAGE)}:{name} ({lines} lines)"
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for name, lines in _functions(path)
        if lines > 60
    ]
    assert long == []


def test_the_planner_reads_in_one_screen() -> None:
    lengths = dict(_functions(PACKAGE / "plan" / "reconcile.py"))
    assert lengths["plan"] <= 50


BLOCK_CLUSTER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tritonllm_dev" or name.startswith("tritonllm_dev."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from tritonllm.cli.main import main
sys.argv = ["tritonllm", *sys.argv[1:]]
sys.exit(main())
"""


def test_the_operator_runs_without_the_local_cluster_tooling(tmp_path: Path) -> None:
    """The operator image leaves tritonllm_dev out: every operator verb still works, and the
    dev verbs (cluster, demo) are simply not offered."""

    def tritonllm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", BLOCK_CLUSTER, *args],
                              capture_output=True, text=True, check=False, cwd=tmp_path)

    usage = tritonllm("--help")
    assert usage.returncode == 0, usage.stderr
    verbs = [line.split()[0] for line in usage.stdout.splitlines() if line.startswith("    ")
             and line.split()[0].isalpha()]
    assert sorted(verbs) == ["bench", "build", "crd", "fit", "launch", "openai", "render",
                             "run"]
    assert tritonllm("run", "--help").returncode == 0
    rendered = tritonllm("render", "-f", str(ROOT / "examples" / "gpt2-medium.yaml"))
    assert rendered.returncode == 0 and "kind: Deployment" in rendered.stdout
    assert tritonllm("cluster", "up").returncode == 2  # unknown verb
