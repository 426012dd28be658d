"""`tritonllm demo`: the main job, end to end on a local cluster with simulated GPU nodes.

Starts (building on first use) the local control plane, runs the operator against it, applies
every example in examples/ and shows them converging in a `kubectl get tllm` table until all are
Ready, then prints apply-to-Ready times. Engine builds and pods are simulated by kwok (no GPU
here); everything else, from admission to garbage collection, is the real Kubernetes machinery.

Then two deployments for real, one per runtime: examples/cpu-standin.yaml (engine) and
examples/cpu-standin-llmapi.yaml (TensorRT-LLM's LLM API) on the cluster's real node (real
containers, the CPU stand-in image from the local registry, only the GPUs and TensorRT-LLM
simulated) in a namespace that enforces Pod Security `restricted`, each answering a generate
request; the demo prints the prompt, the answer and the time from `kubectl apply` to that first
answer (`--no-real-node` leaves this part out, e.g. without root).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tritonllm_dev import preflight

NAMESPACE = "tritonllm-demo"
REAL_NAMESPACE = "tritonllm-demo-real"
PROMPT = "hello world"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="local cluster + operator + every example, to Ready")
    p.add_argument("--examples", default="examples", help="directory of CRs (default: examples)")
    p.add_argument("--cluster", default="demo", help="local cluster name (default: demo)")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for Ready")
    p.add_argument(
        "--keep", action="store_true", help="leave the cluster and operator running afterwards"
    )
    p.add_argument(
        "--no-real-node",
        dest="real_node",
        action="store_false",
        help="leave out the real deployments (examples/cpu-standin.yaml and "
        "cpu-standin-llmapi.yaml on real containers)",
    )
    p.set_defaults(func=run)


def _ready(item: dict[str, Any]) -> bool:
    for cond in (item.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Progressing":
            return bool(cond["status"] == "False" and cond["reason"] == "Deployed")
    return False


def _multi_node(obj: dict[str, Any]) -> bool:
    from tritonllm.api.deployment import parse_deployment

    return parse_deployment(obj).spec.topology.multi_node


def needs_real_node(obj: dict[str, Any]) -> bool:
    """An example made for the local cluster's real node (examples/cpu-standin.yaml): it
    tolerates the real node's taint and runs real containers, so the simulated demo leaves it
    out (docs/examples.md walks through it)."""
    from tritonllm_dev.node import TAINT_KEY

    tolerations = ((obj.get("spec") or {}).get("podTemplate") or {}).get("tolerations") or []
    return any(t.get("key") == TAINT_KEY for t in tolerations)


def _wait_scheduled(cluster: Any, names: list[str], timeout: float = 120) -> None:
    """Until every serving pod of these deployments is bound to a node."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = cluster.kubectl_json(
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/instance in (" + ",".join(names) + ")",
        )
        serving = [
            p
            for p in pods["items"]
            if p["metadata"]["labels"].get("app.kubernetes.io/component") in ("server", "worker")
        ]
        if serving and all(p["spec"].get("nodeName") for p in serving):
            return
        time.sleep(1)


def run(args: argparse.Namespace) -> int:
    import yaml

    from tritonllm_dev.local import LocalCluster
    from tritonllm_dev.manifests import DEFAULT_NODES, H100, NodeSpec

    DEMO_NODES = (
        *DEFAULT_NODES,
        NodeSpec("gpu-h100-2", gpus=8, product=H100),
        NodeSpec("gpu-h100-3", gpus=8, product=H100),
    )

    examples = sorted(Path(args.examples).glob("*.yaml"))
    if not examples:
        print(f"error: no examples in {args.examples}", file=sys.stderr)
        return 2
    # Room for every example at once (the 70B one alone takes two 8-GPU nodes).
    real_example = Path(args.examples) / "cpu-standin.yaml"
    real_node = args.real_node and real_example.is_file()
    # Before any build: what this machine lacks, named with its fix (scripts/demo has already
    # installed what Debian ships; a direct `tritonllm demo` is only checked).
    tiers = preflight.DEMO_TIERS if real_node else ("base",)
    try:
        preflight.ensure(tiers, install=False)
    except preflight.SetupError as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    cluster = LocalCluster(name=args.cluster, nodes=DEMO_NODES, real_node=real_node)
    print(f"== local cluster '{args.cluster}' (binaries are built and cached on first use)")
    kubeconfig = cluster.up()
    print(f"   kubeconfig: {kubeconfig}")
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "hf-token", "namespace": NAMESPACE},
                "stringData": {"HF_TOKEN": "hf_demo_placeholder"},
            },
            # The local cluster has no storage provisioner: a volume pre-bound to the claim.
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{NAMESPACE}-model-store"},
                "spec": {
                    "capacity": {"storage": "2Ti"},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "hostPath": {"path": "/tmp/tritonllm-demo-store"},
                    "claimRef": {"namespace": NAMESPACE, "name": "tritonllm-model-store"},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "tritonllm-model-store", "namespace": NAMESPACE},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "resources": {"requests": {"storage": "2Ti"}},
                },
            },
        ]
    )
    log_path = cluster.state_dir / "operator.log"
    print(f"== operator (logs: {log_path})")
    with log_path.open("ab") as log:
        operator = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("tritonllm")),
                "run",
                "--standalone",
                "--kubeconfig",
                str(kubeconfig),
                "-n",
                NAMESPACE,
                "--bind-address",
                "127.0.0.1",
                "--metrics-port",
                "0",
                "--health-port",
                "0",
                "--resync-seconds",
                "5",
                "--tools-image",
                "ghcr.io/tritonllm/tritonllm:0.1.0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # Multi-node examples first: they need whole free nodes, and the scheduler's default
        # spreading would otherwise scatter the small deployments over every GPU node.
        objs = [yaml.safe_load(path.read_text()) for path in examples]
        real = [o["metadata"]["name"] for o in objs if needs_real_node(o)]
        if real:
            print(f"   skipped (real containers, see docs/examples.md): {', '.join(real)}")
        objs = [o for o in objs if not needs_real_node(o)]
        waves = [[o for o in objs if _multi_node(o)], [o for o in objs if not _multi_node(o)]]
        print(f"== applying {len(objs)} examples to namespace {NAMESPACE}")
        applied: dict[str, float] = {}
        for wave in waves:
            for obj in wave:
                obj["metadata"]["namespace"] = NAMESPACE
                cluster.apply([obj])
                applied[obj["metadata"]["name"]] = time.monotonic()
            if wave is waves[0] and wave:
                _wait_scheduled(cluster, [o["metadata"]["name"] for o in wave])
        ready_at: dict[str, float] = {}
        deadline = time.monotonic() + args.timeout
        tty = sys.stdout.isatty()
        while time.monotonic() < deadline:
            items = cluster.kubectl_json("get", "tllm", "-n", NAMESPACE)["items"]
            for item in items:
                name = item["metadata"]["name"]
                if _ready(item) and name not in ready_at:
                    ready_at[name] = time.monotonic() - applied[name]
            table = cluster.kubectl("get", "tllm", "-n", NAMESPACE).stdout
            elapsed = int(time.monotonic() - min(applied.values()))
            if tty:
                sys.stdout.write("\033[2J\033[H")
            print(f"[{elapsed:4d}s] {len(ready_at)}/{len(applied)} Ready\n{table}", flush=True)
            if len(ready_at) == len(applied):
                break
            if operator.poll() is not None:
                print(
                    f"error: the operator exited ({operator.returncode}); see {log_path}",
                    file=sys.stderr,
                )
                return 1
            time.sleep(2)
        print("== apply-to-Ready")
        for name in applied:
            took = ready_at.get(name)
            print(f"   {name:28s} {f'{took:.1f} s' if took is not None else 'NOT READY'}")
        print("== engine cache\n" + cluster.kubectl("get", "tllme", "-n", NAMESPACE).stdout)
        print(
            f"Explore: KUBECONFIG={kubeconfig} kubectl get tllm,deploy,lws,jobs,svc -n {NAMESPACE}"
        )
        if len(ready_at) != len(applied):
            return 1
        if real_node:
            # Both runtimes for real: the engine path, then the LLM API path (the same
            # checkpoint, one tritonserver whose LLM spawns its two ranks).
            for example in (real_example, real_example.with_name("cpu-standin-llmapi.yaml")):
                if not example.is_file():
                    continue
                print(f"== for real: {example} on the real node (namespace {REAL_NAMESPACE})")
                prompt, answer, took = serve_for_real(
                    cluster, REAL_NAMESPACE, example, cluster.state_dir / "operator-real.log"
                )
                print(f"   prompt: {prompt!r}\n   answer: {answer!r}")
                print(f"   kubectl apply -> first answer: {took:.1f} s")
                chat = openai_chat(cluster, REAL_NAMESPACE, example, prompt)
                print(f"   OpenAI API (/v1/chat/completions through the Service): {chat}")
            print(
                f"Explore: KUBECONFIG={kubeconfig} kubectl get tllm,pods,svc -n {REAL_NAMESPACE}"
            )
        return 0
    finally:
        if args.keep:
            print(
                f"Left running (--keep). Stop with: tritonllm cluster down --name {args.cluster}"
                f"; kill {operator.pid}"
            )
        else:
            os.killpg(operator.pid, signal.SIGTERM)
            operator.wait(timeout=30)
            cluster.down()
            print("== stopped the operator and the cluster")


def _generate(url: str, prompt: str, length_input: str = "max_tokens") -> str | None:
    """The model's answer (the ensemble's, or llmapi's tensorrt_llm with its own length
    input), or None while nothing answers."""
    import json
    import urllib.request

    body = json.dumps({"text_input": prompt, length_input: 4}).encode()
    req = urllib.request.Request(url, body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return str(json.loads(resp.read())["text_output"])
    except OSError:
        return None


def openai_chat(cluster: Any, namespace: str, example: Path, prompt: str) -> str:
    """One chat request to the deployment's OpenAI API through its Service, as an application
    sends it (the body the `openai` SDK posts); the answer and its token usage, in one line."""
    import json
    import urllib.request

    import yaml

    from tritonllm.api import constants as c

    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    ip = cluster.kubectl_json("get", "svc", name, "-n", namespace)["spec"]["clusterIP"]
    body = {"model": name, "max_tokens": 4,
            "messages": [{"role": "user", "content": prompt}]}
    req = urllib.request.Request(f"http://{ip}:{c.OPENAI_PORT}/v1/chat/completions",
                                 json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})

    def ask() -> str | None:
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer = json.loads(resp.read(1 << 20))
        except OSError:
            return None
        choice, usage = answer["choices"][0], answer["usage"]
        return (f"{choice['message']['content']!r} (finish_reason {choice['finish_reason']}, "
                f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion "
                "tokens)")

    return str(_wait(ask, 60, f"{name}'s OpenAI API answers"))


def serve_for_real(
    cluster: Any, namespace: str, example: Path, log_path: Path, *, timeout: float = 600
) -> tuple[str, str, float]:
    """examples/cpu-standin.yaml on the real node, as docs/examples.md does it by hand: a
    `restricted` namespace, the seed Job, an operator (host process, tools image from the local
    registry), `kubectl apply`, then generate through the Service until it answers. Returns
    (prompt, answer, seconds from apply to the answer). The namespace is left as it is."""
    import yaml

    from tritonllm.api.deployment import parse_deployment
    from tritonllm.render.serving import max_tokens_input, model_name
    from tritonllm_dev import images
    from tritonllm_dev.node import REGISTRY_ADDR

    refs = images.ensure_images(REGISTRY_ADDR)
    cluster.kubectl("create", "namespace", namespace, check=False)
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
        "--overwrite",
    )
    _wait(lambda: cluster.kubectl("get", "sa", "default", "-n", namespace,
                                  check=False).returncode == 0, 60, "default ServiceAccount")
    seed = example.parent / "cpu-standin" / "seed.yaml"
    cluster.kubectl("apply", "-n", namespace, "-f", str(seed))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=complete", "job/cpu-standin-seed",
                    "--timeout=300s", timeout=330)
    with log_path.open("ab") as log:
        operator = subprocess.Popen(
            [str(Path(sys.executable).with_name("tritonllm")), "run", "--standalone",
             "--kubeconfig", str(cluster.kubeconfig), "-n", namespace,
             "--bind-address", "127.0.0.1", "--metrics-port", "0", "--health-port", "0",
             "--resync-seconds", "5", "--tools-image", refs["operator"]],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    dep = parse_deployment(yaml.safe_load(example.read_text()))
    model, length_input = model_name(dep), max_tokens_input(dep)
    try:
        start = time.monotonic()
        cluster.kubectl("apply", "-n", namespace, "-f", str(example))
        name = str(cluster.kubectl_json("get", "-f", str(example), "-n", namespace)
                   ["metadata"]["name"])

        def endpoint() -> str | None:
            item = cluster.kubectl_json("get", "tllm", name, "-n", namespace)
            if not _ready(item):
                return None
            ip = cluster.kubectl_json("get", "svc", name, "-n", namespace)["spec"]["clusterIP"]
            return f"http://{ip}:8000/v2/models/{model}/generate"

        url = _wait(endpoint, timeout, f"{name} Ready (operator log: {log_path})")
        answer = _wait(lambda: _generate(url, PROMPT, length_input), 120, f"{url} answers")
        return PROMPT, answer, time.monotonic() - start
    finally:
        os.killpg(operator.pid, signal.SIGTERM)
        operator.wait(timeout=30)


def _wait(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = probe()
        if out:
            return out
        time.sleep(1)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
