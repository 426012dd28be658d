"""`tritonllm render -f CR.yaml [--out DIR]`: every object a TritonLLMDeployment produces.

Prints one YAML stream in apply order, ready for `kubectl apply --dry-run=server -f -`. With
--out it also writes, per deployment, the model repository files, the build/launch plans and the
objects under DIR/<namespace>/<name>/. Invalid input exits with code 2 and one line per problem,
each naming the field and the fix. No cluster is contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tritonllm.api.deployment import FieldError, InvalidDeployment, parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.render import (
    Rendered,
    RenderOptions,
    autoscaling,
    render_all,
    rendered_problems,
    validate,
)

from .yamlio import dump_all, load_all

EXIT_INVALID = 2
# The flags that set an operator setting of the same name (OperatorSettings).
RENDER_FLAGS = ("tools_image", "prometheus_url", "activator_image", "operator_namespace",
                "prometheus_url_allowed")
# What the API server's strict field validation knows at the top and in metadata (ObjectMeta).
TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
META_FIELDS = (
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields", "selfLink",
)


def _unknown_fields(doc: Any) -> list[FieldError]:
    if not isinstance(doc, dict):
        return []
    meta = doc.get("metadata")
    unknown = [k for k in doc if k not in TOP_FIELDS]
    unknown += [f"metadata.{k}" for k in meta if k not in META_FIELDS] if isinstance(
        meta, dict) else []
    return [FieldError(str(k), "is not a field of a TritonLLMDeployment (the API server refuses "
                       "unknown fields); check its spelling") for k in unknown]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("render", help="print every object (and repository file) a CR produces")
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        help="CR file (YAML, several documents allowed), or - for standard input",
    )
    p.add_argument("--out", help="also write repository files and plans under this directory")
    # The operator's settings that shape objects: TRITONLLM_* from the environment, as
    # `tritonllm run` reads them, unless a flag names one.
    p.add_argument("--tools-image",
                   help="image carrying tritonllm's in-pod entry points (the operator image; "
                   "TRITONLLM_TOOLS_IMAGE)")
    p.add_argument("--namespace", help="namespace for CRs that do not set one")
    p.add_argument("--prometheus-url",
                   help="the operator's TRITONLLM_PROMETHEUS_URL (KEDA triggers of CRs without "
                   "spec.autoscaling.prometheusUrl)")
    p.add_argument("--prometheus-url-allowed", metavar="LIST",
                   help="the operator's TRITONLLM_PROMETHEUS_URL_ALLOWED (comma list of URLs or "
                   "hosts a CR's spec.autoscaling.prometheusUrl may name): given, a CR naming "
                   "another is refused as the operator refuses it")
    p.add_argument("--activator-image",
                   help="HAProxy image of the scale-to-zero activator (TRITONLLM_ACTIVATOR_IMAGE)")
    p.add_argument("--operator-namespace",
                   help="namespace the operator runs in (TRITONLLM_OPERATOR_NAMESPACE): a "
                   "verified rollout's NetworkPolicy admits its pods' smoke requests")
    p.add_argument("--pod-monitors", action="store_true",
                   help="render PodMonitors, as the operator does where the cluster has the "
                   "Prometheus operator's CRDs")
    p.set_defaults(func=run)


def _read(filename: str) -> str:
    return sys.stdin.read() if filename == "-" else Path(filename).read_text()


def no_prometheus(rendered: Rendered) -> str | None:
    """A warning for a KEDA ScaledObject whose Prometheus is unknown here (the operator fills
    it from its TRITONLLM_PROMETHEUS_URL, and refuses the deployment when that is unset too)."""
    if not autoscaling.lacks_prometheus(rendered.scaled_object):
        return None
    return (f"{rendered.namespace}/{rendered.name}: spec.autoscaling.prometheusUrl is unset: "
            "the ScaledObject's serverAddress is left empty here; the operator fills it from "
            "its TRITONLLM_PROMETHEUS_URL (pass --prometheus-url to render it the same way)")


def render_documents(
    docs: list[Any], opts: RenderOptions, namespace: str | None = None
) -> tuple[list[Rendered], list[str]]:
    """Render every CR in `docs`; returns the results and the error lines (empty if valid)."""
    results: list[Rendered] = []
    errors: list[str] = []
    for i, doc in enumerate(docs):
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if namespace and isinstance(doc, dict) and isinstance(meta or {}, dict):
            doc = {**doc, "metadata": {"namespace": namespace, **(meta or {})}}
        label = meta.get("name") if isinstance(meta, dict) else None
        where = f"document {i + 1}" + (f" ({label})" if isinstance(label, str) else "")
        missing = [
            FieldError(k, "is required (the API server refuses an object without it)")
            for k in ("apiVersion", "kind")
            if isinstance(doc, dict) and k not in doc
        ] + _unknown_fields(doc)
        try:
            dep = parse_deployment(doc)
        except InvalidDeployment as exc:
            errors += [f"{where}: {e}" for e in missing + exc.errors]
            continue
        # the operator always checks its allow-list; here only when it is given (flag or env)
        given = "prometheus_url_allowed" in opts.settings.model_fields_set
        problems = missing + validate(dep, opts.settings if given else None)
        if not problems:
            rendered = render_all(dep, opts)
            problems = rendered_problems(rendered)
        if problems:
            errors += [f"{where}: {e}" for e in problems]
            continue
        results.append(rendered)
    return results, errors


def write_out(out: Path, rendered: Rendered) -> None:
    base = out / rendered.namespace / rendered.name
    for rel, body in rendered.repository.items():
        path = base / "repository" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    (base / "build.json").write_text(json.dumps(rendered.build_plan, indent=2, sort_keys=True))
    (base / "launch.json").write_text(json.dumps(rendered.launch_plan, indent=2, sort_keys=True))
    (base / "objects.yaml").write_text(dump_all(o.body for o in rendered.objects))


def settings_from(args: argparse.Namespace, env: dict[str, str] | None = None
                  ) -> OperatorSettings:
    """The operator's settings from the environment (TRITONLLM_*), the flags winning: one
    source, so this renders what the operator applies."""
    flags = {name: getattr(args, name, None) for name in RENDER_FLAGS}
    env = dict(os.environ if env is None else env)
    env.update({f"TRITONLLM_{k.upper()}": v for k, v in flags.items() if v is not None})
    return OperatorSettings.from_env(env)


def run(args: argparse.Namespace) -> int:
    try:
        docs = load_all(_read(args.filename))
    except OSError as exc:
        print(f"error: cannot read {args.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_INVALID
    except Exception as exc:  # yaml.YAMLError and friends: report, do not trace back
        print(f"error: {args.filename} is not valid YAML: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if not docs:
        print(f"error: {args.filename} holds no document", file=sys.stderr)
        return EXIT_INVALID
    try:
        settings = settings_from(args)
    except ValidationError as exc:
        for err in exc.errors():
            print(f"error: setting {'.'.join(map(str, err['loc']))}: {err['msg']}",
                  file=sys.stderr)
        return EXIT_INVALID
    opts = RenderOptions(settings=settings, pod_monitors=args.pod_monitors)
    results, errors = render_documents(docs, opts, args.namespace)
    if errors:
        for line in errors:
            print(f"error: {args.filename}: {line}", file=sys.stderr)
        return EXIT_INVALID
    for warning in filter(None, map(no_prometheus, results)):
        print(f"warning: {warning}", file=sys.stderr)
    objects = [o.body for r in results for o in r.objects]
    sys.stdout.write(dump_all(objects))
    if args.out:
        for r in results:
            write_out(Path(args.out), r)
    return 0
