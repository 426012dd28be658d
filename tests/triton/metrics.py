"""Reading a tritonserver's metrics endpoint in the Triton tests: every sample, and one family's
series of one model by its category label."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

# (name, labels) -> value
Sample = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: str) -> Sample:
    """Every sample of the metrics endpoint at `metrics` (host:port)."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def gauges(sample: Sample, family: str, label: str, model: dict[str, str]
           ) -> dict[str, float]:
    """label value -> value of the family's series of `model` (its labels: model and version);
    each series must have those labels and `label` only."""
    out = {}
    for (name, labels), value in sample.items():
        if name == family:
            extra = dict(labels)
            assert {k: extra.pop(k, None) for k in model} == model, labels
            assert list(extra) == [label], labels
            out[extra[label]] = value
    return out
