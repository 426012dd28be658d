"""The `tritonllm` command: render (valid, invalid, --out), crd --check, help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cases import (
    ACCEPTED,
    BAD_YAML,
    EXAMPLES,
    INVALID,
    Accepted,
    Invalid,
    cr,
    stored_otherwise,
)
from tritonllm.api.deployment import parse_deployment
from tritonllm.cli.main import main
from tritonllm.cli.yamlio import load_all


def render(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["render", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_render_every_example(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    code, out, err = render(capsys, "-f", str(path))
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds.index("Service") < kinds.index(
        "LeaderWorkerSet" if "multinode" in path.stem else "Deployment")
    assert all(d["metadata"]["namespace"] == "default" for d in docs)


def test_render_out_writes_the_repository(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    code, _, err = render(capsys, "-f", str(EXAMPLES[0]), "--out", str(tmp_path),
                          "--namespace", "team-a")
    assert code == 0, err
    base = tmp_path / "team-a" / EXAMPLES[0].stem
    assert (base / "repository" / "ensemble" / "config.pbtxt").is_file()
    assert (base / "repository" / "preprocessing" / "1" / "model.py").is_file()
    assert (base / "build.json").is_file() and (base / "launch.json").is_file()
    assert yaml.safe_load_all((base / "objects.yaml").read_text())


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_render_rejects_invalid_cr_with_exit_2(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, case: Invalid) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(case.obj))
    code, out, err = render(capsys, "-f", str(path))
    assert code == 2
    assert out == ""
    assert case.field in err, err
    assert err.startswith("error: ")


def test_render_rejects_unknown_backend_parameter(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(cr({"serving": {"extraParameters": {"no_such_knob": "1"}}})))
    code, _, err = render(capsys, "-f", str(path))
    assert code == 2 and "spec.serving.extraParameters.no_such_knob" in err


def test_render_reports_unreadable_and_malformed_input(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    code, _, err = render(capsys, "-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed")
    code, _, err = render(capsys, "-f", str(bad))
    assert code == 2 and "not valid YAML" in err


def test_render_reads_stdin_and_several_documents() -> None:
    text = yaml.safe_dump_all([cr(), cr(metadata={"name": "second"})])
    proc = subprocess.run([sys.executable, "-m", "tritonllm.cli.main", "render", "-f", "-"],
                          input=text, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(proc.stdout) if d
             and d["kind"] == "Service"}
    assert names == {"demo", "second"}


def test_crd_check_passes_on_a_current_checkout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd", "--check"]) == 0


def test_help_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for verb in ("crd", "render", "run", "cluster", "demo"):
        assert verb in out


@pytest.mark.parametrize("text,says", [c[1:] for c in BAD_YAML], ids=[c[0] for c in BAD_YAML])
def test_render_is_as_strict_as_the_api_server(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(text)
    code, out, err = render(capsys, "-f", str(path))
    assert (code, out) == (2, ""), err
    assert says in err, err
    assert "Traceback" not in err and err.startswith("error: ")


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.id)
def test_render_accepts_what_kubectl_applies(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path, case: Accepted) -> None:
    """Each way of writing a value that kubectl reads (go-yaml v2, then the API server's null
    pruning) renders, with the value the API server stores (the cluster tier checks that)."""
    path = tmp_path / "cr.yaml"
    path.write_text(case.text)
    code, out, err = render(capsys, "-f", str(path))
    assert (code, err) == (0, ""), err
    assert out.count("kind: Service\n") >= 1
    assert stored_otherwise(parse_deployment(load_all(case.text)[0]).spec.to_wire(), case) == {}


def test_plain_pyyaml_reads_every_accepted_case_otherwise() -> None:
    """The table is not vacuous: YAML 1.1 as PyYAML reads it disagrees with kubectl on each
    case but the null ones (the API server's pruning, not the parser, makes those equal) and
    the merge key."""
    differs = []
    for case in ACCEPTED:
        try:
            plain = yaml.safe_load(case.text)
        except yaml.YAMLError:  # `=` is a tag PyYAML cannot construct
            plain = None
        differs.append(repr(plain) != repr(load_all(case.text)[0]))  # 2.0 is not 2
    # PyYAML reads merge keys as go-yaml does (our duplicate-key check used to refuse them).
    nulls = {"nulls-are-pruned", "empty-values-are-null", "merge-key"}
    assert [c.id for c, d in zip(ACCEPTED, differs, strict=True) if not d] == [
        c.id for c in ACCEPTED if c.id in nulls]


@pytest.mark.parametrize("text", ["6004e52833", "123", "0x1f", "0o17", "1_000", ".5", "y", "N",
                                  "off", "~", "null", ""])
def test_render_output_keeps_strings_kubectl_would_read_as_numbers_or_booleans(text: str) -> None:
    """A label value such as a content hash (`6004e52833`) is a float to kubectl's YAML reader
    (go-yaml v2), which PyYAML would write unquoted: the dump quotes it, and the strict loader
    (kubectl's rules) reads it back as the same string."""
    from tritonllm.cli import yamlio

    out = yamlio.dump({"labels": {"key": text}})
    assert yamlio.load_all(out) == [{"labels": {"key": text}}], out
