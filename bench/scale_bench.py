"""Scale benchmark: N small deployments through the operator, against the API server's own limit.

    .venv/bin/python -m bench.scale_bench --n 100 [--n 1000] [--cluster NAME] [--json FILE]
        [--peer nim [--nim-binary PATH]] [--load K]

Figures, not pass/fail (docs/performance.md has the results and how to read them). For each N, on
one local cluster with kwok GPU nodes, in the same run:

1. **Raw limit.** The children the operator would create for N cache-hit deployments (repository
   ConfigMap and Job, Service, NetworkPolicy, Deployment: rendered by tritonllm.render, spec hash
   included; the four but the NetworkPolicy are timed) are
   server-side applied directly, through the operator's own client with the same concurrency
   (`api_concurrency` requests in flight), one deployment's objects in order, all deployments at
   once, with no controller logic.
2. **Operator.** `tritonllm run` on a fresh namespace whose engine is already in the cache
   (a Ready TritonLLMEngine); N TritonLLMDeployments are applied the same way.

3. **Peer** (`--peer nim`): NVIDIA's NIM operator, built by bench/build_nim_operator.sh and run
   on the host, reconciling N equivalent NIMServices in a third namespace (bench/nim_peer.py).

For each: per deployment, apply -> all children created and -> Ready (p50/p95/max, from watch
events), and the ratio to the raw limit. For the operator also: reconcile latency p50/p95 (its own
histogram), API requests per reconcile by verb while converging and in the steady state (its own
counters), writes per steady-state reconcile, and its resident memory idle, at its peak, and with
N deployments; for the peer, the same from controller-runtime's metrics (API requests by HTTP
method, reconciles of its NIMService controller).

`--load K` keeps K processes spinning on the CPU for the whole run, every side alike: the
"loaded machine" figures. The first line printed names the commit, the cores and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch
from tests.cluster.operator_harness import prepare_namespace, run_operator
from tests.helpers import rss_mib

from bench import nim_peer
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.k8s.client import Kube
from tritonllm.render import Manifest, RenderOptions, naming, render_all
from tritonllm.render.engine import engine_record
from tritonllm.render.events import event
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.manifests import DEFAULT_NODES, H100, NodeSpec, node_manifest

TOOLS_IMAGE = "registry.invalid/tritonllm:test"  # as the operator harness runs it
SPEC = {
    "image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
    "model": {"source": "hf://openai-community/gpt2"},
    "gpu": {"product": H100},
}
WATCHED = ("ConfigMap", "Job", "Service", "Deployment")
CONCURRENCY = OperatorSettings().api_concurrency  # the operator's client concurrency


def small(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": c.API_VERSION, "kind": c.KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": SPEC}


def bench_nodes(n: int, sides: int = 2) -> list[NodeSpec]:
    """GPU nodes for `sides` x n single-GPU serving pods (raw, operator and peer side by side),
    CPU nodes for the repository Job pods."""
    gpu_nodes = max(1, -(-sides * n // 64))
    big = {"cpu": "1024", "memory": "64Ti", "pods": "250"}  # room for 64 pods of 8 CPUs
    return [
        *(NodeSpec(f"bench-gpu-{i}", gpus=64, product=H100, **big) for i in range(gpu_nodes)),
        *(NodeSpec(f"bench-cpu-{i}", **big) for i in range(4)),
    ]


# --- watching: when each object appeared, when each deployment became Ready -------------------


@dataclass
class Timeline:
    created: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, name) -> t
    ready: dict[str, float] = field(default_factory=dict)  # deployment name -> t
    workload_ready: dict[str, float] = field(default_factory=dict)  # its Deployment ready
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, kind: str, name: str) -> None:
        with self.lock:
            self.created.setdefault((kind, name), time.monotonic())

    def became_ready(self, name: str) -> None:
        with self.lock:
            self.ready.setdefault(name, time.monotonic())

    def workload_became_ready(self, name: str) -> None:
        with self.lock:
            self.workload_ready.setdefault(name, time.monotonic())


def _stream(api: Any, fn: str, namespace: str, stop: threading.Event, on: Any,
            **kwargs: Any) -> None:
    """Events as plain dicts (the client's model classes cost milliseconds an object: at N = 1000
    the watches fell minutes behind what they measured), resumed from the last resourceVersion
    seen (a restart without one would list every object again)."""
    version: str | None = None
    while not stop.is_set():
        w = watch.Watch()
        try:
            since = {"resource_version": version} if version else {}
            for ev in w.stream(getattr(api, fn), namespace=namespace, timeout_seconds=300,
                               deserialize=False, **since, **kwargs):
                if stop.is_set():
                    break
                obj = ev["object"]
                version = obj["metadata"].get("resourceVersion", version)
                if ev["type"] in ("ADDED", "MODIFIED"):
                    on(obj)
        except Exception as exc:  # a broken watch is restarted; an expired version relists
            # (without deserializing, the client meets an ERROR event with a KeyError)
            if isinstance(exc, KeyError) or getattr(exc, "status", None) == 410:
                version = None
            time.sleep(0.2)
        finally:
            w.stop()


def start_watches(api_client: Any, namespace: str, timeline: Timeline, *, side: str,
                  stop: threading.Event) -> list[threading.Thread]:
    """Watch what `side` ("raw", "operator" or "nim") creates; Ready is the Deployment's ready
    replica for the raw side, the custom resource's condition for the operator and the peer."""
    core, batch, apps = k8s.CoreV1Api(api_client), k8s.BatchV1Api(api_client), k8s.AppsV1Api(
        api_client)
    custom, rbac = k8s.CustomObjectsApi(api_client), k8s.RbacAuthorizationV1Api(api_client)

    def named(kind: str) -> Any:
        return lambda o: timeline.seen(kind, o["metadata"]["name"])

    def workload(o: dict[str, Any]) -> None:
        timeline.seen("Deployment", o["metadata"]["name"])
        if ((o.get("status") or {}).get("readyReplicas") or 0) >= 1:
            timeline.workload_became_ready(o["metadata"]["name"])
            if side == "raw":
                timeline.became_ready(o["metadata"]["name"])

    def cr(o: dict[str, Any]) -> None:
        for cond in (o.get("status") or {}).get("conditions") or []:
            if (cond["type"], cond["status"], cond["reason"]) == (
                    c.COND_PROGRESSING, "False", "Deployed"):
                timeline.became_ready(o["metadata"]["name"])

    def nim(o: dict[str, Any]) -> None:
        if nim_peer.is_ready(o):
            timeline.became_ready(o["metadata"]["name"])

    streams = [
        (core, "list_namespaced_service", named("Service"), {}),
        (apps, "list_namespaced_deployment", workload, {}),
    ]
    if side == "nim":
        streams += [
            (core, "list_namespaced_service_account", named("ServiceAccount"), {}),
            (rbac, "list_namespaced_role", named("Role"), {}),
            (rbac, "list_namespaced_role_binding", named("RoleBinding"), {}),
            (custom, "list_namespaced_custom_object", nim,
             {"group": nim_peer.GROUP, "version": nim_peer.VERSION, "plural": nim_peer.PLURAL}),
        ]
    else:
        streams += [(core, "list_namespaced_config_map", named("ConfigMap"), {}),
                    (batch, "list_namespaced_job", named("Job"), {})]
    if side == "operator":
        streams.append((custom, "list_namespaced_custom_object", cr,
                        {"group": c.GROUP, "version": c.VERSION, "plural": c.PLURAL}))
    threads = []
    for api, fn, on, kwargs in streams:
        t = threading.Thread(target=_stream, args=(api, fn, namespace, stop, on), kwargs=kwargs,
                             daemon=True)
        t.start()
        threads.append(t)
    return threads


# --- figures ------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": pct(values, 0.5), "p95": pct(values, 0.95), "max": max(values or [0.0])}


def children_of(name: str, repo_key: str) -> list[tuple[str, str]]:
    """(kind, name) of the children a cache-hit small deployment needs: its plan ConfigMap,
    the repository Job of its content key (one per namespace, shared by the bench's identical
    deployments: it counts as each one's child from its creation on), its Service and its
    Deployment."""
    return [("ConfigMap", f"{name}-{repo_key}"), ("Job", f"tritonllm-repo-{repo_key}"),
            ("Service", name), ("Deployment", name)]


def latencies(timeline: Timeline, started: dict[str, float],
              children: dict[str, list[tuple[str, str]]]
              ) -> tuple[list[float], list[float], list[float]]:
    """Per deployment: -> all children, -> the children that wait for nothing (all but the
    Deployment, which the operator creates once the repository Job has finished), -> Ready."""
    created, first, ready = [], [], []
    for name, t0 in started.items():
        times = [timeline.created.get(ref) for ref in children[name]]
        if all(t is not None for t in times):
            created.append(max(times) - t0)  # type: ignore[type-var]
            first.append(max(times[:-1]) - t0)  # type: ignore[type-var]
        if name in timeline.ready:
            ready.append(timeline.ready[name] - t0)
    return created, first, ready


def wait_until(what: str, done: Any, timeout: float, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    last = 0.0
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout:.0f} s")
        if time.monotonic() - last > 30:
            print(f"  ... waiting for {what}", flush=True)
            last = time.monotonic()
        time.sleep(every)


async def apply_all(kubeconfig: Path, batches: dict[str, list[Manifest]]) -> dict[str, float]:
    """Apply each deployment's objects in order, every deployment at once, through the operator's
    client with the operator's concurrency. Returns when each deployment started."""
    started: dict[str, float] = {}
    kube = Kube.from_kubeconfig(str(kubeconfig), concurrency=CONCURRENCY)

    async def one(name: str, objs: list[Manifest]) -> None:
        started[name] = time.monotonic()
        for obj in objs:
            await kube.apply(obj)

    try:
        await asyncio.gather(*(one(n, objs) for n, objs in batches.items()))
    finally:
        await kube.close()
    return started


# --- the operator's own metrics -----------------------------------------------------------------


def metric_samples(text: str, name: str, **only: str
                   ) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of metric `name` in a Prometheus text exposition, by their labels; only those
    whose labels include `only`."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0])))
            if all(dict(labels).get(k) == v for k, v in only.items()):
                out[labels] = float(line.rsplit(" ", 1)[1])
    return out


@dataclass(frozen=True)
class Metrics:
    """Where an operator counts its API requests and reconciles."""

    calls: str  # counter of API requests
    call_labels: tuple[str, str]  # its two labels the figures are keyed by
    reconciles: str  # counter of reconciles
    buckets: str  # reconcile duration histogram, _bucket series
    only: dict[str, str] = field(default_factory=dict)  # label filter for the two above
    writes: tuple[str, ...] = ("apply", "patch", "create", "delete", "event")
    reads: tuple[str, ...] = ("get", "list")


TRITONLLM_METRICS = Metrics("tritonllm_api_calls_total", ("verb", "kind"),
                            "tritonllm_reconciles_total",
                            "tritonllm_reconcile_duration_seconds_bucket")
# controller-runtime's: client-go's request counter (by HTTP method and status code: GET is
# also every list and watch) and the NIMService controller's reconciles
NIM_METRICS = Metrics("rest_client_requests_total", ("method", "code"),
                      "controller_runtime_reconcile_total",
                      "controller_runtime_reconcile_time_seconds_bucket",
                      {"controller": nim_peer.CONTROLLER},
                      writes=("POST", "PUT", "PATCH", "DELETE"), reads=("GET",))


@dataclass
class Snapshot:
    calls: dict[tuple[str, str], float]  # (verb, kind) or (method, code) -> count
    reconciles: float
    buckets: dict[float, float]  # le -> cumulative count

    @staticmethod
    def of(text: str, m: Metrics = TRITONLLM_METRICS) -> Snapshot:
        first, second = m.call_labels
        calls = {(dict(k)[first], dict(k)[second]): v
                 for k, v in metric_samples(text, m.calls).items()}
        reconciles = sum(metric_samples(text, m.reconciles, **m.only).values())
        buckets = {float(dict(k)["le"]): v for k, v in
                   metric_samples(text, m.buckets, **m.only).items()}
        return Snapshot(calls, reconciles, buckets)

    def minus(self, before: Snapshot) -> Snapshot:
        keys = set(self.calls) | set(before.calls)
        return Snapshot({k: self.calls.get(k, 0) - before.calls.get(k, 0) for k in keys},
                        self.reconciles - before.reconciles,
                        {le: n - before.buckets.get(le, 0) for le, n in self.buckets.items()})

    def per_reconcile(self) -> dict[str, float]:
        verbs: dict[str, float] = {}
        for (verb, _), n in self.calls.items():
            verbs[verb] = verbs.get(verb, 0) + n
        return {v: n / max(self.reconciles, 1) for v, n in sorted(verbs.items()) if n}

    def quantile(self, q: float) -> float:
        """From the histogram's buckets, interpolated linearly within a bucket; infinity when it
        lies beyond the last finite bucket (see `top_bucket`)."""
        total = self.buckets.get(float("inf"), 0)
        if not total:
            return float("nan")
        target, prev_le, prev_n = q * total, 0.0, 0.0
        for le in sorted(self.buckets):
            n = self.buckets[le]
            if n >= target:
                if le == float("inf"):
                    return le
                return prev_le + (le - prev_le) * (target - prev_n) / max(n - prev_n, 1e-9)
            prev_le, prev_n = le, n
        return prev_le

    def top_bucket(self) -> float:
        return max((le for le in self.buckets if le != float("inf")), default=float("nan"))


def apiserver_requests(cluster: LocalCluster) -> dict[str, float]:
    """The API server's own request counter, by "VERB resource[/subresource] code"."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    out: dict[str, float] = {}
    for labels, v in metric_samples(text, "apiserver_request_total").items():
        d = dict(labels)
        sub = f"/{d['subresource']}" if d.get("subresource") else ""
        key = f"{d.get('verb')} {d.get('resource')}{sub} {d.get('code')}"
        out[key] = out.get(key, 0) + v
    return out


# --- one N --------------------------------------------------------------------------------------




@dataclass
class Side:
    created: list[float]
    first: list[float]  # the children that wait for nothing
    ready: list[float]
    total_created: float
    total_ready: float
    workload_ready: list[float] = field(default_factory=list)  # the peer: its Deployment ready
    # the peer: the API server's requests per deployment while it converged, from every client
    apiserver: dict[str, float] = field(default_factory=dict)
    requests_per_deployment: float = 0.0  # the raw side: its applies
    # CPU seconds each process spent from the apply to all Ready (the cluster's and the side's
    # operator): where the 2 cores went
    cpu: dict[str, float] = field(default_factory=dict)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cluster_processes(cluster: LocalCluster) -> dict[int, str]:
    """pid -> name of the local cluster's processes (their command lines name its directory)."""
    mark = str(cluster.kubeconfig.parent) + "/"
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            if mark in cmdline:
                found[int(entry.name)] = (entry / "comm").read_text().strip()
        except OSError:
            continue
    return found


def cpu_seconds(pids: dict[int, str]) -> dict[str, float]:
    """user + system CPU seconds so far of each named process (summed by name)."""
    out: dict[str, float] = {}
    for pid, name in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return out


@contextlib.contextmanager
def cpu_spent(cluster: LocalCluster, side: dict[str, float], **own: int) -> Iterator[None]:
    """Fill `side` with the CPU seconds the cluster's processes (and `own`: name=pid) spend
    while the block runs."""
    pids = {**cluster_processes(cluster), os.getpid(): "bench (applies, watches)",
            **{pid: name for name, pid in own.items()}}
    before = cpu_seconds(pids)
    try:
        yield
    finally:
        after = cpu_seconds(pids)
        side.update({k: round(v - before.get(k, 0.0), 1) for k, v in after.items()})


@contextlib.contextmanager
def watched(cluster: LocalCluster, namespace: str, *, side: str) -> Iterator[Timeline]:
    timeline, stop = Timeline(), threading.Event()
    threads = start_watches(cluster.api_client(), namespace, timeline, side=side, stop=stop)
    time.sleep(2)  # the watches are established
    try:
        yield timeline
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=1)  # daemons: a watch ends at its next event


def measure(timeline: Timeline, started: dict[str, float],
            children: dict[str, list[tuple[str, str]]], t0: float, timeout: float) -> Side:
    names = list(children)
    wait_until("all children", lambda: all(
        ref in timeline.created for n in names for ref in children[n]), timeout)
    t_created = max(timeline.created[ref] for n in names for ref in children[n])
    wait_until("all Ready", lambda: all(n in timeline.ready for n in names), timeout)
    t_ready = max(timeline.ready[n] for n in names)
    created, first, ready = latencies(timeline, started, children)
    return Side(created, first, ready, t_created - t0, t_ready - t0)


def run_raw(cluster: LocalCluster, n: int, namespace: str, timeout: float) -> Side:
    batches: dict[str, list[Manifest]] = {}
    children: dict[str, list[tuple[str, str]]] = {}
    applied: set[tuple[str, str]] = set()
    for i in range(n):
        name = f"s{i:04d}"
        dep = parse_deployment(small(name, namespace))
        r = render_all(dep, RenderOptions(tools_image=TOOLS_IMAGE, engine_cached=True))
        objs = [r.repository_configmap, r.repository_job, r.service, r.network_policy,
                r.workload]
        # Each object once: the repository Job of the content key is the first deployment's
        # (as the operator creates it once for all of them).
        batches[name] = [o.stamped() for o in objs
                         if o is not None and (o.kind, o.name) not in applied]
        applied.update((o.kind, o.name) for o in objs if o is not None)
        children[name] = children_of(name, r.repository_key)
    cpu: dict[str, float] = {}
    with watched(cluster, namespace, side="raw") as timeline, cpu_spent(cluster, cpu):
        t0 = time.monotonic()
        started = asyncio.run(apply_all(cluster.kubeconfig, batches))
        side = measure(timeline, started, children, t0, timeout)
    side.cpu = cpu
    side.requests_per_deployment = sum(len(b) for b in batches.values()) / n
    return side


def reported_status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    """The status the operator wrote for one of its bench deployments, once Ready."""
    custom = k8s.CustomObjectsApi(cluster.api_client())
    obj = custom.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    return dict(obj["status"])


def as_progressing(status: dict[str, Any]) -> dict[str, Any]:
    """A Ready status as it read while the deployment was still rolling out (same size)."""
    flipped = {c.COND_PROGRESSING: ("True", "RollingOut"), c.COND_READY: ("False", "RollingOut")}
    conditions = [
        {**cond, "status": flipped[cond["type"]][0], "reason": flipped[cond["type"]][1]}
        if cond.get("type") in flipped else cond
        for cond in status.get("conditions") or []
    ]
    return {**status, "conditions": conditions}


def run_floor(cluster: LocalCluster, n: int, namespace: str, ready_status: dict[str, Any],
              template_name: str, timeout: float) -> Side:
    """The raw limit plus what any operator's reporting costs the cluster, with no operator:
    each custom resource applied (as the user does), its children applied as the operator
    creates them (owned by it, so the garbage collector tracks them), a status write and an
    Event (the first report), and once its Deployment is ready a second status write and Event
    (Ready: the status the operator wrote, taken from its side). Ready is read from the custom
    resource, as for the operator."""
    children: dict[str, list[tuple[str, str]]] = {}
    for i in range(n):
        name = f"s{i:04d}"
        children[name] = children_of(name, render_all(parse_deployment(
            small(name, namespace))).repository_key)

    def status_of(name: str, ready: bool) -> dict[str, Any]:
        text = json.dumps(ready_status if ready else as_progressing(ready_status))
        return dict(json.loads(text.replace(template_name, name)))

    async def report(kube: Kube, live: dict[str, Any], ready: bool) -> None:
        name = live["metadata"]["name"]
        written = await kube.apply_status(Manifest.of({
            "apiVersion": c.API_VERSION, "kind": c.KIND,
            "metadata": {"name": name, "namespace": namespace},
            "status": status_of(name, ready)}))
        await kube.post_event(event(written, type_="Normal",
                                    reason="Deployed" if ready else "RollingOut",
                                    message=f"{name}: bench floor report",
                                    now=dt.datetime.now(dt.UTC)))

    async def converge(timeline: Timeline) -> dict[str, float]:
        started: dict[str, float] = {}
        first_reported: dict[str, dict[str, Any]] = {}
        applied: set[tuple[str, str]] = set()
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig), concurrency=CONCURRENCY)

        async def one(name: str) -> None:
            started[name] = time.monotonic()
            live = await kube.apply(Manifest.of(small(name, namespace)))
            r = render_all(parse_deployment(live),
                           RenderOptions(tools_image=TOOLS_IMAGE, engine_cached=True))
            for o in (r.repository_configmap, r.repository_job, r.service, r.network_policy,
                      r.workload):
                if o is not None and (o.kind, o.name) not in applied:
                    applied.add((o.kind, o.name))
                    await kube.apply(o.stamped())
            await report(kube, live, ready=False)
            first_reported[name] = live

        async def second_reports() -> None:
            done: set[str] = set()
            pending: set[asyncio.Task[None]] = set()
            while len(done) < n:
                with timeline.lock:
                    ready = [k for k in timeline.workload_ready if k not in done]
                for name in ready:
                    if name in first_reported:
                        done.add(name)
                        pending.add(asyncio.create_task(
                            report(kube, first_reported[name], ready=True)))
                await asyncio.sleep(0.05)
            await asyncio.gather(*pending)

        try:
            waiting = asyncio.create_task(second_reports())
            await asyncio.gather(*(one(name) for name in children))
            await asyncio.wait_for(waiting, timeout)
        finally:
            await kube.close()
        return started

    cpu: dict[str, float] = {}
    with watched(cluster, namespace, side="operator") as timeline, cpu_spent(cluster, cpu):
        t0 = time.monotonic()
        started = asyncio.run(converge(timeline))
        side = measure(timeline, started, children, t0, timeout)
    side.cpu = cpu
    side.requests_per_deployment = 9.0 + 1 / n  # the CR, 4 children, 2 statuses, 2 Events
    return side


def cached_engine(namespace: str) -> dict[str, Any]:
    """The TritonLLMEngine record every benchmark deployment shares (their spec is the same)."""
    dep = parse_deployment(small("warm", namespace))
    return engine_record(dep, naming.engine_key(dep)).body


@contextlib.contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy samples the operator (collapsed stacks into `out`) while the block runs."""
    if out is None:
        yield
        return
    spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid",
                            str(pid), "--format", "raw", "--rate", "50", "--output", str(out),
                            "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
        print(profile_summary(out), flush=True)


def profile_summary(path: Path, top: int = 12) -> str:
    """Where the operator spent its samples: by leaf function and by phase of a reconcile."""
    leaves: dict[str, int] = {}
    phases: dict[str, int] = {}
    total = 0
    marks = {"render_all": "render", "plan": "plan", "observe": "observe", "execute": "execute",
             "process_resource_event": "kopf event processing", "_call": "API client",
             "index_resource": "kopf indexing"}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf = frames[-1].split(" (")[0]
        leaves[leaf] = leaves.get(leaf, 0) + n
        names = [f.split(" (")[0] for f in frames]
        phase = next((marks[f] for f in reversed(names) if f in marks), "other")
        phases[phase] = phases.get(phase, 0) + n
    lines = [f"py-spy: {total} samples"]
    lines += [f"  {100 * v / max(total, 1):5.1f}% {k}" for k, v in
              sorted(phases.items(), key=lambda kv: -kv[1])]
    lines += ["  top leaf functions:"] + [
        f"    {100 * v / max(total, 1):5.1f}% {k}"
        for k, v in sorted(leaves.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(lines)


def observe(pid: int, scrape: Callable[[], str], metrics: Metrics, steady: float,
            converge: Callable[[], Side]) -> dict[str, Any]:
    """An operator's figures around `converge` (which applies the N objects and waits for them):
    its metrics before, once converged and after `steady` seconds, and its resident memory."""
    out: dict[str, Any] = {"rss_idle_mib": rss_mib(pid), "metrics": metrics}
    before = Snapshot.of(scrape(), metrics)
    out["side"] = converge()
    converged = Snapshot.of(scrape(), metrics)
    time.sleep(steady)
    after = Snapshot.of(scrape(), metrics)
    out["rss_steady_mib"] = rss_mib(pid)
    out["rss_peak_mib"] = rss_mib(pid, "VmHWM")
    out["converging"] = converged.minus(before)
    out["steady"] = after.minus(converged)
    out["all"] = after.minus(before)
    return out


def run_with_operator(cluster: LocalCluster, n: int, namespace: str, resync: float,
                      timeout: float, steady: float, profile: Path | None,
                      logs: Path | None = None) -> dict[str, Any]:
    record = cached_engine(namespace)

    async def warm_cache() -> None:  # the engine is already in the cache (built before)
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        await kube.apply(Manifest.of(record))
        await kube.apply_status(Manifest.of({**record, "status": {
            "state": "Ready", "attempts": 0, "builtFor": "bench-warmup",
            "message": "build finished"}}))
        await kube.close()

    asyncio.run(warm_cache())
    children, batches = {}, {}
    for i in range(n):
        name = f"s{i:04d}"
        r = render_all(parse_deployment(small(name, namespace)))
        children[name] = children_of(name, r.repository_key)
        batches[name] = [Manifest.of(small(name, namespace))]
    with tempfile.TemporaryDirectory() as tmp, run_operator(
        cluster, namespace, Path(tmp), resync=resync
    ) as op:
        time.sleep(3)

        def converge() -> Side:
            cpu: dict[str, float] = {}
            with watched(cluster, namespace, side="operator") as timeline, profiled(
                op.proc.pid, profile and profile / f"operator-{n}.txt"
            ), cpu_spent(cluster, cpu, tritonllm=op.proc.pid):
                t0 = time.monotonic()
                started = asyncio.run(apply_all(cluster.kubeconfig, batches))
                side = measure(timeline, started, children, t0, timeout)
            side.cpu = cpu
            return side

        try:
            return observe(op.proc.pid, op.metrics, TRITONLLM_METRICS, steady, converge)
        finally:
            keep_log(logs, f"tritonllm-{n}.log", op.log)


def keep_log(logs: Path | None, name: str, log: Path) -> None:
    """An operator's log, kept in `logs` (--logs) under `name`."""
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / name).write_bytes(log.read_bytes())


def run_nim(cluster: LocalCluster, n: int, namespace: str, binary: Path, timeout: float,
            steady: float, logs: Path | None) -> dict[str, Any]:
    """The peer: the NIM operator's manager on the host, N equivalent NIMServices."""
    nim_peer.install_crds(cluster, binary)
    token = nim_peer.metrics_token(cluster, namespace)
    children = {f"s{i:04d}": nim_peer.children_of(f"s{i:04d}") for i in range(n)}
    batches = {name: [Manifest.of(nim_peer.nimservice(name, namespace))] for name in children}
    with tempfile.TemporaryDirectory() as tmp, nim_peer.run_manager(
        cluster, binary, token, Path(tmp)
    ) as mgr:
        time.sleep(3)
        mgr.metrics()  # the first scrape's TokenReview and SubjectAccessReview are then cached

        def converge() -> Side:
            api_before = apiserver_requests(cluster)
            cpu: dict[str, float] = {}
            with watched(cluster, namespace, side="nim") as timeline, cpu_spent(
                cluster, cpu, **{"nim-operator": mgr.proc.pid}
            ):
                t0 = time.monotonic()
                started = asyncio.run(apply_all(cluster.kubeconfig, batches))
                wait_until("its Deployments ready", lambda: all(
                    name in timeline.workload_ready for name in children), timeout)
                try:  # then its Ready condition, which needs an HTTP answer (nim_peer)
                    side = measure(timeline, started, children, t0, timeout=300)
                except TimeoutError as exc:
                    raise RuntimeError(
                        f"{exc}: the NIM operator's Deployments are ready but not its "
                        "NIMServices; their Ready condition waits for an HTTP answer from each "
                        "Service's cluster IP, which this host cannot reach (bench/nim_peer.py)"
                    ) from exc
            side.cpu = cpu
            side.workload_ready = [timeline.workload_ready[k] - t for k, t in started.items()]
            api_after = apiserver_requests(cluster)
            side.apiserver = {k: round((v - api_before.get(k, 0)) / n, 2)
                              for k, v in sorted(api_after.items())
                              if v - api_before.get(k, 0) >= n / 2}
            return side

        try:
            return observe(mgr.proc.pid, mgr.metrics, NIM_METRICS, steady, converge)
        finally:
            keep_log(logs, f"nim-operator-{n}.log", mgr.log)


def times(side: Side) -> dict[str, Any]:
    out = {"created": summary(side.created), "first": summary(side.first),
           "ready": summary(side.ready),
           "all_created_s": side.total_created, "all_ready_s": side.total_ready}
    if side.workload_ready:
        out["workload_ready"] = summary(side.workload_ready)
    if side.apiserver:
        out["apiserver_requests_per_deployment_converging"] = side.apiserver
    if side.requests_per_deployment:
        out["requests_per_deployment"] = round(side.requests_per_deployment, 2)
    out["cpu_seconds"] = side.cpu
    return out


def figures(n: int, raw: Side, op: dict[str, Any]) -> dict[str, Any]:
    """An operator's side of the report: its times, their ratio to the raw limit's, and its
    control-plane cost from its own metrics."""
    side: Side = op["side"]
    m: Metrics = op["metrics"]
    conv: Snapshot = op["converging"]
    steady: Snapshot = op["steady"]
    every: Snapshot = op["all"]
    steady_writes = sum(v for (verb, _), v in steady.calls.items() if verb in m.writes)
    steady_reads = sum(v for (verb, _), v in steady.calls.items() if verb in m.reads)
    return {
        "n": n,
        **times(side),
        "ratio_all_created": side.total_created / raw.total_created,
        "ratio_all_ready": side.total_ready / raw.total_ready,
        "ratio_created_p50": statistics.median(side.created) / statistics.median(raw.created),
        "ratio_first_wave_max": max(side.first) / max(raw.first),
        "reconcile_p50_ms": 1000 * every.quantile(0.5),
        "reconcile_p95_ms": 1000 * every.quantile(0.95),
        "reconcile_steady_p50_ms": 1000 * steady.quantile(0.5),
        "reconcile_steady_p95_ms": 1000 * steady.quantile(0.95),
        "reconcile_top_bucket_ms": 1000 * every.top_bucket(),
        "reconciles_converging": conv.reconciles,
        "requests_per_reconcile_converging": conv.per_reconcile(),
        "requests_per_deployment_converging": {
            f"{verb} {kind}": round(v / n, 2) for (verb, kind), v in sorted(conv.calls.items())
            if v},
        "requests_total_per_deployment_converging": round(sum(conv.calls.values()) / n, 2),
        "ratio_requests": (sum(conv.calls.values()) / n) / (raw.requests_per_deployment or 1),
        "reconciles_steady": steady.reconciles,
        "requests_per_reconcile_steady": steady.per_reconcile(),
        "requests_steady": {f"{verb} {kind}": v for (verb, kind), v in sorted(steady.calls.items())
                            if v},
        "writes_per_steady_reconcile": steady_writes / max(steady.reconciles, 1),
        "reads_per_steady_reconcile": steady_reads / max(steady.reconciles, 1),
        "writes_steady": steady_writes,
        "reads_steady": steady_reads,
        "rss_idle_mib": op["rss_idle_mib"],
        "rss_peak_mib": op["rss_peak_mib"],
        "rss_at_n_mib": op["rss_steady_mib"],
    }


def report(n: int, raw: Side, op: dict[str, Any], nim: dict[str, Any] | None = None,
           floor: Side | None = None) -> dict[str, Any]:
    result = {"n": n, "raw": times(raw), "operator": figures(n, raw, op)}
    if floor is not None:
        result["floor"] = {
            **times(floor),
            "ratio_all_ready": floor.total_ready / raw.total_ready,
            "ratio_first_wave_max": max(floor.first) / max(raw.first),
            "operator_to_floor_all_ready": op["side"].total_ready / floor.total_ready,
            "operator_to_floor_first_wave_max": max(op["side"].first) / max(floor.first),
        }
    if nim is not None:
        result["nim"] = figures(n, raw, nim)
    return result


SIDES = {"raw": "raw", "operator": "tritonllm", "floor": "floor", "nim": "NIM op."}


def print_report(r: dict[str, Any]) -> None:
    def fmt(s: dict[str, float]) -> str:
        return f"p50 {s['p50']:6.1f} s  p95 {s['p95']:6.1f} s  max {s['max']:6.1f} s"

    print(f"\n=== N = {r['n']} ===")
    for who in (w for w in SIDES if w in r):
        x = r[who]
        print(f"{SIDES[who]:9s} apply -> children created: {fmt(x['created'])}   "
              f"(all: {x['all_created_s']:.1f} s)")
        print(f"{'':9s} ... all but the Deployment: {fmt(x['first'])}")
        print(f"{'':9s} apply -> Ready:            {fmt(x['ready'])}   "
              f"(all: {x['all_ready_s']:.1f} s)")
        if "workload_ready" in x:
            print(f"{'':9s} apply -> Deployment ready: {fmt(x['workload_ready'])}")
        if "requests_per_deployment" in x:
            print(f"{'':9s} API requests per deployment: {x['requests_per_deployment']:.2f} "
                  f"({'its applies' if who == 'raw' else 'its writes'})")
        if x.get("cpu_seconds"):
            spent = sorted(x["cpu_seconds"].items(), key=lambda kv: -kv[1])
            print(f"{'':9s} CPU seconds, apply -> all Ready: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in spent if v >= 0.1)
                  + f" (all {sum(v for _, v in spent):.1f})")
    if "floor" in r:
        f = r["floor"]
        print("--- floor (no operator: the raw limit plus each custom resource, a status and an "
              "Event when first seen and when Ready)")
        print(f"ratio floor/raw: all Ready {f['ratio_all_ready']:.2f}, all but the Deployments "
              f"{f['ratio_first_wave_max']:.2f}; tritonllm/floor: all Ready "
              f"{f['operator_to_floor_all_ready']:.2f}, all but the Deployments "
              f"{f['operator_to_floor_first_wave_max']:.2f}")
    for who in ("operator", "nim"):
        if who in r:
            print_figures(SIDES[who], r[who])


def print_figures(who: str, x: dict[str, Any]) -> None:
    def ms(v: float) -> str:  # beyond the histogram's last finite bucket: a lower bound
        return f"> {x['reconcile_top_bucket_ms']:.0f} ms" if v == float("inf") else f"{v:.1f} ms"

    print(f"--- {who}")
    print(f"ratio {who}/raw: all children created {x['ratio_all_created']:.2f}, "
          f"all Ready {x['ratio_all_ready']:.2f}, children created p50 "
          f"{x['ratio_created_p50']:.2f}, all but the Deployments {x['ratio_first_wave_max']:.2f}")
    print(f"reconcile latency: p50 {ms(x['reconcile_p50_ms'])}, "
          f"p95 {ms(x['reconcile_p95_ms'])} (its histogram, whole run); steady state "
          f"p50 {ms(x['reconcile_steady_p50_ms'])}, p95 {ms(x['reconcile_steady_p95_ms'])}")
    print(f"API requests per reconcile while converging ({x['reconciles_converging']:.0f} "
          f"reconciles): {x['requests_per_reconcile_converging']}")
    print(f"API requests per deployment while converging "
          f"({x['requests_total_per_deployment_converging']} in all): "
          f"{x['requests_per_deployment_converging']}; "
          f"{x['ratio_requests']:.2f}x the raw side's")
    if "apiserver_requests_per_deployment_converging" in x:
        print("the API server's requests per deployment meanwhile, every client (at least 0.5): "
              f"{x['apiserver_requests_per_deployment_converging']}")
    print(f"API requests per steady-state reconcile ({x['reconciles_steady']:.0f} reconciles): "
          f"{x['requests_per_reconcile_steady'] or 'none'}; writes "
          f"{x['writes_per_steady_reconcile']:.2f}, reads {x['reads_per_steady_reconcile']:.2f} "
          f"({x['writes_steady']:.0f} writes and {x['reads_steady']:.0f} reads in all"
          + (f": {x['requests_steady']})" if x.get("requests_steady") else ")"))
    print(f"{who} RSS: idle {x['rss_idle_mib']:.0f} MiB, peak {x['rss_peak_mib']:.0f} MiB, "
          f"with {x['n']} deployments {x['rss_at_n_mib']:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append", help="deployments (repeatable)")
    ap.add_argument("--cluster", default="bench")
    ap.add_argument("--resync", type=float, default=60.0, help="operator resync seconds")
    ap.add_argument("--steady", type=float, default=150.0,
                    help="seconds of steady state measured after all are Ready")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--keep", action="store_true", help="keep each side's namespace (the next "
                    "sides are then measured with its objects on the cluster)")
    ap.add_argument("--profile", help="py-spy the operator while it converges; write here")
    ap.add_argument("--peer", choices=["nim"], help="also run a peer operator: NVIDIA's NIM "
                    "operator (bench/nim_peer.py)")
    ap.add_argument("--nim-binary", help="the NIM operator's manager (default: the newest "
                    "~/.cache/tritonllm/bin/nim-operator-*/manager)")
    ap.add_argument("--floor", action="store_true",
                    help="a fourth side after the operator's: the raw limit plus the requests "
                    "any operator's reporting sends (each custom resource, two status writes and "
                    "two Events), with no operator: what an operator costing nothing would reach")
    ap.add_argument("--logs", help="keep the operators' logs here (tritonllm-N.log, "
                    "nim-operator-N.log)")
    ap.add_argument("--load", type=int, default=0, help="a loaded machine: keep this many "
                    "processes spinning on the CPU for the whole run (every side alike)")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    print(f"commit {commit}; {os.cpu_count()} cores; load average {os.getloadavg()}; "
          f"{args.load} spinning processes", flush=True)
    with spinning(args.load):
        run(args)


@contextlib.contextmanager
def spinning(k: int) -> Iterator[None]:
    """`k` processes that only burn CPU (a reproducible "loaded machine"), stopped at the end."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def earlier_runs_deleted(cluster: LocalCluster, timeout: float = 600) -> None:
    """Wait until the namespaces of earlier runs are gone: deleting a thousand deployments'
    objects keeps the API server and the garbage collector busy for minutes, which would load
    the next side measured (the raw side first)."""
    started = time.monotonic()
    while True:
        items = cluster.kubectl_json("get", "namespaces")["items"]
        going = [ns["metadata"]["name"] for ns in items
                 if ns["metadata"]["name"].startswith("scale-")
                 and (ns.get("status") or {}).get("phase") == "Terminating"]
        if not going:
            return
        if time.monotonic() - started > timeout:
            print(f"  (still deleting after {timeout:.0f} s: {', '.join(going)}; measuring "
                  "anyway)", flush=True)
            return
        print(f"  ... waiting for earlier runs' namespaces to be deleted ({len(going)})",
              flush=True)
        time.sleep(10)


def run(args: argparse.Namespace) -> None:
    sizes = args.n or [100]
    nim_binary = nim_peer.find_binary(args.nim_binary) if args.peer == "nim" else None
    if args.peer == "nim" and nim_binary is None:
        print(nim_peer.BUILD_HINT.format(where=args.nim_binary or "none cached"), flush=True)
    elif nim_binary:
        print(f"peer: the NIM operator {nim_binary}", flush=True)
    nodes = bench_nodes(max(sizes), sides=2 + bool(nim_binary) + bool(args.floor))
    cluster = LocalCluster(name=args.cluster, nodes=(*DEFAULT_NODES, *nodes))
    cluster.up()
    cluster.apply([node_manifest(s, i + len(DEFAULT_NODES)) for i, s in enumerate(nodes)])
    results = []
    for n in sizes:
        earlier_runs_deleted(cluster)
        stamp = int(time.time())

        def fresh(who: str, n: int = n, stamp: int = stamp) -> str:
            ns = f"scale-{who}-{n}-{stamp}"
            cluster.kubectl("create", "namespace", ns)
            prepare_namespace(cluster, ns)
            return ns

        def done(ns: str) -> None:
            """Each side is measured on the same cluster, without the previous side's objects
            (or their deletion) in it: a side measured with 1,000 more Deployments and pods on
            the cluster pays for their controllers and kwok's updates of them."""
            if not args.keep:
                cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
                earlier_runs_deleted(cluster)

        raw_ns = fresh("raw")
        print(f"N = {n}: raw limit in {raw_ns}", flush=True)
        raw = run_raw(cluster, n, raw_ns, args.timeout)
        done(raw_ns)
        op_ns = fresh("op")
        print(f"N = {n}: operator in {op_ns}", flush=True)
        profile = Path(args.profile) if args.profile else None
        if profile:
            profile.mkdir(parents=True, exist_ok=True)
        op = run_with_operator(cluster, n, op_ns, args.resync, args.timeout, args.steady, profile,
                               Path(args.logs) if args.logs else None)
        template = reported_status(cluster, op_ns, "s0000") if args.floor else None
        done(op_ns)
        floor = None
        if template is not None:
            floor_ns = fresh("floor")
            print(f"N = {n}: floor (no operator, its reports only) in {floor_ns}", flush=True)
            floor = run_floor(cluster, n, floor_ns, template, "s0000", args.timeout)
            done(floor_ns)
        nim = None
        if nim_binary:
            nim_ns = fresh("nim")
            print(f"N = {n}: the NIM operator in {nim_ns}", flush=True)
            nim = run_nim(cluster, n, nim_ns, nim_binary, args.timeout, args.steady,
                          Path(args.logs) if args.logs else None)
            if not args.keep:
                nim_peer.release(cluster, nim_ns)
            done(nim_ns)
        result = report(n, raw, op, nim, floor)
        print_report(result)
        results.append(result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
