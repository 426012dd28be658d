"""The in-pod entry points import and run with the standard library alone, on Triton's python3.

Triton images have python3 (3.10 in 24.x) without pydantic, kopf, kubernetes or PyYAML; these
tests block those imports, run the zipapp without site-packages, and parse the shipped modules
with the 3.10 grammar.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from tritonllm.runtime import pyz as pyz_module

BLOCKER = """
import importlib.abc, sys
BLOCKED = {"pydantic", "kopf", "kubernetes", "yaml", "prometheus_client"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not available in a Triton image")
        return None
sys.meta_path.insert(0, Block())
"""

IMPORTS = """
import tritonllm.runtime.build, tritonllm.runtime.launch, tritonllm.runtime.ssh
import tritonllm.runtime.hub, tritonllm.runtime.repository, tritonllm.runtime.pyz
import tritonllm.cli.build, tritonllm.cli.launch
from tritonllm.cli.main import build_parser
for verb in ("build", "launch"):
    try:
        build_parser([verb]).parse_args([verb, "--help"])
    except SystemExit as exc:
        assert exc.code == 0, exc
"""


def test_runtime_and_cli_verbs_import_with_pydantic_kopf_and_yaml_blocked() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCKER + IMPORTS], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "usage: tritonllm build" in out.stdout and "usage: tritonllm launch" in out.stdout


def test_blocker_really_blocks() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCKER + "import tritonllm.render"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0 and "not available in a Triton image" in out.stderr


def test_zipapp_runs_launch_and_build_help_without_site_packages(pyz: Path) -> None:
    for args in (["launch", "--help"], ["build", "--help"], ["--help"]):
        out = subprocess.run(
            [sys.executable, "-S", "-I", str(pyz), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert "usage: tritonllm" in out.stdout
    top = subprocess.run([sys.executable, "-S", "-I", str(pyz), "--help"],
                         capture_output=True, text=True, check=False).stdout
    assert "build" in top and "launch" in top and "render" not in top


def test_zipapp_holds_only_the_in_pod_modules(pyz: Path) -> None:
    names = set(zipfile.ZipFile(pyz).namelist())
    assert "__main__.py" in names
    assert "tritonllm/cli/main.py" in names and "tritonllm/runtime/launch.py" in names
    assert not any(n.startswith(("tritonllm/render", "tritonllm/handlers", "tritonllm/k8s"))
                   for n in names)
    assert "tritonllm/api/deployment.py" not in names


def test_zipapp_exit_code_is_the_entry_points(pyz: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-S", str(pyz), "build", "--plan", str(tmp_path / "missing.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "error=invalid" in out.stdout


def test_shipped_modules_parse_with_the_python_3_10_grammar() -> None:
    root = pyz_module.PACKAGE_ROOT
    files = [f for pattern in pyz_module.MODULES for f in sorted(root.glob(pattern))]
    assert len(files) > 10
    for f in files:
        ast.parse(f.read_text(), filename=str(f), feature_version=(3, 10))
