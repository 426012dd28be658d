"""Check rendered command lines and model configs against the upstream option tables.

The tables (tests/contract/tables/*.json, made by tests/contract/extract.py, see
docs/contract.md) say which options each upstream tool of one version accepts. Here a rendered
deployment's build plan (convert_checkpoint.py or quantize.py, then trtllm-build), its launch
argv (mpirun -> tritonserver per rank) and its config.pbtxt files are parsed the way the tool
would parse them, and every option is looked up in the table of the version the image ships:

- TensorRT-LLM tools: the table of that exact version when one was reachable, else both the
  nearest older and the nearest newer table (each must accept the argv; where no newer table
  exists only the older one, and the label says so); the converter must also be looked for
  where the table read it (examples/, models/core/, models/contrib/);
- tritonserver: the Triton release branch of the NGC month (always exact);
- the tensorrt_llm model's ``parameters``: the keys the backend's template of that version
  reads (exact for 0.9.0 ... 0.19.0, then the 0.19.0 and 1.2.0rc2 neighbours, 1.2.0rc2 alone
  for 1.2.x); our own Python models' parameters: the keys their model.py reads.

``python -m tests.contract.check`` prints the totals quoted in docs/contract.md.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonllm.api.toolflags import QUANTIZE_FORMAT_SINCE
from tritonllm.api.versions import NGC_TRTLLM

TABLES = Path(__file__).resolve().parent / "tables"


# --- tables -------------------------------------------------------------------------------


def version_key(text: str) -> tuple[int, ...]:
    """Order versions the way releases follow each other: 0.11.0.dev2024… < 1.2.0rc2 <
    1.2.0 < 0.11.0.post1 < 0.11.1; NGC's build suffix (1.0.3.2510) ranks as a post release."""
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(dev|post|rc)?(\d+))?", text)
    if not m:
        raise ValueError(text)
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    kind, num = m.group(4), int(m.group(5) or 0)
    rank = {"dev": -2, "rc": -1}.get(kind or "", 1 if num else 0)
    return (major, minor, patch, rank, num)


@dataclass(frozen=True)
class Table:
    tool: str
    version: str
    exact: bool
    source: dict[str, Any]
    options: dict[str, dict[str, Any]]
    models: dict[str, dict[str, list[str]]]
    # launch_triton_server: the tritonserver flags the launcher writes into each rank's command.
    tritonserver_flags: tuple[str, ...] = ()

    def cite_model(self, key: str) -> str:
        """The template of one model (`llmapi:tensorrt_llm`: the LLM-API model's)."""
        path = next((p for p in self.source["paths"] if f"/{key.split(':')[-1]}/" in p), "")
        if key.startswith("llmapi:"):
            path = next(p for p in self.source["paths"] if "/llmapi/" in p)
        # Files read from the search index each keep their own commit (source.commits).
        commit = self.source.get("commits", {}).get(path, self.source["commit"])
        where = self.source.get("tag") or commit[:12]
        return f"templates {self.version} ({self.source['repository']}@{where}:{path})"

    @property
    def cite(self) -> str:
        s = self.source
        where = s.get("tag") or s.get("branch") or s["commit"][:12]
        return f"{self.tool} {self.version} ({s['repository']}@{where}:{','.join(s['paths'])})"


@functools.cache
def tables() -> dict[str, list[Table]]:
    """tool -> its tables, oldest first."""
    out: dict[str, list[Table]] = {}
    for path in sorted(TABLES.glob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw["tool"] in ("LLM", "llmapi_template"):
            continue  # the LLM-API tables: tests/contract/llmapi_check.py reads them
        t = Table(
            tool=raw["tool"],
            version=raw["version"],
            exact=raw["exact"],
            source=raw["source"],
            options=raw.get("options", {}),
            models=raw.get("models", {}),
            tritonserver_flags=tuple(raw.get("tritonserver_flags", ())),
        )
        out.setdefault(t.tool, []).append(t)
    for ts in out.values():
        ts.sort(key=lambda t: version_key(t.version))
    return out


def for_version(tool: str, version: str) -> list[Table]:
    """The exact table, else the nearest older and newer ones (those that exist)."""
    ts = tables()[tool]
    key = version_key(version)
    exact = [t for t in ts if t.exact and version_key(t.version) == key]
    if exact:
        return exact
    older = [t for t in ts if version_key(t.version) < key]
    newer = [t for t in ts if version_key(t.version) > key]
    return [*older[-1:], *newer[:1]]


def server_table(ngc: str) -> Table:
    return next(t for t in tables()["tritonserver"] if t.version == ngc)


def label(ts: list[Table], version: str) -> str:
    names = "+".join(t.version for t in ts)
    if version_key(ts[-1].version) < version_key(version):
        names += "(no newer table)"
    return names


# --- checks -------------------------------------------------------------------------------


@dataclass
class Report:
    """What one rendered deployment was checked against, and what failed."""

    argvs: int = 0
    options: int = 0  # argv options parsed
    config_items: int = 0  # config.pbtxt parameter keys and tensors compared
    problems: list[str] = field(default_factory=list)
    unchecked_choices: set[str] = field(default_factory=set)
    # Values past the newest reachable table, taken on the operator's rule (later_values).
    trusted: set[str] = field(default_factory=set)

    def add(self, other: Report) -> None:
        self.argvs += other.argvs
        self.options += other.options
        self.config_items += other.config_items
        self.problems += other.problems
        self.unchecked_choices |= other.unchecked_choices
        self.trusted |= other.trusted


def newer_than(table: Table, version: str) -> bool:
    return version_key(version) > version_key(table.version)


# Values the operator says a version after every reachable table added (tritonllm.api.toolflags):
# (tool, option, value) -> since. Past the newest table such a value cannot be checked; it is
# accepted only where the operator's own rule puts its first version after that table.
def later_values() -> dict[tuple[str, str, str], str]:
    return {("quantize", "--qformat", f): str(v) for f, v in QUANTIZE_FORMAT_SINCE.items()}


def _lookup(
    rep: Report, table: Table, who: str, name: str, inline: bool
) -> dict[str, Any] | None:
    """The table's entry for option `name`, or None (reported) when it does not exist; also
    None (reported if given a value) for a switch, which takes no value to check."""
    rep.options += 1
    opt = table.options.get(name)
    if opt is None:
        rep.problems.append(f"{who}: unknown option {name} (checked against {table.cite})")
        return None
    if not opt["value"]:
        if inline:
            rep.problems.append(f"{who}: {name} takes no value (checked against {table.cite})")
        return None
    return opt


def check_argparse(
    argv: list[str], table: Table, who: str, version: str | None = None
) -> Report:
    """Parse `argv` (the tool's arguments, program removed) as argparse would, with `table`.
    `version`: the release being checked, when `table` is the newest (older) one reachable."""
    rep = Report(argvs=1)
    later = later_values() if version and newer_than(table, version) else {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            rep.problems.append(f"{who}: stray argument {tok!r} (checked against {table.cite})")
            continue
        name, eq, inline = tok.partition("=")
        opt = _lookup(rep, table, who, name, bool(eq))
        if opt is None:
            continue
        if eq:
            values = [inline]
        else:
            values = []
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
                if opt["nargs"] in (None, "?"):
                    break
        if not values and opt["nargs"] not in ("?", "*"):
            rep.problems.append(f"{who}: {name} without its value (checked against {table.cite})")
            continue
        if opt["choices"] is None:
            if "choices_unresolved" in opt:
                rep.unchecked_choices.add(f"{table.tool} {name}")
            continue
        allowed = {str(c) for c in opt["choices"]}
        for v in values:
            since = later.get((table.tool, name, v))
            claimed = since and newer_than(table, since)
            if claimed and version_key(since) <= version_key(version or ""):
                rep.trusted.add(f"{table.tool} {name} {v} (operator: since {since})")
            elif v not in allowed:
                rep.problems.append(
                    f"{who}: {name} {v} is not one of {sorted(allowed)} "
                    f"(checked against {table.cite})"
                )
    return rep


def tritonserver_segments(argv: list[str]) -> list[list[str]]:
    """Each rank's tritonserver arguments in an mpirun (or a single tritonserver) argv."""
    segments: list[list[str]] = []
    current: list[str] | None = None
    for tok in argv:
        if tok.endswith("/tritonserver") or tok == "tritonserver":
            current = []
            segments.append(current)
        elif tok == ":":
            current = None
        elif current is not None:
            current.append(tok)
    return segments


def check_tritonserver(args: list[str], table: Table, who: str) -> Report:
    """tritonserver takes --name=value (or --name value) and bare --name for ArgNone."""
    rep = Report(argvs=1)
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        name, eq, value = tok.partition("=")
        opt = _lookup(rep, table, who, name, bool(eq))
        if opt is None:
            continue
        if not eq:
            if i >= len(args) or args[i].startswith("--"):
                rep.problems.append(
                    f"{who}: {name} without its value (checked against {table.cite})"
                )
                continue
            value = args[i]
            i += 1
        if opt["choices"] is not None and value not in opt["choices"]:
            rep.problems.append(
                f"{who}: {name}={value} is not one of {opt['choices']} "
                f"(checked against {table.cite})"
            )
    return rep


_PARAM_KEY = re.compile(r'key:\s*"([^"]+)"\s*\n\s*value\s*\{\s*\n?\s*string_value')


def parameter_keys(pbtxt_text: str) -> list[str]:
    """The keys of the top-level `parameters` map of one rendered config.pbtxt."""
    return _PARAM_KEY.findall(pbtxt_text)


@functools.cache
def python_model_source(name: str) -> str:
    return resources.files("tritonllm.triton").joinpath("models", f"{name}.py").read_text("utf-8")


# Our Python models and the model.py that reads each one's parameters.
PYTHON_MODELS = {
    "preprocessing": "preprocessing",
    "postprocessing": "postprocessing",
    "tensorrt_llm_bls": "tensorrt_llm_bls",
}


# Models whose tensors are the backend's (tensorrt_llm: the C++ backend reads and writes them by
# name) or the clients' (ensemble): they must equal the template's, names and data types.
TENSOR_MODELS = ("tensorrt_llm", "ensemble")


def check_tensors(model: str, text: str, template: Table, key: str, who: str) -> Report:
    """Our `model` config's tensors against the template's model `key`: every tensor we declare
    is the template's, with its data type (one written as a ${placeholder} upstream is left to
    the renderer); every output and every required input of the template is ours."""
    rep = Report()
    cite = f"{template.cite_model(key)}"
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    for kind, tensors in (("inputs", cfg.input), ("outputs", cfg.output)):
        theirs: dict[str, dict[str, Any]] = template.models[key][kind]
        ours = {t.name: model_config_pb2.DataType.Name(t.data_type) for t in tensors}
        rep.config_items += len(ours)
        for name in sorted(ours.keys() - theirs.keys()):
            rep.problems.append(f"{who}: {model} {kind[:-1]} {name} is not in {cite}")
        for name in sorted(theirs.keys() - ours.keys()):
            if kind == "outputs" or not theirs[name]["optional"]:
                rep.problems.append(f"{who}: {model} lacks the {kind[:-1]} {name} of {cite}")
        for name in sorted(ours.keys() & theirs.keys()):
            dtype = theirs[name]["data_type"]
            if not dtype.startswith("${") and dtype != ours[name]:
                rep.problems.append(
                    f"{who}: {model} {kind[:-1]} {name} is {ours[name]}, {dtype} in {cite}"
                )
    return rep


def check_repository(
    files: dict[str, str], templates: list[Table], who: str, version: str | None = None
) -> Report:
    """`version`: the TensorRT-LLM release; tensors are compared only where a template of
    exactly that version was read (later releases renamed some, see docs/contract.md)."""
    rep = Report()
    key = version_key(version) if version else None
    exact = [t for t in templates if t.exact and version_key(t.version) == key]
    for rel, text in sorted(files.items()):
        if "${" in text:
            rep.problems.append(f"{who}: {rel} keeps a ${{…}} placeholder")
        if not rel.endswith("/config.pbtxt"):
            continue
        model = rel.split("/", 1)[0]
        keys = parameter_keys(text)
        rep.config_items += len(keys)
        if model in PYTHON_MODELS:
            source = python_model_source(PYTHON_MODELS[model])
            for k in keys:
                if f'"{k}"' not in source and f"'{k}'" not in source:
                    rep.problems.append(
                        f"{who}: {rel} sets {k}, which our {model} model.py never reads"
                    )
        # runtime llmapi: tensorrt_llm is the LLM-API Python model, whose tensors
        # tests/contract/llmapi_check.py compares with the llmapi template of each version.
        llmapi = f"{model}/1/model.yaml" in files
        if model in TENSOR_MODELS and exact and not llmapi:
            if model in exact[0].models:
                rep.add(check_tensors(model, text, exact[0], model, who))
            else:
                rep.problems.append(f"{who}: {exact[0].cite} has no {model} model")
        if model == "tensorrt_llm" and keys:
            for t in templates:
                read = set(t.models["tensorrt_llm"]["parameters"])
                for k in keys:
                    if k not in read:
                        rep.problems.append(
                            f"{who}: {rel} sets parameter {k}, which the template does not "
                            f"read (checked against {t.cite_model(model)})"
                        )
    return rep


# --- one deployment -----------------------------------------------------------------------


@dataclass(frozen=True)
class Against:
    """The tables one NGC tag is checked against."""

    ngc: str
    trtllm: str

    @property
    def tools(self) -> dict[str, list[Table]]:
        names = ["trtllm-build", "quantize", *(f"convert_checkpoint-{c}" for c in CONVERTER_DIRS)]
        return {n: for_version(n, self.trtllm) for n in names}

    @property
    def templates(self) -> list[Table]:
        return for_version("templates", self.trtllm)

    @property
    def server(self) -> Table:
        return server_table(self.ngc)

    @property
    def id(self) -> str:
        return (
            f"{self.ngc}[trtllm {self.trtllm}: "
            f"tools {label(self.tools['trtllm-build'], self.trtllm)}, "
            f"templates {label(self.templates, self.trtllm)}, tritonserver {self.server.version}]"
        )


CONVERTER_DIRS = ("gpt", "llama", "qwen", "gemma", "phi", "falcon")


def against(ngc: str) -> Against:
    return Against(ngc, NGC_TRTLLM[ngc])


def check_converter_path(paths: list[str], d: str, table: Table, who: str) -> Report:
    """The runtime looks for the converter at `paths` (relative to examples/, {dir} filled in):
    the path the table was read from must be one of them, or the build finds no script."""
    rep = Report()
    upstream = table.source["paths"][0].removeprefix("examples/")
    if upstream not in {p.format(dir=d) for p in paths}:
        rep.problems.append(
            f"{who}: {d}/convert_checkpoint.py is looked for at {paths}, but the converter is "
            f"examples/{upstream} (checked against {table.cite})"
        )
    return rep


def check_build_plan(plan: dict[str, Any], ag: Against, who: str) -> Report:
    rep = Report()
    tools = ag.tools
    v = ag.trtllm
    for step in plan.get("steps", []):
        if step["name"] == "quantize" and not step["argv"][1].endswith("/quantize.py"):
            # runtime llmapi pre-quantizes with Model Optimizer's own script, not
            # TensorRT-LLM's examples/quantization/quantize.py: these tables do not apply.
            continue
        if step["name"] == "quantize":
            for t in tools["quantize"]:
                rep.add(check_argparse(step["argv"][2:], t, f"{who} quantize.py", v))
        elif step["name"] == "convert":
            # Each converter's own argv; an architecture left to `auto` has one per converter,
            # and a refusal (naming the version) for those that cannot convert this spec.
            for d, argv in sorted(step["argvByDir"].items()):
                for t in tools[f"convert_checkpoint-{d}"]:
                    rep.add(check_argparse(argv[2:], t, f"{who} {d}/convert_checkpoint.py", v))
                    rep.add(check_converter_path(step["converterPaths"], d, t, who))
            for d, why in step["unsupported"].items():
                if str(v) not in why:
                    rep.problems.append(f"{who}: refusal for {d} does not name {v}: {why}")
            if step["exampleDir"] and step.get("argv") != step["argvByDir"].get(step["exampleDir"]):
                rep.problems.append(f"{who}: convert argv is not its converter's")
        elif step["name"] == "build":
            for t in tools["trtllm-build"]:
                rep.add(check_argparse(step["argv"][1:], t, f"{who} trtllm-build", v))
    return rep


def check_launch(argv: list[str], ag: Against, who: str) -> Report:
    rep = Report()
    for rank, args in enumerate(tritonserver_segments(argv)):
        rep.add(check_tritonserver(args, ag.server, f"{who} tritonserver rank {rank}"))
    return rep


def check_rendered(rendered: Any, ag: Against, who: str) -> Report:
    rep = check_build_plan(rendered.build_plan, ag, who)
    rep.add(check_launch(rendered.launch_plan["argv"], ag, who))
    rep.add(check_repository(rendered.repository, ag.templates, who, ag.trtllm))
    return rep


def main() -> None:
    from tests.contract.scenarios import all_cases

    total = Report()
    refused = 0
    cases = 0
    for case in all_cases():
        cases += 1
        if case.refused is not None:
            refused += 1
            continue
        total.add(check_rendered(case.rendered, against(case.ngc), case.id))
    print(
        f"{cases} (tag, scenario) cases, {refused} refused by the operator, "
        f"{total.argvs} argvs parsed ({total.options} options), {total.config_items} "
        f"config.pbtxt parameter keys and tensors compared, {len(total.problems)} problems"
    )
    for p in total.problems:
        print("  ", p)
    if total.trusted:
        print("taken on the operator's rule (a table older than it lacks the value):",
              sorted(total.trusted))
    if total.unchecked_choices:
        print("choices not resolvable from the source:", sorted(total.unchecked_choices))


if __name__ == "__main__":
    main()
