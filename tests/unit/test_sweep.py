"""What was swept out stays out: dead names, comments that pointed at nothing, and the facts that
have one definition each (tensor parallelism through spec.topology, the world size, the cache
hit). Each check reads the sources, so a name that comes back fails here with its place."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cases import ROOT
from tritonllm.api import constants as c
from tritonllm.render import serving
from tritonllm.triton import launch

OPERATOR = ROOT / "operator" / "tritonllm"
CODE_AND_DOCS = ("operator", "devcluster", "tests", "bench", "docs", "images", "charts",
                 "scripts", "examples", "README.md", "Dockerfile", ".importlinter")
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ""}


def _files(*roots: str) -> Iterator[Path]:
    """The repository's own files under `roots` (git's list: no build output, no caches)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *roots],
                            capture_output=True, text=True, check=True).stdout
    for rel in sorted(filter(None, listed.split("\0"))):
        f = ROOT / rel
        if f.is_file() and f.suffix in TEXT:
            yield f


def _hits(pattern: str, *roots: str, skip: tuple[str, ...] = ()) -> list[str]:
    regex = re.compile(pattern)
    found = []
    for f in _files(*roots):
        rel = f.relative_to(ROOT).as_posix()
        if rel == "tests/unit/test_sweep.py" or rel.startswith(skip):
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if regex.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


# (what, pattern, where): names nothing used, and text that pointed at things that do not exist.
GONE = [
    ("RenderOptions.cluster_domain (never set)", r"\bcluster_domain\b", ("operator",)),
    ("mpirun_argv(extra_mca=...) (never passed)", r"\bextra_mca\b", ("operator", "tests")),
    ("the local cluster's old place in the wheel",
     r"(?<!cache/)tritonllm[./]cluster\b", CODE_AND_DOCS),
    ("the old demo module", r"tritonllm[./]cli[./]demo\b", CODE_AND_DOCS),
    ("a conftest that does not exist", r"tests/cluster/conftest\.py", CODE_AND_DOCS),
    # (an upstream project's issue, cited with its link, is a source, not a work item)
    ("work-item numbers in code and docs",
     r"(?i)\bissue #?[0-9]+(?![0-9]|\]\(http)", CODE_AND_DOCS),
    ("the image deleting what it copied", r"rm -rf", ("Dockerfile",)),
    ("ssh-keygen in the operator image", r"ssh-keygen", ("Dockerfile",)),
    ("the reconcile's decision called a plan (plans are what pods execute)",
     r"\bPlan\b", ("operator", "tests")),
    ("the handlers reaching into the planner's modules (they import tritonllm.plan)",
     r"from tritonllm\.plan\.", ("operator/tritonllm/handlers", "operator/tritonllm/cli")),
    ("object references and events as bare tuples (ObjectRef, EventNote)",
     r"(delete|add_owner|events)\.append\(\(|^\s+\(\"Warning\", ", ("operator",)),
    ("a uid copied onto the parsed deployment",
     r"model_copy\(update=\{\"uid\"", ("operator/tritonllm/handlers",)),
]


@pytest.mark.parametrize(("what", "pattern", "where"), GONE, ids=[g[0] for g in GONE])
def test_swept_names_and_stale_text_stay_gone(what: str, pattern: str, where: tuple[str]) -> None:
    assert _hits(pattern, *where) == [], what


def test_tensor_and_pipeline_parallelism_are_read_through_the_topology() -> None:
    """Outside the api package (which defines spec.topology) nobody reads engine.parallelism's
    counts directly."""
    hits = _hits(r"parallelism\.(tensor|pipeline|world_size)\b", "operator",
                 skip=("operator/tritonllm/api/",))
    # Field paths in messages ("spec.engine.parallelism.pipeline") are text, not reads.
    assert [h for h in hits if not re.search(r"[\"'`][^\"'`]*parallelism\.", h)] == []


def _products_of_parallelism(tree: ast.AST) -> list[int]:
    names = {"tensor", "pipeline", "tp", "pp"}

    def name(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        return node.attr if isinstance(node, ast.Attribute) else None

    return [
        node.lineno for node in ast.walk(tree)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
        and name(node.left) in names and name(node.right) in names
    ]


def test_the_world_size_is_computed_in_one_place() -> None:
    """tensor x pipeline is multiplied only in tritonllm.api.topology.world_size."""
    found = {
        f"{path.relative_to(OPERATOR)}:{line}"
        for path in OPERATOR.rglob("*.py")
        for line in _products_of_parallelism(ast.parse(path.read_text()))
    }
    source = (OPERATOR / "api" / "topology.py").read_text()
    line = next(n for n, text in enumerate(source.splitlines(), 1)
                if text.strip() == "return tensor * pipeline")
    assert found == {f"api/topology.py:{line}"}


def test_the_cache_hit_is_decided_by_one_function_called_once_per_phase() -> None:
    """plan.engine.is_cache_hit decides it: once in the engine step (its EngineStep.cached is
    what the condition and the status say) and once in the read phase, for the render options
    (pods start faster on a cached engine); nothing else calls it or repeats its test."""
    calls = _hits(r"\bis_cache_hit\(", "operator")
    assert sorted(h.split(":")[0] for h in calls) == [
        "operator/tritonllm/handlers/observe.py",
        "operator/tritonllm/plan/engine.py",
        "operator/tritonllm/plan/engine.py",  # its definition
    ]
    repeated = _hits(r"builtFor not in", "operator")
    assert len(repeated) == 1 and repeated[0].startswith("operator/tritonllm/plan/engine.py")


def test_the_reserved_pod_keys_stay_protected() -> None:
    """LABEL_DEPLOYMENT and ANNOTATION_TRTLLM_VERSION are on no pod, yet are not dead: they are
    reserved keys users may not set (api/constants.py says why), refused at admission."""
    assert {c.LABEL_DEPLOYMENT, c.ANNOTATION_TRTLLM_VERSION} <= set(c.OPERATOR_POD_KEYS)
    crd = (ROOT / "crds" / "tritonllm.io_tritonllmdeployments.yaml").read_text()
    assert f"'{c.LABEL_DEPLOYMENT}'" in crd and f"'{c.ANNOTATION_TRTLLM_VERSION}'" in crd


def test_the_endpoint_and_mpirun_helpers_take_only_what_they_use() -> None:
    assert list(inspect.signature(serving.endpoint).parameters) == ["dep"]
    assert list(inspect.signature(launch.mpirun_argv).parameters) == ["spec", "mpirun"]


def test_the_run_module_parses_its_flags_like_the_run_verb() -> None:
    """`python -m tritonllm.cli.run` once called run() with an empty Namespace, so reading
    args.kubeconfig (and every other flag) failed before the operator started."""
    out = subprocess.run([sys.executable, "-m", "tritonllm.cli.run", "--help"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--kubeconfig" in out.stdout and "--standalone" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "tritonllm.cli.run", "--log-level", "LOUD"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'LOUD'" in bad.stderr
    assert "Traceback" not in bad.stderr


# What the test tiers and the benches share, each defined once in tests/helpers.py: free ports,
# the examples as written, the zipapp and its fixture, the /proc readers, the gRPC stream client.
SHARED_TEST_HELPERS = (
    "free_port", "free_ports", "example_body", "pyz_archive", "pyz", "pids", "cmdline", "ppid",
    "alive", "children", "descendants", "proc_status", "cpus_allowed", "rss_mib",
    "listening_ports", "grpc_inputs", "grpc_stream", "stream_texts",
)


def test_shared_test_helpers_are_defined_once() -> None:
    """Helpers that several tiers need live in tests/helpers.py, not in a copy per tier."""
    names = "|".join(SHARED_TEST_HELPERS)
    copies = _hits(rf"^def _?({names})\(", "tests", "bench")
    # (the real-node flow's _grpc_stream is one line over grpc_stream: the ensemble's texts)
    wrapper = "tests/cluster/test_real_flow.py"
    assert sorted(h.split(":")[0] for h in copies if not h.startswith(wrapper)) == [
        "tests/helpers.py"] * len(SHARED_TEST_HELPERS)
    # An example is read by its name in one place (example_body); the rest pass it a name.
    loads = _hits(r"\"examples\" / f?\"[^\"]+\.yaml\"\)\.read_text", "tests", "bench")
    assert [h.split(":")[0] for h in loads] == ["tests/helpers.py"]
    # The stream client is not written out again (queue of responses, final-response flag).
    flags = _hits(r"triton_final_response", "tests", "bench",
                  skip=("tests/triton/standin/", "tests/contract/"))
    assert [h.split(":")[0] for h in flags] == ["tests/helpers.py"]


def test_the_architecture_page_names_every_package_and_has_the_glossary() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(p.name for p in OPERATOR.iterdir() if (p / "__init__.py").is_file())
    assert [p for p in packages if f"`tritonllm.{p}`" not in text] == []
    assert "`tritonllm_dev`" in text and "## Glossary" in text
    # Every module of these packages is named in its row (runtime: but the zipapp's builder).
    for package in ("plan", "handlers", "k8s", "runtime"):
        modules = sorted(p.stem for p in (OPERATOR / package).glob("*.py") if p.stem != "__init__")
        row = next(line for line in text.splitlines()
                   if line.startswith(f"| `tritonllm.{package}` |"))
        assert [m for m in modules if m != "pyz" and f"`{m}`" not in row] == [], package


@pytest.mark.parametrize(("word", "name"), [
    ("object reference", "ObjectRef"), ("event note", "EventNote"), ("decision", "Decision"),
    ("observed", "Observed"), ("rendered", "Rendered"),
])
def test_the_glossary_says_where_each_core_type_is_defined(word: str, name: str) -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    glossary = text[text.index("## Glossary"):]
    row = next(line for line in glossary.splitlines() if line.startswith(f"| {word} |"))
    named = re.findall(r"`(\w+/\w+\.py)`", row) + [
        f"{package}/__init__.py" for package in re.findall(r"`tritonllm\.(\w+)`", row)]
    defined = [h.split(":")[0] for h in _hits(rf"^class {name}\b", "operator")]
    assert len(defined) == 1 and defined[0].removeprefix("operator/tritonllm/") in named, row
