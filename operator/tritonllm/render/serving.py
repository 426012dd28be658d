"""The serving workload (Deployment or LeaderWorkerSet), its Service, HPA and disruption budget.

Single node (world size <= gpu.perNode): a Deployment whose pods each take world-size GPUs and run
`tritonllm launch`, which execs mpirun in the foreground (world_size ranks, rank 0 serving).
Multi node: a LeaderWorkerSet whose groups have world/perNode pods of perNode GPUs; the leader runs
mpirun over the group (SSH with a per-deployment key instead of `kubectl exec`, so no pod needs
`pods/exec`), workers run an unprivileged sshd and wait.

Rollouts surge one replica and never take one away first (maxUnavailable 0): an engine or
repository change keeps the old pods serving until new ones are Ready. Replicas are left out of the
object when an autoscaler owns them, so a server-side apply never resets the HPA's choice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment

from . import autoscaling, frontend, naming, network
from .jobs import configmap_key
from .plans import FRONTEND_CONFIG_KEY, LAUNCH_PLAN_KEY
from .pod import (
    PLAN_VOLUME,
    PYZ,
    SHM_VOLUME,
    TOOLS_VOLUME,
    RenderOptions,
    container_security,
    env,
    gpu_resources,
    metadata,
    pod_annotations,
    pod_labels,
    pod_spec_common,
    scratch_mount,
    scratch_volume,
    shm_volume,
    store_mounts,
    store_volumes,
    tools_init_container,
)

# The container kubectl picks when a command names none (kubectl logs, exec).
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
PROBE_PERIOD_SECONDS = 10
# The startup probe asks often: it is what turns "tritonserver is ready" into a Ready pod, so its
# period is pure added latency on every start (a 10 s period cost 5 s on average, up to 10 s);
# the ready endpoint is a cheap local HTTP call, and the budget stays the same.
STARTUP_PROBE_PERIOD_SECONDS = 2
# Seconds a deleted serving pod keeps serving before its SIGTERM (endpoint removal propagates).
PRESTOP_SLEEP_SECONDS = 5
# Startup budget: loading a cached engine from the store is minutes; the first load after a
# build (cold page cache) or an llmapi load (weights read and compiled at start) takes longer.
STARTUP_BUDGET_CACHED_SECONDS = 15 * 60
STARTUP_BUDGET_COLD_SECONDS = 45 * 60


def model_name(dep: TritonLLMDeployment) -> str:
    """The model clients call: the ensemble, or llmapi's single model."""
    return "tensorrt_llm" if dep.spec.runtime == "llmapi" else "ensemble"


def max_tokens_input(dep: TritonLLMDeployment) -> str:
    """The input of `model_name` that bounds the generated tokens: the ensemble's max_tokens,
    llmapi's sampling_param_max_tokens (its config.pbtxt in TensorRT-LLM's
    triton_backend/all_models/llmapi; another key would reach the model as an ignored request
    parameter, and the LLM API's default length would apply)."""
    return "sampling_param_max_tokens" if dep.spec.runtime == "llmapi" else "max_tokens"


def endpoint(dep: TritonLLMDeployment) -> str:
    host = f"{naming.serving_name(dep)}.{dep.namespace}.svc"
    route = "generate_stream" if dep.spec.serving.streaming else "generate"
    return f"http://{host}:{c.HTTP_PORT}/v2/models/{model_name(dep)}/{route}"


def probes(opts: RenderOptions) -> dict[str, Any]:
    budget = STARTUP_BUDGET_CACHED_SECONDS if opts.engine_cached else STARTUP_BUDGET_COLD_SECONDS
    return {
        "startupProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": STARTUP_PROBE_PERIOD_SECONDS,
            "failureThreshold": budget // STARTUP_PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 3,
            "timeoutSeconds": 5,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", "port": "http"},
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "failureThreshold": 6,
            "timeoutSeconds": 5,
        },
    }


def _ports() -> list[dict[str, Any]]:
    return [
        {"name": "http", "containerPort": c.HTTP_PORT, "protocol": "TCP"},
        {"name": "grpc", "containerPort": c.GRPC_PORT, "protocol": "TCP"},
        {"name": "metrics", "containerPort": c.METRICS_PORT, "protocol": "TCP"},
    ]


def _container(dep: TritonLLMDeployment, opts: RenderOptions, role: str) -> dict[str, Any]:
    """The serving container: `tritonllm launch` in the Triton image."""
    mode = {"server": "single", "leader": "leader", "worker": "worker"}[role]
    plan = f"{c.PLAN_MOUNT}/{LAUNCH_PLAN_KEY}"
    container: dict[str, Any] = {
        "name": "triton",
        "image": dep.spec.image,
        "command": ["python3", PYZ, "launch", "--mode", mode, "--plan", plan],
        "env": env(dep),
        "resources": gpu_resources(dep, dep.spec.topology.gpus_per_pod),
        "volumeMounts": [
            *store_mounts(dep, read_only=True),
            {"name": TOOLS_VOLUME, "mountPath": c.TOOLS_MOUNT, "readOnly": True},
            {"name": PLAN_VOLUME, "mountPath": c.PLAN_MOUNT, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": c.SHM_MOUNT},
            scratch_mount(),
        ],
        "securityContext": container_security(dep),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if role != "worker":
        container["ports"] = _ports()
        container.update(probes(opts))
        # A deleted pod leaves the Service's endpoints while the kubelet starts stopping it:
        # serving on for a few seconds before SIGTERM lets every kube-proxy stop sending it new
        # requests first, so a rollout or a pod deletion loses none (tritonserver then drains
        # what is in flight within --exit-timeout-secs).
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}}
    if dep.spec.topology.multi_node:
        container["volumeMounts"].append(
            {"name": "mpi-ssh", "mountPath": c.MPI_SSH_MOUNT, "readOnly": True}
        )
    return container


def _volumes(dep: TritonLLMDeployment, repo_key: str, openai: bool) -> list[dict[str, Any]]:
    keys = [LAUNCH_PLAN_KEY, FRONTEND_CONFIG_KEY] if openai else [LAUNCH_PLAN_KEY]
    items = [{"key": configmap_key(k), "path": k} for k in keys]
    cm = naming.plan_configmap_name(dep, repo_key)
    volumes: list[dict[str, Any]] = [
        *store_volumes(dep),
        {"name": TOOLS_VOLUME, "emptyDir": {}},
        {"name": PLAN_VOLUME, "configMap": {"name": cm, "items": items}},
        shm_volume(dep),
        scratch_volume(),
    ]
    if dep.spec.topology.multi_node:
        secret = {"secretName": naming.mpi_secret_name(dep), "defaultMode": 0o400}
        volumes.append({"name": "mpi-ssh", "secret": secret})
    return volumes


def _pod_template(
    dep: TritonLLMDeployment,
    repo_key: str,
    key: str,
    opts: RenderOptions,
    *,
    role: str,
    openai: bool = False,
) -> dict[str, Any]:
    """role: "server" (single node), "leader" or "worker" (multi node); `openai`: the pods
    that take traffic (not the workers) run the OpenAI frontend beside Triton."""
    component = c.COMPONENT_WORKER if role == "worker" else c.COMPONENT_SERVER
    sidecar = openai and role != "worker"
    labels = {
        **naming.base_labels(dep, component),
        c.LABEL_ENGINE_KEY: key,
        c.LABEL_REPO_KEY: repo_key,
    }
    annotations = pod_annotations(dep, {
        "prometheus.io/scrape": "true" if role != "worker" else "false",
        "prometheus.io/port": str(c.METRICS_PORT),
        "prometheus.io/path": "/metrics",
        # `kubectl logs|exec POD` mean tritonserver's container, not the frontend beside it.
        **({DEFAULT_CONTAINER_ANNOTATION: "triton"} if sidecar else {}),
    })
    return {
        "metadata": {"labels": pod_labels(dep, labels), "annotations": annotations},
        "spec": {
            **pod_spec_common(dep),
            # Long enough for tritonserver to drain in-flight requests after SIGTERM.
            "terminationGracePeriodSeconds": 60,
            "initContainers": [tools_init_container(dep, opts)],
            "containers": [
                _container(dep, opts, role),
                *([frontend.container(dep, opts, prestop_seconds=PRESTOP_SLEEP_SECONDS)]
                  if sidecar else []),
            ],
            "volumes": _volumes(dep, repo_key, sidecar),
        },
    }


def _replicas(dep: TritonLLMDeployment, opts: RenderOptions) -> dict[str, Any]:
    if dep.spec.autoscaling is None:
        return {"replicas": dep.spec.serving.replicas}
    # The HPA owns the count; keep what is live (or leave it to the API default on create).
    return {} if opts.observed_replicas is None else {"replicas": opts.observed_replicas}


def deployment(
    dep: TritonLLMDeployment, repo_key: str, key: str, opts: RenderOptions, *,
    openai: bool = False,
) -> dict[str, Any]:
    labels = {**naming.base_labels(dep, c.COMPONENT_SERVER), c.LABEL_ENGINE_KEY: key}
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(dep, naming.serving_name(dep), labels),
        "spec": {
            **_replicas(dep, opts),
            "selector": {"matchLabels": naming.selector_labels(dep)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": STARTUP_BUDGET_COLD_SECONDS + 600,
            "template": _pod_template(dep, repo_key, key, opts, role="server", openai=openai),
        },
    }
    return _with_revision(obj, [obj["spec"]["template"]])


def leader_worker_set(
    dep: TritonLLMDeployment, repo_key: str, key: str, opts: RenderOptions, *,
    openai: bool = False,
) -> dict[str, Any]:
    labels = {**naming.base_labels(dep, c.COMPONENT_SERVER), c.LABEL_ENGINE_KEY: key}
    obj: dict[str, Any] = {
        "apiVersion": dep.spec.topology.workload_api_version,
        "kind": dep.spec.topology.workload_kind,
        "metadata": metadata(dep, naming.serving_name(dep), labels),
        "spec": {
            **_replicas(dep, opts),
            "startupPolicy": "LeaderCreated",
            # The group's pods find each other by DNS through a headless Service. With the
            # default (Shared) policy LeaderWorkerSet names it after the set, which is the name
            # of our client Service: it finds that one, creates none, and no pod name resolves.
            # UniquePerReplica names one per group after its leader pod (`<name>-<group>`).
            "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "leaderWorkerTemplate": {
                "size": dep.spec.topology.pods_per_group,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod_template(dep, repo_key, key, opts, role="leader",
                                                openai=openai),
                "workerTemplate": _pod_template(dep, repo_key, key, opts, role="worker"),
            },
        },
    }
    templates = obj["spec"]["leaderWorkerTemplate"]
    return _with_revision(obj, [templates["leaderTemplate"], templates["workerTemplate"]])


def _with_revision(obj: dict[str, Any], templates: list[dict[str, Any]]) -> dict[str, Any]:
    """Stamp every pod template with the revision: a hash of the templates as rendered, so that
    it changes exactly when what the serving pods run changes (not with replicas)."""
    revision = naming.stable_hash(templates)
    for template in templates:
        template["metadata"]["annotations"][c.ANNOTATION_REVISION] = revision
    return obj


def template_revision(workload: Mapping[str, Any] | None) -> str | None:
    """The revision a live or rendered workload's pod template carries (None: not ours)."""
    spec = (workload or {}).get("spec") or {}
    tmpl = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate")
    return (((tmpl or {}).get("metadata") or {}).get("annotations") or {}).get(
        c.ANNOTATION_REVISION
    )


def verify_name(dep: TritonLLMDeployment) -> str:
    return f"{naming.serving_name(dep)}-verify"


def verify_workload(dep: TritonLLMDeployment, workload: dict[str, Any]) -> dict[str, Any]:
    """The verification workload of a revision (spec.rollout Verified): the rendered serving
    workload with one replica (one group), its own name, and component `verify` on its pods
    (the whole group's, multi node), which the Service does not select: it takes no client traffic
    while the operator sends it the smoke set. Not autoscaled, not scraped, and no preStop
    pause (no endpoint to drain: its GPUs are freed for the surge pod as soon as it stops)."""
    # A JSON round trip copies the plain rendered dict about 5x faster than copy.deepcopy, and
    # this runs on every pass of a verified deployment.
    obj: dict[str, Any] = json.loads(json.dumps(workload))
    obj["metadata"]["name"] = verify_name(dep)
    obj["metadata"]["labels"][c.LABEL_COMPONENT] = c.COMPONENT_VERIFY
    spec = obj["spec"]
    spec["replicas"] = 1
    if "template" in spec:  # Deployment: a selector of its own, disjoint from the serving one
        spec["selector"] = {"matchLabels": verify_selector(dep)}
        templates = [spec["template"]]
    else:
        lwt = spec["leaderWorkerTemplate"]
        templates = [lwt["leaderTemplate"], lwt["workerTemplate"]]
    for template in templates:
        template["metadata"]["labels"][c.LABEL_COMPONENT] = c.COMPONENT_VERIFY
        template["metadata"]["annotations"]["prometheus.io/scrape"] = "false"
        # No Service endpoint to leave before SIGTERM: its GPUs go to the surge pod at once.
        for container in template["spec"]["containers"]:
            container.pop("lifecycle", None)
    return obj


def verify_selector(dep: TritonLLMDeployment) -> dict[str, str]:
    return {**naming.selector_labels(dep), c.LABEL_COMPONENT: c.COMPONENT_VERIFY}


def _serving_metadata(dep: TritonLLMDeployment) -> dict[str, Any]:
    """Metadata of the objects named after the deployment (Service, HPA, PDB)."""
    return metadata(dep, naming.serving_name(dep), naming.base_labels(dep, c.COMPONENT_SERVER))


def service(dep: TritonLLMDeployment, *, openai: bool = False) -> dict[str, Any]:
    """The deployment's endpoint: the serving pods, or when it scales to zero the activator's
    pods, which forward to the serving pods through the backend Service. `openai`: the pods
    serve the OpenAI API, on port `openai`."""
    if autoscaling.scales_to_zero(dep):
        selector = autoscaling.activator_labels(dep)
    else:
        selector = naming.selector_labels(dep)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _serving_metadata(dep),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": "http", "port": c.HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {
                    "name": "grpc",
                    "port": c.GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                },
                {
                    "name": "metrics",
                    "port": c.METRICS_PORT,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                },
                *([autoscaling.openai_port()] if openai else []),
            ],
        },
    }


def group_selector(dep: TritonLLMDeployment) -> dict[str, Any]:
    """Every serving pod of the deployment: the server (single node) or leader pods and, multi
    node, the worker pods, which carry component `worker` (the Service selects only servers)."""
    return {
        "matchLabels": {c.LABEL_NAME: c.APP_NAME, c.LABEL_INSTANCE: dep.name},
        "matchExpressions": [
            {
                "key": c.LABEL_COMPONENT,
                "operator": "In",
                "values": [c.COMPONENT_SERVER, c.COMPONENT_WORKER, c.COMPONENT_VERIFY],
            }
        ],
    }


def network_policy(
    dep: TritonLLMDeployment, opts: RenderOptions | None = None, *, openai: bool = False
) -> dict[str, Any] | None:
    """Ingress to every serving pod (leaders and workers alike): the serving ports from the
    namespace and the configured sources; multi-node, every port between the deployment's own
    serving pods (sshd, and the ports MPI and NCCL pick at run time, in both directions: the
    workers' orted and NCCL connect back to the leader), which share one SSH key pair. Nothing
    else reaches them, so a worker's sshd is closed to every other pod. With a verified
    rollout, the operator's pods reach the HTTP port (its smoke requests), and the OpenAI
    port when the pods serve it (`openai`)."""
    opts = opts or RenderOptions()
    np = dep.spec.networkPolicy
    if not np.enabled:
        return None
    sources = network.sources(dep)  # the activator's pods admit the same (scale to zero)
    ports = [{"protocol": "TCP", "port": port} for port in serving_ports(openai)]
    ingress: list[dict[str, Any]] = [
        {"from": sources, "ports": ports}, *_smoke_ingress(dep, opts, openai)
    ]
    if dep.spec.topology.multi_node:
        ingress.append({"from": [{"podSelector": group_selector(dep)}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _serving_metadata(dep),
        "spec": {
            "podSelector": group_selector(dep),
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def serving_ports(openai: bool) -> tuple[int, ...]:
    """The ports clients (and Prometheus) reach on a serving pod."""
    ports = (c.HTTP_PORT, c.GRPC_PORT, c.METRICS_PORT)
    return (*ports, c.OPENAI_PORT) if openai else ports


def _smoke_ingress(
    dep: TritonLLMDeployment, opts: RenderOptions, openai: bool
) -> list[dict[str, Any]]:
    """The operator's smoke requests of a verified rollout: from the operator's own pods (the
    chart's labels) in its namespace, to the HTTP port (and the OpenAI port). None when the
    operator runs outside the cluster (no namespace; it calls from a node) or in the
    deployment's namespace, whose pods the first rule admits already."""
    home = opts.settings.operator_namespace
    if dep.spec.rollout.strategy != "Verified" or not home or home == dep.namespace:
        return []
    operator_pods = {c.LABEL_NAME: c.APP_NAME, c.LABEL_COMPONENT: c.COMPONENT_OPERATOR}
    return [{
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": home}},
                  "podSelector": {"matchLabels": operator_pods}}],
        "ports": [{"protocol": "TCP", "port": port}
                  for port in ((c.HTTP_PORT, c.OPENAI_PORT) if openai else (c.HTTP_PORT,))],
    }]


def pod_disruption_budget(dep: TritonLLMDeployment) -> dict[str, Any] | None:
    """At most one serving pod voluntarily evicted at a time (only meaningful with > 1)."""
    many = dep.spec.autoscaling is not None or dep.spec.serving.replicas > 1
    if not many or dep.spec.topology.multi_node:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _serving_metadata(dep),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": naming.selector_labels(dep)}},
    }
