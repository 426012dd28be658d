"""`tritonllm fit -f CR [--gpu PRODUCT]... [--config config.json]`: does it fit, and on what.

Prints, per document and GPU product, the fit planner's table (tritonllm.api.fit): weights,
workspace, KV cache per token and KV tokens per GPU for each layout `engine.parallelism.auto`
tries, up to the first that fits, and the spec's own layout; then the verdict the operator (and
`tritonllm render`) would give. No cluster is contacted. Exit 0 when the served layout fits (or
auto finds one), 2 when it does not or the input is invalid.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

from tritonllm.api import fit
from tritonllm.api.deployment import InvalidDeployment, parse_deployment

from .render import EXIT_INVALID, _read
from .yamlio import load_all


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fit", help="print the fit planner's table for a CR (no cluster)")
    p.add_argument("-f", "--filename", required=True, help="CR file (YAML), or - for stdin")
    p.add_argument("--gpu", action="append", default=[], metavar="PRODUCT",
                   help="nvidia.com/gpu.product to size for (repeatable; default: "
                   f"spec.gpu.product). Known: {', '.join(fit.GPUS)}")
    p.add_argument("--config", type=Path,
                   help="the model's config.json (default: the planner's table of well-known "
                   "models, by spec.model.source)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run)


def _sizing_spec(doc: dict[str, Any]) -> Any:
    """The spec with the checks that need the planner turned off (no product, no auto): the
    planner runs on it below, so that a layout that does not fit still gets its table."""
    doc = copy.deepcopy(doc)
    spec: dict[str, Any] = doc["spec"] if isinstance(doc.get("spec"), dict) else {}
    (spec.get("gpu") or {}).pop("product", None)
    par = (spec.get("engine") or {}).get("parallelism")
    if isinstance(par, dict):
        par.pop("auto", None)
    return parse_deployment(doc).spec


def report(doc: dict[str, Any], product: str | None, config: dict[str, Any] | None) -> dict[
        str, Any]:
    """The planner's answer for one document and product, as plain data."""
    spec = _sizing_spec(doc)
    par = ((doc.get("spec") or {}).get("engine") or {}).get("parallelism") or {}
    auto = bool(par.get("auto")) if isinstance(par, dict) else False
    product = product or str(((doc.get("spec") or {}).get("gpu") or {}).get("product") or "")
    arch = fit.architecture_from_config(config) if config else fit.known_architecture(
        spec.model.source)
    if arch is None:
        raise ValueError(f"no architecture for {spec.model.source}: pass --config config.json")
    memory = fit.gpu_memory(product)
    if memory is None:
        raise ValueError(f"no memory figure for gpu product {product!r}: pass --gpu, one of "
                         f"{', '.join(fit.GPUS)}")
    req = fit.request_from_spec(spec)
    chosen, tried = fit.choose(arch, req, memory, spec.gpu.perNode)
    own = None if auto else fit.compute(arch, req, memory, spec.topology.tensor,
                                        spec.topology.pipeline, spec.gpu.perNode)
    rows = tried + ([own] if own and own.layout not in {f.layout for f in tried} else [])
    served = chosen if auto else own
    if served is not None and served.fits:
        verdict = f"{served.layout} fits: the KV cache holds {served.kv_tokens:,} tokens, " \
            f"{req.tokens_text} asked; freeGpuMemFraction {served.fraction_needed:.3g} would do"
    elif served is not None:
        verdict = "refused: " + fit.refusal(served, req, product, chosen)
    else:
        verdict = "refused: no layout fits up to 64 GPUs"
    return {
        "name": (doc.get("metadata") or {}).get("name"), "model": spec.model.source,
        "parameters": arch.params(), "gpu": product, "gpuMemoryGiB": round(memory / fit.GIB, 1),
        "requested": req.tokens_text, "auto": auto,
        "layout": served.layout if served else None, "fits": bool(served and served.fits),
        "verdict": verdict,
        "table": [dict(zip(fit.TABLE_HEADER, fit.table_row(f), strict=True)) for f in rows],
    }


def format_table(rows: list[dict[str, str]]) -> list[str]:
    header = list(fit.TABLE_HEADER)
    widths = [max(len(h), *(len(r[h]) for r in rows)) for h in header]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    return [line.rstrip()] + ["  ".join(r[h].ljust(w) for h, w in zip(
        header, widths, strict=True)).rstrip() for r in rows]


def run(args: argparse.Namespace) -> int:
    try:
        docs = load_all(_read(args.filename))
        config = json.loads(args.config.read_text()) if args.config else None
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    reports, failed = [], False
    for doc in docs:
        for product in args.gpu or [None]:
            try:
                reports.append(report(doc, product, config))
            except (InvalidDeployment, ValueError, KeyError) as exc:
                print(f"error: {args.filename}: {exc}", file=sys.stderr)
                failed = True
    if args.json:
        print(json.dumps(reports, indent=2))
    for r in [] if args.json else reports:
        print(f"{r['name']}: {r['model']} ({r['parameters'] / 1e9:.2f} B parameters) on "
              f"{r['gpu']} ({r['gpuMemoryGiB']} GiB), KV for {r['requested']}"
              + (" [parallelism.auto]" if r["auto"] else ""))
        print("\n".join("  " + line for line in format_table(r["table"])))
        print(f"  {r['verdict']}\n")
    return EXIT_INVALID if failed or not all(r["fits"] for r in reports) else 0
