"""The OpenAI frontend of the serving pods: the `openai` sidecar, its configuration file, its
base URL, and whether a deployment gets it.

The sidecar runs `tritonllm openai` from the operator image beside the `triton` container of
every pod that takes client traffic (single-node servers, multi-node leaders, and the
verification pods, which copy the serving template), reads its FrontendConfig from the plan
volume (`openai.json` of the plan ConfigMap) and the tokenizer from the store, mounted
read-only at the same path, and calls Triton's gRPC port on the pod's loopback.

Upgrading the operator restarts no pods by itself: with spec.openai.enabled empty, a deployment
whose live pods run without the frontend keeps it off while the revision without it is the one
they run, and gets it with the next rollout that happens for another reason (`decide`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import FieldError, TritonLLMDeployment
from tritonllm.api.spec import quantity_bytes
from tritonllm.api.status import OpenAIStatus
from tritonllm.triton.openai import (
    FRONTEND_CONFIG_KEY,
    FrontendConfig,
    frontend_config,
    served_model_name,
)

from . import naming
from .pod import PLAN_VOLUME, RenderOptions, container_security, scratch_mount, store_mounts

# Where the sidecar reads its configuration (the plan volume, as the triton container mounts it).
CONFIG_PATH = f"{c.PLAN_MOUNT}/{FRONTEND_CONFIG_KEY}"
# Stands for the served model name in the text the repository key hashes, when it is the
# deployment's own name: deployments of a namespace that differ only by name keep sharing one
# repository (the plan ConfigMap, named after the deployment, carries the real name).
SERVED_NAME_SLOT = "<served-model-name>"
# The frontend answers its readiness probe from what it knows (Triton's model ready over gRPC on
# the loopback): a short period, so that a pod takes traffic soon after Triton is ready.
READINESS_PERIOD_SECONDS = 2
OFF_UNTIL_ROLLOUT = (
    "OpenAI API off until the next rollout: the running pods predate it and adding it would "
    "restart them; set spec.openai.enabled: true to add it now"
)
OFF_BY_SPEC = "OpenAI API off: spec.openai.enabled is false"


def config(dep: TritonLLMDeployment) -> FrontendConfig:
    """The deployment's FrontendConfig, with the tokenizer where the model's tokenization reads
    it (the same path in the frontend's container)."""
    return frontend_config(dep, tokenizer_dir=naming.tokenizer_dir(dep))


def config_files(dep: TritonLLMDeployment) -> tuple[str, str]:
    """openai.json as the plan ConfigMap holds it, and as the repository key hashes it."""
    cfg = config(dep)
    text = _json(cfg)
    if cfg.served_model_name != dep.name:
        return text, text
    return text, _json(cfg.model_copy(update={"served_model_name": SERVED_NAME_SLOT}))


def _json(cfg: FrontendConfig) -> str:
    return cfg.model_dump_json(indent=2)


def base_url(dep: TritonLLMDeployment) -> str:
    host = f"{naming.serving_name(dep)}.{dep.namespace}.svc"
    return f"http://{host}:{c.OPENAI_PORT}/v1"


def container(
    dep: TritonLLMDeployment, opts: RenderOptions, *, prestop_seconds: int
) -> dict[str, Any]:
    """The `openai` sidecar. It drains with the triton container (the same preStop pause while
    the endpoints go, then SIGTERM to both; the frontend finishes what is in flight), and its
    readiness follows Triton's model through its own probe."""
    res = dep.spec.openai.resources
    return {
        "name": c.OPENAI_CONTAINER,
        "image": opts.settings.tools_image,
        "args": ["openai", "--config", CONFIG_PATH],
        "env": [
            {"name": "HOME", "value": c.SCRATCH_MOUNT},
            {"name": "TMPDIR", "value": c.SCRATCH_MOUNT},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "ports": [{"name": c.OPENAI_PORT_NAME, "containerPort": c.OPENAI_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": res.cpu, "memory": res.memory},
            "limits": {"memory": res.memoryLimit},
        },
        "readinessProbe": {
            "httpGet": {"path": "/health/ready", "port": c.OPENAI_PORT_NAME},
            "periodSeconds": READINESS_PERIOD_SECONDS,
            "failureThreshold": 3,
            "timeoutSeconds": 2,
        },
        "volumeMounts": [
            *store_mounts(dep, read_only=True),
            {"name": PLAN_VOLUME, "mountPath": c.PLAN_MOUNT, "readOnly": True},
            scratch_mount(),
        ],
        "lifecycle": {"preStop": {"sleep": {"seconds": prestop_seconds}}},
        "securityContext": container_security(dep),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def problems(dep: TritonLLMDeployment) -> list[FieldError]:
    """What the API server would refuse only when it creates the pods."""
    res = dep.spec.openai.resources
    if quantity_bytes(res.memory) > quantity_bytes(res.memoryLimit):
        return [FieldError("spec.openai.resources.memory",
                           f"the request {res.memory} exceeds memoryLimit {res.memoryLimit}; "
                           "raise memoryLimit or lower memory")]
    return []


@dataclasses.dataclass(frozen=True)
class Choice:
    """Whether the rendered pods run the frontend, and what status.openai says."""

    served: bool
    status: OpenAIStatus


def chosen(dep: TritonLLMDeployment, served: bool, *, deferred: bool = False) -> Choice:
    if served:
        status = OpenAIStatus(served=True, url=base_url(dep), model=served_model_name(dep))
    else:
        status = OpenAIStatus(served=False, message=OFF_UNTIL_ROLLOUT if deferred else OFF_BY_SPEC)
    return Choice(served, status)


def wanted(dep: TritonLLMDeployment, opts: RenderOptions) -> bool | None:
    """spec.openai.enabled, or what it means when empty without a live workload (on); None:
    decided by the live revision (tritonllm.render.render_all renders both ways)."""
    enabled = dep.spec.openai.enabled
    if enabled is not None:
        return enabled
    return True if opts.live_revision is None else None
