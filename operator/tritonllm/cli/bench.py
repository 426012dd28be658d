"""`tritonllm bench TARGET [--compare TARGET2]`: load a serving deployment and measure it.

TARGET is a gRPC address (host:port, grpc://host:port), an http:// URL (its host, and
--grpc-port), or a deployment name (-n NAMESPACE; its Service's cluster IP, read with the
`kubernetes` package from the current kubeconfig). At each --concurrency level, that many
clients send --requests requests in all (closed loop: each sends the next when its answer is
complete) to the ensemble through tritonclient's gRPC client, and the command reports

    requests/s and output tokens/s; time to first token (TTFT), inter-token latency (ITL) and
    end-to-end latency at p50, p90 and p99

as a table (stdout), as JSON (--json FILE) and, with --configmap, in a ConfigMap beside the
deployment (owned by it: deleted with it). With --compare it runs the same load on a second
target and prints both side by side with their ratios.

A decoupled model (serving.streaming: true) streams one response per token: TTFT and ITL are
measured, and tokens are counted. A model that is not decoupled answers once: TTFT is the whole
latency, ITL is not measured, and tokens/s assumes every request produced --max-tokens tokens
(the JSON says which).

With --api openai the target is the deployment's OpenAI API instead (http://host:9000/v1,
host:port, or a deployment name: its Service's `openai` port), and every request is an
OpenAI-SDK-shaped streamed request (`stream: true`, `stream_options.include_usage`) to
/v1/chat/completions (--endpoint chat, one user message) or /v1/completions, over HTTP/1.1
keep-alive connections, one per client. TTFT is from the request's first byte sent to the first
chunk that carries text; ITL is every gap between two such chunks; tokens are the final chunk's
`usage.completion_tokens`. The model is --model, else the first id /v1/models lists.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import itertools
import json
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from tritonllm.api import constants as c

DEFAULT_PROMPT = "What is machine learning? Answer in one paragraph."
PERCENTILES = (50, 90, 99)


# --- figures (pure) ----------------------------------------------------------------------------


@dataclasses.dataclass
class Sample:
    """One request: when its first and later tokens came, and how many tokens."""

    latency: float
    ttft: float | None
    gaps: list[float]
    tokens: int
    error: str | None = None


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile, nearest rank (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summarise(concurrency: int, samples: list[Sample], seconds: float,
              streamed: bool, counted: str | None = None) -> dict[str, Any]:
    """The figures of one level (`counted`: how tokens were counted, when not the default)."""
    ok = [s for s in samples if s.error is None]
    tokens = sum(s.tokens for s in ok)
    out: dict[str, Any] = {
        "concurrency": concurrency, "requests": len(ok),
        "errors": len(samples) - len(ok), "seconds": round(seconds, 3),
        "requests_per_s": round(len(ok) / seconds, 3) if seconds else None,
        "output_tokens_per_s": round(tokens / seconds, 1) if seconds else None,
        "tokens_counted": counted or ("responses" if streamed else "max_tokens (assumed)"),
    }
    series = {
        "ttft_ms": [s.ttft for s in ok if s.ttft is not None],
        "itl_ms": [g for s in ok for g in s.gaps],
        "latency_ms": [s.latency for s in ok],
    }
    for name, values in series.items():
        for p in PERCENTILES:
            v = percentile(values, p)
            out[f"{name}_p{p}"] = None if v is None else round(v * 1000, 2)
    first_error = next((s.error for s in samples if s.error), None)
    if first_error:
        out["first_error"] = first_error[:500]
    return out


COLUMNS = (
    ("concurrency", "conc"), ("requests", "reqs"), ("errors", "errs"),
    ("requests_per_s", "req/s"), ("output_tokens_per_s", "tok/s"),
    ("ttft_ms_p50", "TTFT p50"), ("ttft_ms_p99", "TTFT p99"),
    ("itl_ms_p50", "ITL p50"), ("itl_ms_p99", "ITL p99"),
    ("latency_ms_p50", "lat p50"), ("latency_ms_p90", "lat p90"), ("latency_ms_p99", "lat p99"),
)


def _cell(v: Any) -> str:
    return "-" if v is None else (f"{v:,.1f}" if isinstance(v, float) else str(v))


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [header, *rows]
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(line, widths, strict=True))
                     for line in lines)


def table(levels: list[dict[str, Any]]) -> str:
    """The levels as a text table (times in ms)."""
    return _grid([h for _, h in COLUMNS],
                 [[_cell(level.get(k)) for k, _ in COLUMNS] for level in levels])


def comparison(a: list[dict[str, Any]], b: list[dict[str, Any]], names: tuple[str, str]) -> str:
    """Two runs side by side: tokens/s, TTFT and latency p50 of each, and B/A ratios."""
    keys = (("output_tokens_per_s", "tok/s"), ("ttft_ms_p50", "TTFT p50"),
            ("latency_ms_p50", "lat p50"))
    header = ["conc"]
    for _, h in keys:
        header += [f"{h} A", f"{h} B", "B/A"]
    rows = []
    for x, y in zip(a, b, strict=True):
        row = [str(x["concurrency"])]
        for k, _ in keys:
            ratio = y[k] / x[k] if x.get(k) and y.get(k) is not None else None
            row += [_cell(x.get(k)), _cell(y.get(k)), "-" if ratio is None else f"{ratio:.2f}x"]
        rows.append(row)
    return f"A = {names[0]}, B = {names[1]}\n" + _grid(header, rows)


# --- the load (tritonclient) --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Load:
    """What every request asks."""

    model: str = "ensemble"
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 64
    timeout: float = 300.0
    # Runtime llmapi's model (tensorrt_llm, max_batch_size 0): sampling_param_max_tokens and
    # streaming, shape [1]; bench() finds out from the model's config.
    llmapi: bool = False
    # --api openai: "chat" (/v1/chat/completions) or "completions" (/v1/completions).
    endpoint: str = "chat"


def _inputs(grpcclient: Any, load: Load, stream: bool) -> list[Any]:
    import numpy as np

    names = ("sampling_param_max_tokens", "streaming") if load.llmapi else ("max_tokens", "stream")
    tensors = []
    for name, dtype, value in (
        ("text_input", "BYTES", np.array([[load.prompt.encode()]], dtype=object)),
        (names[0], "INT32", np.array([[load.max_tokens]], dtype=np.int32)),
        (names[1], "BOOL", np.array([[stream]], dtype=bool)),
    ):
        if load.llmapi:
            value = value.reshape(1)
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        tensors.append(t)
    return tensors


def _streamed(client: Any, grpcclient: Any, load: Load, results: queue.Queue[Any]) -> Sample:
    """One request on an open decoupled stream: a response per token, then a final one."""
    start = time.perf_counter()
    client.async_stream_infer(load.model, _inputs(grpcclient, load, True),
                              enable_empty_final_response=True)
    stamps: list[float] = []
    while True:
        result, error = results.get(timeout=load.timeout)
        if error is not None:
            return Sample(time.perf_counter() - start, None, [], 0, str(error))
        if result.as_numpy("text_output") is not None:
            stamps.append(time.perf_counter())
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    end = time.perf_counter()
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return Sample(end - start, stamps[0] - start if stamps else None, gaps, len(stamps))


def _client_loop(address: str, load: Load, stream: bool, take: Callable[[], bool],
                 done: Callable[[Sample], None]) -> None:
    """One client: requests until `take` says the level has sent them all."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    results: queue.Queue[Any] = queue.Queue()
    try:
        if stream:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
        while take():
            start = time.perf_counter()
            try:
                if stream:
                    done(_streamed(client, grpcclient, load, results))
                else:
                    client.infer(load.model, _inputs(grpcclient, load, False),
                                 client_timeout=load.timeout)
                    latency = time.perf_counter() - start
                    done(Sample(latency, latency, [], load.max_tokens))
            except Exception as exc:  # counted, reported, and the load goes on
                done(Sample(time.perf_counter() - start, None, [], 0, str(exc)))
    finally:
        if stream:
            client.stop_stream()
        client.close()


def _config(address: str, model: str) -> dict[str, Any]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    try:
        return dict(client.get_model_config(model, as_json=True)["config"])
    finally:
        client.close()


def is_decoupled(address: str, model: str) -> bool:
    """Whether the model streams (model_transaction_policy.decoupled), asked of the server."""
    config = _config(address, model)
    return bool((config.get("model_transaction_policy") or {}).get("decoupled"))


def takes_llmapi_inputs(address: str, model: str) -> bool:
    """Whether the model is runtime llmapi's (sampling_param_max_tokens among its inputs)."""
    return any(i.get("name") == "sampling_param_max_tokens"
               for i in _config(address, model).get("input", []))


ClientLoop = Callable[[str, Load, bool, Callable[[], bool], Callable[[Sample], None]], None]


def run_level(address: str, load: Load, concurrency: int, requests: int, stream: bool,
              progress: Callable[[int, int], None] = lambda done, total: None,
              client_loop: ClientLoop = _client_loop, counted: str | None = None,
              ) -> dict[str, Any]:
    """`requests` requests from `concurrency` clients; the level's figures."""
    lock = threading.Lock()
    sent = 0
    samples: list[Sample] = []

    def take() -> bool:
        nonlocal sent
        with lock:
            sent += 1
            return sent <= requests

    def done(sample: Sample) -> None:
        with lock:
            samples.append(sample)
            progress(len(samples), requests)

    start = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(address, load, stream, take, done),
                                daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarise(concurrency, samples, time.perf_counter() - start, stream, counted)


def _progress_bar(say: Callable[[str], None], level: int) -> Callable[[int, int], None]:
    """A level's progress line: `n` of `total` requests answered."""
    def progress(n: int, total: int) -> None:
        width = 30
        bar = "#" * (width * n // total)
        say(f"\r  concurrency {level:>4}: [{bar:<{width}}] {n}/{total}")
    return progress


def bench(address: str, load: Load, levels: Sequence[int], requests: int,
          say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Every level against one target: the report (JSON-ready)."""
    stream = is_decoupled(address, load.model)
    load = dataclasses.replace(load, llmapi=takes_llmapi_inputs(address, load.model))
    out: dict[str, Any] = {"target": address, "model": load.model, "streaming": stream,
                           "max_tokens": load.max_tokens, "prompt": load.prompt,
                           "requests_per_level": requests, "levels": []}
    for level in levels:
        out["levels"].append(run_level(address, load, level, max(requests, level), stream,
                                       _progress_bar(say, level)))
        say("\n")
    return out


# --- the load (the OpenAI API over HTTP) -------------------------------------------------------

# Bounds on what the server sends back: one SSE line, an error body, the whole stream.
MAX_LINE = 1 << 16
MAX_ERROR_BODY = 4096
MAX_CHUNKS = 1 << 20


def openai_base(target: str) -> str:
    """The API's base URL (scheme://host:port/v1) for a URL or host:port."""
    if "://" not in target:
        target = f"http://{target}"
    parts = urlsplit(target)
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


def openai_body(load: Load) -> dict[str, Any]:
    """The request every client sends: streamed, with the usage chunk at the end."""
    body: dict[str, Any] = {"model": load.model, "max_tokens": load.max_tokens, "stream": True,
                            "stream_options": {"include_usage": True}}
    if load.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": load.prompt}]
    else:
        body["prompt"] = load.prompt
    return body


def sse_events(lines: Iterator[bytes]) -> Iterator[dict[str, Any] | None]:
    """The JSON payloads of server-sent `data:` lines; None for `data: [DONE]`."""
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, comments, event names
        data = line[5:].strip()
        if data == b"[DONE]":
            yield None
            return
        yield json.loads(data)


def chunk_text(chunk: dict[str, Any]) -> str:
    """The generated text a streamed chunk carries (chat: delta.content; completions: text)."""
    out = []
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if text:
            out.append(text)
    return "".join(out)


def read_stream(events: Iterator[dict[str, Any] | None], start: float,
                clock: Callable[[], float] = time.perf_counter) -> Sample:
    """One streamed answer as a Sample: a stamp per chunk with text, tokens from `usage`."""
    stamps: list[float] = []
    usage: int | None = None
    done = False
    for n, chunk in enumerate(events):
        if chunk is None:
            done = True
            break
        if n >= MAX_CHUNKS:
            return Sample(clock() - start, None, [], 0, f"more than {MAX_CHUNKS} chunks")
        if "error" in chunk:
            return Sample(clock() - start, None, [], 0, json.dumps(chunk["error"])[:500])
        if chunk_text(chunk):
            stamps.append(clock())
        if isinstance(chunk.get("usage"), dict):
            usage = int(chunk["usage"].get("completion_tokens") or 0)
    end = clock()
    if not done:
        return Sample(end - start, None, [], 0, "the stream ended without data: [DONE]")
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return Sample(end - start, stamps[0] - start if stamps else None, gaps,
                  len(stamps) if usage is None else usage)


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while line := response.readline(MAX_LINE):
        yield line


def _openai_request(conn: http.client.HTTPConnection, path: str, body: bytes,
                    timeout: float) -> Sample:
    start = time.perf_counter()
    conn.request("POST", path, body, {"Content-Type": "application/json",
                                      "Accept": "text/event-stream"})
    response = conn.getresponse()
    if response.status != 200:
        text = response.read(MAX_ERROR_BODY).decode(errors="replace")
        response.close()
        return Sample(time.perf_counter() - start, None, [], 0, f"HTTP {response.status}: {text}")
    sample = read_stream(sse_events(_lines(response)), start)
    response.read()  # the rest (nothing after [DONE]): the connection stays reusable
    if sample.latency > timeout:
        sample.error = f"took {sample.latency:.1f} s, over --timeout {timeout}"
    return sample


def _openai_client_loop(base: str, load: Load, stream: bool, take: Callable[[], bool],
                        done: Callable[[Sample], None]) -> None:
    """One client over one keep-alive connection: requests until the level has sent them all."""
    url = urlsplit(base)
    cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = cls(url.hostname or "", url.port, timeout=load.timeout)
    path = f"{url.path}/{'chat/completions' if load.endpoint == 'chat' else 'completions'}"
    body = json.dumps(openai_body(load)).encode()
    try:
        while take():
            start = time.perf_counter()
            try:
                done(_openai_request(conn, path, body, load.timeout))
            except Exception as exc:  # counted, reported, and the load goes on
                conn.close()  # a fresh connection for the next request
                done(Sample(time.perf_counter() - start, None, [], 0, repr(exc)))
    finally:
        conn.close()


def served_models(base: str, timeout: float = 30.0) -> list[str]:
    """The model ids GET /v1/models lists."""
    url = urlsplit(base)
    cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = cls(url.hostname or "", url.port, timeout=timeout)
    try:
        conn.request("GET", f"{url.path}/models")
        response = conn.getresponse()
        text = response.read(MAX_ERROR_BODY * 16)
        if response.status != 200:
            raise RuntimeError(f"GET {base}/models: HTTP {response.status}: {text[:500]!r}")
        return [str(m["id"]) for m in json.loads(text).get("data", [])]
    finally:
        conn.close()


def bench_openai(base: str, load: Load, levels: Sequence[int], requests: int,
                 say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Every level against one OpenAI API: the report (JSON-ready, as bench()'s)."""
    out: dict[str, Any] = {"target": base, "api": "openai", "endpoint": load.endpoint,
                           "model": load.model, "streaming": True,
                           "max_tokens": load.max_tokens, "prompt": load.prompt,
                           "requests_per_level": requests, "levels": []}
    for level in levels:
        out["levels"].append(run_level(base, load, level, max(requests, level), True,
                                       _progress_bar(say, level), _openai_client_loop, "usage"))
        say("\n")
    return out


# --- targets, the ConfigMap, the command -------------------------------------------------------


def grpc_address(target: str, grpc_port: int) -> str:
    """host:port of Triton's gRPC endpoint for an address or URL (not a deployment name)."""
    if target.startswith("http://") or target.startswith("https://"):
        host = urlsplit(target).hostname or ""
        return f"{host}:{grpc_port}"
    return target.removeprefix("grpc://").rstrip("/")


def is_address(target: str) -> bool:
    return "://" in target or ":" in target


def deployment_address(name: str, namespace: str, port: int = c.GRPC_PORT) -> str:
    """host:port of a deployment's Service (its cluster IP: run where that routes): Triton's
    gRPC port, or another of its ports."""
    from kubernetes import client, config

    config.load_kube_config()
    service = client.CoreV1Api().read_namespaced_service(name, namespace)
    return f"{service.spec.cluster_ip}:{port}"


BENCH_MANAGER = "tritonllm-bench"
# Exit code of a run whose report could not be stored (the figures were printed).
EXIT_CONFIGMAP_REFUSED = 3


class ConfigMapRefused(Exception):
    """ConfigMap <name>-bench exists and the bench did not create it."""


def _is_ours(live: dict[str, Any], owner_uid: str) -> bool:
    """Created by the bench for this deployment: its label and an owner reference to this very
    deployment (by uid) say so; anything else under the name is someone else's."""
    meta = live.get("metadata") or {}
    managed = (meta.get("labels") or {}).get(c.LABEL_MANAGED_BY) == BENCH_MANAGER
    owners = {r.get("uid") for r in meta.get("ownerReferences") or []}
    return managed and owner_uid in owners


def write_configmap(name: str, namespace: str, report: dict[str, Any]) -> str:
    """The report in ConfigMap <name>-bench, owned by deployment `name`; its name. A ConfigMap of
    that name that the bench did not create is refused (ConfigMapRefused), never overwritten."""
    from kubernetes import client, config

    config.load_kube_config()
    core = client.CoreV1Api()
    owner = client.CustomObjectsApi().get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    uid = owner["metadata"]["uid"]
    cm_name = f"{name}-bench"
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": namespace,
                     "labels": {c.LABEL_MANAGED_BY: BENCH_MANAGER, c.LABEL_DEPLOYMENT: name},
                     "ownerReferences": [{"apiVersion": c.API_VERSION, "kind": c.KIND,
                                          "name": name, "uid": uid}]},
        "data": {"results.json": json.dumps(report, indent=2), "table": table(report["levels"])},
    }
    try:
        live = client.ApiClient().sanitize_for_serialization(
            core.read_namespaced_config_map(cm_name, namespace))
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        core.create_namespaced_config_map(namespace, body)  # 409 if one appeared meanwhile
        return cm_name
    if not _is_ours(live, uid):
        raise ConfigMapRefused(
            f"ConfigMap {namespace}/{cm_name} exists and was not created by tritonllm bench for "
            f"deployment {name} (no label {c.LABEL_MANAGED_BY}={BENCH_MANAGER} and owner "
            f"reference to it): left unchanged; delete or rename it to store the report there")
    # replaced only as read: a ConfigMap swapped in meanwhile fails with 409
    body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    core.replace_namespaced_config_map(cm_name, namespace, body)
    return cm_name


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="load a serving deployment: throughput, TTFT, ITL, latency")
    p.add_argument("target", help="deployment name, gRPC host:port, or http:// URL")
    p.add_argument("--api", choices=("grpc", "openai"), default="grpc",
                   help="Triton's gRPC stream (default) or the deployment's OpenAI API "
                   "(http://host:9000/v1; a deployment name: its Service's openai port)")
    p.add_argument("--endpoint", choices=("chat", "completions"), default="chat",
                   help="--api openai: /v1/chat/completions or /v1/completions")
    p.add_argument("--compare", metavar="TARGET", help="a second target, run the same way")
    p.add_argument("--compare-api", choices=("grpc", "openai"),
                   help="the second target's --api (default: --api), e.g. the OpenAI API "
                   "against direct gRPC on one deployment")
    p.add_argument("--compare-model", metavar="MODEL",
                   help="the second target's model (default: --model), e.g. to compare the "
                   "ensemble with tensorrt_llm_bls or another backend's model on one server")
    p.add_argument("-n", "--namespace", default="default", help="namespace of deployment names")
    p.add_argument("--concurrency", default="1,4,16", help="comma-separated client counts")
    p.add_argument("--requests", type=int, default=32, help="requests per level (at least one "
                   "per client)")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens of every request")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--model", default=None,
                   help="ensemble (default) or tensorrt_llm_bls; tensorrt_llm for runtime "
                   "llmapi; with --api openai the served model name (default: the first one "
                   "/v1/models lists)")
    p.add_argument("--grpc-port", type=int, default=c.GRPC_PORT, help="for http:// targets")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON (- : stdout)")
    p.add_argument("--configmap", action="store_true",
                   help="also store the report in ConfigMap <deployment>-bench (deployment "
                   "targets only)")
    p.set_defaults(func=run)


def _one_openai(target: str, args: argparse.Namespace, load: Load,
                levels: list[int]) -> dict[str, Any]:
    base = openai_base(target if is_address(target) else
                       deployment_address(target, args.namespace, c.OPENAI_PORT))
    if not load.model:
        models = served_models(base)
        if not models:
            raise RuntimeError(f"{base}/models lists no model: name one with --model")
        load = dataclasses.replace(load, model=models[0])
    print(f"{target} ({base}, {load.endpoint}, model {load.model}):", file=sys.stderr)
    report = bench_openai(base, load, levels, args.requests,
                          lambda s: print(s, end="", file=sys.stderr))
    report["name"] = f"{target} openai {load.endpoint}"
    return report


def _one(target: str, args: argparse.Namespace, load: Load, levels: list[int],
         api: str = "grpc") -> dict[str, Any]:
    if api == "openai":
        return _one_openai(target, args, load, levels)
    load = dataclasses.replace(load, model=load.model or "ensemble")
    address = grpc_address(target, args.grpc_port) if is_address(target) else \
        deployment_address(target, args.namespace)
    print(f"{target} ({address}, model {load.model}):", file=sys.stderr)
    report = bench(address, load, levels, args.requests, lambda s: print(s, end="",
                                                                         file=sys.stderr))
    report["name"] = target if load.model == "ensemble" else f"{target} {load.model}"
    return report


def run(args: argparse.Namespace) -> int:
    try:
        levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    except ValueError:
        print(f"error: --concurrency must be comma-separated integers, not {args.concurrency!r}",
              file=sys.stderr)
        return 2
    if not levels or min(levels) < 1 or args.requests < 1 or args.max_tokens < 1:
        print("error: --concurrency, --requests and --max-tokens must be at least 1",
              file=sys.stderr)
        return 2
    if args.configmap and is_address(args.target):
        print("error: --configmap needs a deployment name as the target", file=sys.stderr)
        return 2
    # no --model: "" here, then the gRPC default (ensemble) or the API's first served model
    load = Load(args.model or "", args.prompt, args.max_tokens, args.timeout,
                endpoint=args.endpoint)
    try:
        reports = [_one(args.target, args, load, levels, args.api)]
        if args.compare:
            other = dataclasses.replace(load, model=args.compare_model or load.model)
            reports.append(_one(args.compare, args, other, levels, args.compare_api or args.api))
    except (OSError, RuntimeError, ValueError) as exc:  # no target to load at all
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for r in reports:
        print(f"{r['name']} ({'streaming' if r['streaming'] else 'not decoupled'}, "
              f"max_tokens {r['max_tokens']}, {r['requests_per_level']} requests per level; "
              "times in ms)")
        print(table(r["levels"]) + "\n")
    if len(reports) == 2:
        print(comparison(reports[0]["levels"], reports[1]["levels"],
                         (reports[0]["name"], reports[1]["name"])))
    result: dict[str, Any] = reports[0] if len(reports) == 1 else {"runs": reports}
    if args.json:
        text = json.dumps(result, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    if args.configmap:
        try:
            stored = write_configmap(args.target, args.namespace, reports[0])
        except ConfigMapRefused as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_CONFIGMAP_REFUSED
        print(f"stored in ConfigMap {args.namespace}/{stored}", file=sys.stderr)
    failed = any(level["errors"] for r in reports for level in r["levels"])
    return 1 if failed else 0
