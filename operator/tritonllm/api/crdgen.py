"""Generate the TritonLLMDeployment CustomResourceDefinition from the pydantic models.

The CRD is never edited by hand: `tritonllm crd` writes crds/ from this module and a unit test
fails when the committed file differs. Pydantic's JSON Schema is turned into a *structural*
OpenAPI v3 schema: refs inlined, no titles, no nulls (optional fields are simply not required),
``exclusiveMinimum`` in OpenAPI 3.0 form, quantities as int-or-string, nested objects defaulted to
``{}`` so the API server fills their defaults too, and each model's :class:`Rule` objects attached
as ``x-kubernetes-validations`` (CEL) at the model's place in the tree.
"""

from __future__ import annotations

import copy
from typing import Any

from . import constants as c
from .deployment import NAME_PATTERN
from .engine import TritonLLMEngineSpec, TritonLLMEngineStatus
from .spec import RULE_SITES, TritonLLMDeploymentSpec
from .status import TritonLLMDeploymentStatus

Schema = dict[str, Any]


def _inline(node: Any, defs: dict[str, Schema]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
            rest = {k: v for k, v in node.items() if k != "$ref"}
            target.update(rest)  # a $ref with siblings (description, default) keeps them
            return _inline(target, defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _structural(node: Schema) -> Schema:
    """Rewrite one (already inlined) pydantic schema node into structural OpenAPI v3."""
    node = dict(node)
    node.pop("title", None)
    # Optional[X] = anyOf[X, null] -> X (absence means None; nulls are not allowed on the wire).
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            merged = dict(options[0])
            for k, v in node.items():
                if k != "anyOf":
                    merged[k] = v  # the field's own description/default beat the type's
            node = merged
        node.pop("title", None)
    if node.get("default", "unset") is None:
        node.pop("default")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "exclusiveMinimum" in node and not isinstance(node["exclusiveMinimum"], bool):
        node["minimum"] = node.pop("exclusiveMinimum")
        node["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node and not isinstance(node["exclusiveMaximum"], bool):
        node["maximum"] = node.pop("exclusiveMaximum")
        node["exclusiveMaximum"] = True
    if node.pop("x-quantity", False):
        pattern = node.pop("pattern")
        node.pop("type", None)
        node.update(
            {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": pattern,
                "x-kubernetes-int-or-string": True,
            }
        )
    if "enum" in node and "type" not in node:
        values = node["enum"]
        node["type"] = "integer" if all(isinstance(v, int) for v in values) else "string"
    if "properties" in node:
        node["type"] = "object"
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
        for prop in node["properties"].values():
            # An object whose fields all have defaults gets its fully defaulted value as its
            # own default: the API server then fills it in when the user leaves the object out,
            # and CEL rules on it (checked against the default at CRD creation) see every key.
            if (
                prop.get("type") == "object"
                and "properties" in prop
                and not prop.get("required")
                and "default" not in prop
            ):
                prop["default"] = {
                    k: v["default"] for k, v in prop["properties"].items() if "default" in v
                }
        node.pop("additionalProperties", None)
    elif isinstance(node.get("additionalProperties"), dict):
        node["type"] = "object"
        node["additionalProperties"] = _structural(node["additionalProperties"])
    if "items" in node:
        node["items"] = _structural(node["items"])
    return node


def model_schema(model: type) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    defs = raw.pop("$defs", {})
    return _structural(_inline(raw, defs))


def _node_at(schema: Schema, dotted: str) -> Schema:
    node = schema
    for part in dotted.split(".")[1:]:
        node = node["properties"][part]
    return node


def spec_schema() -> Schema:
    schema = model_schema(TritonLLMDeploymentSpec)
    for site, model in RULE_SITES.items():
        if model.rules:
            _node_at(schema, site)["x-kubernetes-validations"] = [r.schema() for r in model.rules]
    return schema


def status_schema() -> Schema:
    schema = model_schema(TritonLLMDeploymentStatus)
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    conditions["items"]["required"] = sorted(
        set(conditions["items"].get("required", [])) | {"type", "status", "lastTransitionTime"}
    )
    return schema


PRINTER_COLUMNS: list[Schema] = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": ".status.ready",
        "description": "Ready replicas / desired replicas",
    },
    {
        "name": "Available",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Available")].status',
        "description": "The Available condition",
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.reason",
        "description": "Why the deployment is in its current state",
    },
    {
        "name": "TPxPP",
        "type": "string",
        "jsonPath": ".status.parallelism",
        "description": "Tensor x pipeline parallelism of the served engine",
    },
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".status.replicas",
        "description": "Serving replicas",
    },
    {
        "name": "Runtime",
        "type": "string",
        "jsonPath": ".status.runtime",
        "priority": 1,
        "description": "engine or llmapi (spec.runtime, or the one the image's version implies)",
    },
    {
        "name": "Engine",
        "type": "string",
        "jsonPath": ".status.engine.key",
        "priority": 1,
        "description": "Engine key (names /engines/<key> on the model store)",
    },
    {
        "name": "Image",
        "type": "string",
        "jsonPath": ".spec.image",
        "priority": 1,
        "description": "Triton TensorRT-LLM image",
    },
    {
        "name": "Phase",
        "type": "string",
        "jsonPath": ".status.phase",
        "priority": 1,
        "description": "The lifecycle phase under way (status.phases times each)",
    },
    {
        "name": "In-Phase",
        "type": "date",
        "jsonPath": ".status.phaseStarted",
        "priority": 1,
        "description": "How long the phase under way has lasted",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _crd(
    *,
    crd_name: str,
    kind: str,
    plural: str,
    singular: str,
    short_names: tuple[str, ...],
    root: Schema,
    columns: list[Schema],
    scale: bool,
) -> Schema:
    subresources: Schema = {"status": {}}
    if scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.serving.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name, "labels": {c.LABEL_PART_OF: c.APP_NAME}},
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": list(c.CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def crd() -> Schema:
    """The TritonLLMDeployment CustomResourceDefinition as a dict."""
    root: Schema = {
        "type": "object",
        "description": "TritonLLMDeployment serves a large language model with Triton Inference "
        "Server and TensorRT-LLM: it builds (and caches) the engine, writes the model repository "
        "and runs an autoscalable, observable endpoint.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {c.MAX_NAME_LENGTH}",
                "message": f"metadata.name must be at most {c.MAX_NAME_LENGTH} characters: child "
                "objects add suffixes and Service names are limited to 63",
            },
            {
                "rule": f"self.metadata.name.matches('{NAME_PATTERN}')",
                "message": "metadata.name must start with a letter (it names a Service, a "
                "DNS-1035 label)",
            },
        ],
    }
    return _crd(
        crd_name=c.CRD_NAME,
        kind=c.KIND,
        plural=c.PLURAL,
        singular=c.SINGULAR,
        short_names=c.SHORT_NAMES,
        root=root,
        columns=PRINTER_COLUMNS,
        scale=True,
    )


ENGINE_COLUMNS: list[Schema] = [
    {"name": "State", "type": "string", "jsonPath": ".status.state"},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.source"},
    {"name": "TP", "type": "integer", "jsonPath": ".spec.tensorParallel"},
    {"name": "PP", "type": "integer", "jsonPath": ".spec.pipelineParallel"},
    {"name": "TRT-LLM", "type": "string", "jsonPath": ".spec.trtllmVersion"},
    {"name": "Attempts", "type": "integer", "jsonPath": ".status.attempts", "priority": 1},
    {"name": "GPU", "type": "string", "jsonPath": ".spec.gpuProduct", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def engine_crd() -> Schema:
    """The TritonLLMEngine CustomResourceDefinition (the engine cache records)."""
    root: Schema = {
        "type": "object",
        "description": "TritonLLMEngine records one engine (or downloaded checkpoint) on a model "
        "store. Written by the operator; it outlives deployments and is the engine cache.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": model_schema(TritonLLMEngineSpec),
            "status": model_schema(TritonLLMEngineStatus),
        },
    }
    return _crd(
        crd_name=c.ENGINE_CRD_NAME,
        kind=c.ENGINE_KIND,
        plural=c.ENGINE_PLURAL,
        singular=c.ENGINE_SINGULAR,
        short_names=c.ENGINE_SHORT_NAMES,
        root=root,
        columns=ENGINE_COLUMNS,
        scale=False,
    )


def all_crds() -> dict[str, Schema]:
    """File name -> CRD, for every kind tritonllm defines."""
    return {
        f"{c.GROUP}_{c.PLURAL}.yaml": crd(),
        f"{c.GROUP}_{c.ENGINE_PLURAL}.yaml": engine_crd(),
        **peering_crds(),
    }


def _peering_crd(plural: str, kind: str, scope: str) -> Schema:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev", "labels": {c.LABEL_PART_OF: c.APP_NAME}},
        "spec": {
            "group": "kopf.dev",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "scope": scope,
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "kopf peering: operator replicas announce themselves "
                            "here and "
                            "only the highest-priority one acts (tritonllm's leader election).",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def peering_crds() -> dict[str, Schema]:
    """kopf's peering kinds (kopf.dev/v1), needed when the operator runs with peering."""
    return {
        "kopf.dev_clusterkopfpeerings.yaml": _peering_crd(
            "clusterkopfpeerings", "ClusterKopfPeering", "Cluster"
        ),
        "kopf.dev_kopfpeerings.yaml": _peering_crd("kopfpeerings", "KopfPeering", "Namespaced"),
    }
