"""Autoscaling under load: tritonclient clients against a deployment's Service, and the figures
a user asks for (load start -> new replica Ready, zero -> first answer, failed requests).

The load is real: each client is a `tritonclient.http` InferenceServerClient sending the
ensemble's inputs (text_input, max_tokens), or llmapi's (text_input, sampling_param_max_tokens:
`Ask`), one request after the other, through the operator's
Service (kube-proxy on the host reaches the ClusterIP). The CPU stand-in answers one token per
TRITONLLM_STANDIN_TOKEN_DELAY seconds, so a handful of clients make requests queue in Triton,
which is what the autoscaler reads (nv_inference_pending_request_count through Prometheus).

The tests in tests/autoscaling/ drive the scenarios and assert; `python -m bench.autoscaling`
runs the same scenarios on a running local cluster with a real node and prints the figures
(docs/autoscaling.md#figures).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PROMPT = "hello world"
MAX_TOKENS = 8
# A request held by the activator while a replica starts waits at most this long client-side.
REQUEST_TIMEOUT = 600.0


@dataclasses.dataclass(frozen=True)
class Ask:
    """How a request asks the serving model: its name, its length input, and whether inputs
    carry a batch dimension (the ensemble's max_batch_size > 0; llmapi's model has 0)."""

    model: str = "ensemble"
    length_input: str = "max_tokens"
    batched: bool = True


ENSEMBLE = Ask()
LLMAPI = Ask("tensorrt_llm", "sampling_param_max_tokens", batched=False)


@dataclasses.dataclass
class Outcome:
    started: float  # time.monotonic() at send
    seconds: float
    error: str | None = None


def infer(url: str, prompt: str = PROMPT, max_tokens: int = MAX_TOKENS,
          timeout: float = REQUEST_TIMEOUT, ask: Ask = ENSEMBLE) -> str:
    """One request through tritonclient (HTTP, the model `ask` names); returns text_output."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, connection_timeout=timeout,
                                              network_timeout=timeout)
    shape = [1, 1] if ask.batched else [1]
    try:
        text = httpclient.InferInput("text_input", shape, "BYTES")
        text.set_data_from_numpy(np.array([prompt.encode()], dtype=object).reshape(shape))
        tokens = httpclient.InferInput(ask.length_input, shape, "INT32")
        tokens.set_data_from_numpy(np.array([max_tokens], dtype=np.int32).reshape(shape))
        result = client.infer(ask.model, [text, tokens])
        out = result.as_numpy("text_output")
        return bytes(out.reshape(-1)[0]).decode() if out is not None else ""
    finally:
        client.close()


class Load:
    """`clients` threads, each sending requests back to back until stopped."""

    def __init__(self, url: str, clients: int, *, check: Callable[[str], bool] | None = None,
                 max_tokens: int = MAX_TOKENS, ask: Ask = ENSEMBLE) -> None:
        self.url, self.clients, self.max_tokens, self.ask = url, clients, max_tokens, ask
        self.check = check
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.started = 0.0

    def __enter__(self) -> Load:
        self.started = time.monotonic()
        self._threads = [threading.Thread(target=self._run, daemon=True, name=f"client-{i}")
                         for i in range(self.clients)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop sending; wait for every request in flight to end (answered or failed)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=REQUEST_TIMEOUT + 10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.outcomes_add(one_request(self.url, self.max_tokens, self.check, self.ask))

    def outcomes_add(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)

    @property
    def answered(self) -> int:
        return sum(1 for o in self.outcomes if o.error is None)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]


def one_request(url: str, max_tokens: int = MAX_TOKENS,
                check: Callable[[str], bool] | None = None, ask: Ask = ENSEMBLE) -> Outcome:
    t0 = time.monotonic()
    try:
        text = infer(url, max_tokens=max_tokens, ask=ask)
    except Exception as exc:  # every failure a client would see counts
        return Outcome(t0, time.monotonic() - t0, f"{type(exc).__name__}: {exc}"[:300])
    if check is not None and not check(text):
        return Outcome(t0, time.monotonic() - t0, f"wrong answer {text!r}")
    return Outcome(t0, time.monotonic() - t0)


def burst(url: str, n: int, check: Callable[[str], bool] | None = None,
          ask: Ask = ENSEMBLE) -> list[Outcome]:
    """`n` requests sent at once (each in its own thread); their outcomes in send order."""
    return burst_of(n, lambda: one_request(url, check=check, ask=ask))


def burst_of(n: int, request: Callable[[], Outcome]) -> list[Outcome]:
    """`request` made `n` times at once (each in its own thread); outcomes in send order."""
    outcomes: list[Outcome | None] = [None] * n

    def send(i: int) -> None:
        outcomes[i] = request()

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=REQUEST_TIMEOUT + 10)
    return [o if o is not None else Outcome(0.0, REQUEST_TIMEOUT, "no outcome") for o in outcomes]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def summary(name: str, outcomes: list[Outcome]) -> str:
    seconds = [o.seconds for o in outcomes if o.error is None]
    failed = sum(1 for o in outcomes if o.error is not None)
    return (f"{name}: {len(outcomes)} requests, {failed} failed, latency p50 "
            f"{percentile(seconds, 50):.2f} s p95 {percentile(seconds, 95):.2f} s max "
            f"{max(seconds, default=float('nan')):.2f} s")


def main() -> int:
    """Run the real-node scenarios (tests/autoscaling/test_real_autoscaling.py, which start the
    cluster, the autoscaling tier and the operator) and print their figures."""
    import subprocess
    import sys

    test = "tests/autoscaling/test_real_autoscaling.py"
    cmd = [sys.executable, "-m", "pytest", test, "-s", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    figures = [line for line in done.stdout.splitlines() if "[measure]" in line]
    print("\n".join(line[line.index("[measure]"):] for line in figures))
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
