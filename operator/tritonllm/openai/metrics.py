"""The frontend's Prometheus metrics (its own registry, served at /metrics on port 9000).

Every family carries `model` (the served model name). Requests are counted by endpoint and
HTTP status, errors included; the histograms time what a client sees: the first token, the
gaps between tokens, the whole request.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "tritonllm_openai"
# Seconds: from a few ms (loopback, a hot model) to minutes (long answers, queues).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0, 300.0)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3,
                     0.5, 1.0, 2.5)


class Metrics:
    def __init__(self, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(f"{PREFIX}_requests", "OpenAI API requests by endpoint and "
                                "HTTP status", ["model", "endpoint", "status"], registry=r)
        self.prompt_tokens = Counter(f"{PREFIX}_prompt_tokens", "Prompt tokens of answered "
                                     "requests", ["model"], registry=r)
        self.completion_tokens = Counter(f"{PREFIX}_completion_tokens", "Generated tokens",
                                         ["model"], registry=r)
        self.ttft = Histogram(f"{PREFIX}_time_to_first_token_seconds", "From the request's "
                              "arrival to its first generated token", ["model"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram(f"{PREFIX}_inter_token_latency_seconds", "Between consecutive "
                             "generated tokens of a request", ["model"],
                             buckets=TOKEN_GAP_BUCKETS, registry=r)
        self.duration = Histogram(f"{PREFIX}_request_duration_seconds", "From the request's "
                                  "arrival to its last byte", ["model"],
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge(f"{PREFIX}_requests_in_flight", "Generation requests being "
                               "answered", ["model"], registry=r)
        # Every family has its series from the first scrape (a histogram no request has fed
        # yet, e.g. inter-token gaps of a model that answers in one response, still exists).
        for family in (self.prompt_tokens, self.completion_tokens, self.ttft, self.itl,
                       self.duration, self.in_flight):
            family.labels(model)

    def request(self, endpoint: str, status: int) -> None:
        self.requests.labels(self.model, endpoint, str(status)).inc()
