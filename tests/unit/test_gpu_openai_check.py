"""The pure parts of the GPU recipe's OpenAI checks (tests/gpu/openai_check.py; it runs on GPU
machines only): the chat template given to the recipe's word-level tokenizers, the figures read
from aiperf's export, the frontend's metrics read back."""

from __future__ import annotations

import pytest

from tests.gpu.openai_check import (
    AIPERF_HEADER,
    CHAT_TEMPLATE,
    PROMPT,
    aiperf_row,
    aiperf_summary,
    metric_value,
)
from tritonllm.openai.chat import ChatTemplate, RenderError
from tritonllm.openai.tokens import drop_bos

# The head of aiperf 0.13.0's profile_export_aiperf.json, as it wrote it against the frontend
# on the CPU stand-in (2026-11-27), trimmed to the keys read and one not read.
EXPORT = {
    "schema_version": "1.0",
    "aiperf_version": "0.13.0",
    "request_throughput": {"unit": "requests/sec", "avg": 9.3475},
    "request_latency": {"unit": "ms", "avg": 101.2, "p50": 98.4, "p90": 110.3, "p99": 120.2},
    "request_count": {"unit": "requests", "avg": 16.0},
    "time_to_first_token": {"unit": "ms", "avg": 37.75, "p1": 27.41, "p50": 32.14, "p90": 57.72,
                            "p99": 86.79, "min": 27.29, "max": 88.11, "count": 16},
    "inter_token_latency": {"unit": "ms", "avg": 9.1, "p50": 8.9, "p90": 10.2, "p99": 12.5},
    "output_token_throughput": {"unit": "tokens/sec", "avg": 74.78},
    "time_to_second_token": {"unit": "ms", "avg": 40.0},
    "error_summary": [],
}

FRONTEND_METRICS = """\
# TYPE tritonllm_openai_requests_total counter
tritonllm_openai_requests_total{endpoint="/v1/completions",model="m",status="200"} 5.0
tritonllm_openai_requests_total{endpoint="/v1/chat/completions",model="m",status="200"} 3.0
tritonllm_openai_requests_total{endpoint="/v1/completions",model="m",status="404"} 1.0
tritonllm_openai_requests_total{endpoint="/v1/completions",model="other",status="200"} 7.0
"""


def test_the_chat_template_renders_the_messages_after_the_bos_and_refuses_unknown_roles() -> None:
    template = ChatTemplate(CHAT_TEMPLATE, "<s>", "</s>")
    rendered = template.render([{"role": "system", "content": "hello"},
                                {"role": "user", "content": PROMPT}], 1 << 16)
    assert rendered == f"<s> hello {PROMPT}"
    # The model adds its BOS: the frontend drops the template's, leaving only words.
    assert drop_bos(rendered, "<s>", True).split() == ["hello", *PROMPT.split()]
    with pytest.raises(RenderError, match="unknown role tool"):
        template.render([{"role": "tool", "content": "x"}], 1 << 16)


def test_aiperf_summary_reads_times_throughputs_and_errors() -> None:
    summary = aiperf_summary(EXPORT)
    assert summary["ttft_ms"] == {"avg": 37.75, "p50": 32.14, "p90": 57.72, "p99": 86.79,
                                  "unit": "ms"}
    assert summary["itl_ms"]["p99"] == 12.5
    assert summary["tokens_per_s"] == {"avg": 74.78, "unit": "tokens/sec"}
    assert summary["requests"]["avg"] == 16.0
    assert summary["errors"] == 0
    assert "time_to_second_token" not in str(summary)
    failed = aiperf_summary({**EXPORT, "error_summary": [{"error_details": {"code": 500},
                                                          "count": 3}]})
    assert failed["errors"] == 3


def test_aiperf_row_lines_up_with_its_header_and_marks_missing_figures() -> None:
    row = aiperf_row({**aiperf_summary(EXPORT), "concurrency": 8})
    assert len(row) == len(AIPERF_HEADER)
    assert row.split()[:4] == ["8", "16.0", "9.3", "74.8"]
    no_itl = aiperf_row({**aiperf_summary({k: v for k, v in EXPORT.items()
                                           if k != "inter_token_latency"}), "concurrency": 1})
    assert no_itl.split()[6:8] == ["-", "-"]


def test_metric_value_sums_a_family_over_the_matching_labels() -> None:
    assert metric_value(FRONTEND_METRICS, "tritonllm_openai_requests_total", model="m",
                        status="200") == 8.0
    assert metric_value(FRONTEND_METRICS, "tritonllm_openai_requests_total", model="m") == 9.0
    assert metric_value(FRONTEND_METRICS, "tritonllm_openai_requests_total", model="m",
                        status="503") == 0.0
