"""`tritonllm bench --api openai`: the request it sends, how it reads a streamed answer, and its
figures (TTFT to the first chunk with text, ITL between such chunks, tokens from `usage`).

The wire test serves a recorded-shape SSE answer from the standard library's HTTP server over
chunked HTTP/1.1 keep-alive, as the frontend answers; the real frontend in front of a real
tritonserver is driven in tests/triton/test_bench_with_cpu_standin.py.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tritonllm.cli import bench


def chunk(text: str | None = None, *, chat: bool = True, usage: int | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                            "choices": []}
    if text is not None:
        body["choices"] = [{"index": 0, "delta": {"content": text}} if chat else
                           {"index": 0, "text": text}]
    if usage is not None:
        body["usage"] = {"prompt_tokens": 5, "completion_tokens": usage,
                         "total_tokens": 5 + usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_base_url_from_a_url_or_host_port() -> None:
    assert bench.openai_base("http://10.0.0.1:9000/v1") == "http://10.0.0.1:9000/v1"
    assert bench.openai_base("http://10.0.0.1:9000/v1/") == "http://10.0.0.1:9000/v1"
    assert bench.openai_base("http://10.0.0.1:9000") == "http://10.0.0.1:9000/v1"
    assert bench.openai_base("10.0.0.1:9000") == "http://10.0.0.1:9000/v1"
    assert bench.openai_base("https://gw.example/llm/v1") == "https://gw.example/llm/v1"


def test_request_body_streams_with_usage_for_both_endpoints() -> None:
    chat = bench.openai_body(bench.Load("m", "hello world", 7, endpoint="chat"))
    assert chat == {"model": "m", "max_tokens": 7, "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": "hello world"}]}
    completions = bench.openai_body(bench.Load("m", "hello world", 7, endpoint="completions"))
    assert completions["prompt"] == "hello world" and "messages" not in completions
    assert completions["stream_options"] == {"include_usage": True}


def test_sse_events_skip_separators_and_stop_at_done() -> None:
    lines = [b": keep-alive\n", b"\n", b'data: {"a": 1}\n', b"\n", b"data: [DONE]\n",
             b'data: {"after": 1}\n']
    assert list(bench.sse_events(iter(lines))) == [{"a": 1}, None]


def test_text_of_chat_and_completion_chunks() -> None:
    assert bench.chunk_text(json.loads(chunk("hi")[6:])) == "hi"
    assert bench.chunk_text(json.loads(chunk("hi", chat=False)[6:])) == "hi"
    assert bench.chunk_text(json.loads(chunk("")[6:])) == ""  # a role-only first delta
    assert bench.chunk_text(json.loads(chunk(usage=3)[6:])) == ""


def events(*chunks: bytes) -> Iterator[dict[str, Any] | None]:
    return bench.sse_events(iter(b"".join(chunks).splitlines(keepends=True)))


def ticking(*times: float) -> Any:
    it = iter(times)
    return lambda: next(it)


def test_ttft_is_the_first_chunk_with_text_and_itl_the_gaps_between_them() -> None:
    # a role-only chunk (no text) at 0.05 is not the first token; the usage chunk is not a gap
    stream = events(chunk(""), chunk("hello"), chunk(" world"), chunk(" hi"), chunk(usage=3),
                    b"data: [DONE]\n\n")
    # clock reads: one per chunk with text, then the end
    sample = bench.read_stream(stream, start=1.0, clock=ticking(1.2, 1.25, 1.35, 1.4))
    assert sample.error is None
    assert sample.ttft == pytest.approx(0.2)
    assert sample.gaps == pytest.approx([0.05, 0.1])
    assert sample.latency == pytest.approx(0.4)
    assert sample.tokens == 3  # from usage, not from counting chunks


def test_tokens_fall_back_to_chunks_without_usage() -> None:
    stream = events(chunk("a"), chunk("b"), b"data: [DONE]\n\n")
    assert bench.read_stream(stream, 0.0, ticking(1, 2, 3)).tokens == 2


def test_a_stream_without_done_or_with_an_error_chunk_is_an_error() -> None:
    cut = bench.read_stream(events(chunk("a")), 0.0, ticking(1, 2))
    assert cut.error and "[DONE]" in cut.error
    failed = bench.read_stream(events(b'data: {"error": {"message": "boom"}}\n\n'), 0.0,
                               ticking(1))
    assert failed.error and "boom" in failed.error


class SSE(BaseHTTPRequestHandler):
    """Answers like the frontend: chunked SSE, keep-alive; 400 for max_tokens 0."""

    protocol_version = "HTTP/1.1"
    bodies: list[dict[str, Any]] = []
    paths: list[str] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SSE.bodies.append(body)
        SSE.paths.append(self.path)
        if body["max_tokens"] == 0:
            error = json.dumps({"error": {"message": "max_tokens must be at least 1",
                                          "param": "max_tokens"}}).encode()
            self.send_response(400)
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chat = self.path.endswith("chat/completions")
        parts = [chunk(w, chat=chat) for w in ("hello", " world")]
        for part in [*parts, chunk(usage=2), b"data: [DONE]\n\n"]:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        data = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    SSE.bodies, SSE.paths = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SSE)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_level_over_keep_alive_connections(server: str, endpoint: str) -> None:
    load = bench.Load("tiny", "hello world", 2, timeout=10, endpoint=endpoint)
    level = bench.run_level(server, load, 2, 6, True, client_loop=bench._openai_client_loop,
                            counted="usage")
    assert level["requests"] == 6 and level["errors"] == 0, level
    assert level["tokens_counted"] == "usage"
    assert level["ttft_ms_p50"] is not None and level["itl_ms_p50"] is not None
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    assert set(SSE.paths) == {path}
    assert all(b["stream_options"] == {"include_usage": True} for b in SSE.bodies)


def test_an_error_answer_is_counted_with_its_body(server: str) -> None:
    load = bench.Load("tiny", "hello", 0, timeout=10)
    level = bench.run_level(server, load, 1, 2, True, client_loop=bench._openai_client_loop)
    assert level["errors"] == 2 and level["requests"] == 0
    assert "HTTP 400" in level["first_error"] and "max_tokens" in level["first_error"]


def test_served_models_lists_the_ids(server: str) -> None:
    assert bench.served_models(server) == ["tiny"]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_cli_defaults_keep_the_grpc_path() -> None:
    args = parse("10.0.0.1:8001")
    assert (args.api, args.endpoint, args.model, args.compare_api) == \
        ("grpc", "chat", None, None)


def test_cli_runs_the_openai_target_and_takes_the_served_model(server: str, capsys: Any,
                                                               tmp_path: Any) -> None:
    out = tmp_path / "r.json"
    rc = bench.run(parse(server, "--api", "openai", "--endpoint", "completions",
                         "--concurrency", "1,2", "--requests", "2", "--max-tokens", "2",
                         "--json", str(out)))
    assert rc == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert (report["api"], report["endpoint"], report["model"]) == ("openai", "completions",
                                                                    "tiny")
    assert [lv["concurrency"] for lv in report["levels"]] == [1, 2]
    assert all(b["model"] == "tiny" for b in SSE.bodies)
    assert "openai completions" in capsys.readouterr().out


# --- bench/openai_compare.py: how aiperf's figures are read beside ours --------------------------


def test_aiperf_summary_lines_up_with_our_figures() -> None:
    from bench import openai_compare as oc

    mine = {"ttft_ms_p50": 30.0, "ttft_ms_p99": 40.0, "itl_ms_p50": 11.0,
            "output_tokens_per_s": 88.0, "requests_per_s": 2.75, "errors": 0, "cpu_s": 1.5}
    theirs = {  # the shape of aiperf 0.13.0's profile_export_aiperf.json
        "time_to_first_token": {"unit": "ms", "avg": 33.0, "p50": 33.0, "p99": 50.0},
        "inter_chunk_latency": {"unit": "ms", "p50": 11.5},
        "inter_token_latency": {"unit": "ms", "p50": 11.0},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 80.0},
        "request_throughput": {"unit": "requests/sec", "avg": 2.5},
        "error_summary": [], "cpu_s": 9.0}
    rows = {f: (a, b) for f, a, b in oc.side_by_side(mine, theirs)}
    assert rows["TTFT p50 ms"] == (30.0, 33.0)
    assert rows["ITL p50 ms (gaps)"] == (11.0, 11.5)  # the same definition on both sides
    assert rows["output tokens/s"] == (88.0, 80.0)
    assert rows["failed requests"] == (0, 0)
    assert rows["client CPU seconds"] == (1.5, 9.0)
    assert oc.diff(88.0, 80.0) == "+10.0 %" and oc.diff(1, None) == "-"


def test_the_frontends_ttft_histogram_totals_every_label_set() -> None:
    from bench import openai_compare as oc

    metrics = "\n".join([
        "# TYPE tritonllm_openai_time_to_first_token_seconds histogram",
        'tritonllm_openai_time_to_first_token_seconds_bucket{le="0.1",model="a"} 3.0',
        'tritonllm_openai_time_to_first_token_seconds_sum{model="a"} 0.25',
        'tritonllm_openai_time_to_first_token_seconds_count{model="a"} 3.0',
        'tritonllm_openai_time_to_first_token_seconds_sum{model="b"} 0.75',
        'tritonllm_openai_time_to_first_token_seconds_count{model="b"} 1.0',
        'tritonllm_openai_inter_token_latency_seconds_sum{model="a"} 9.0'])
    assert oc.ttft_totals(metrics) == (1.0, 4.0)


def test_aiperfs_gap_between_requests_from_its_records(tmp_path: Any) -> None:
    from bench import openai_compare as oc

    records = [{"metadata": {"request_start_ns": start, "request_end_ns": end}}
               for start, end in ((3_000_000, 5_000_000), (0, 2_000_000),
                                  (6_000_000, 9_000_000))]
    (tmp_path / "profile_export.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records))
    assert oc.aiperf_gap_ms(tmp_path) == 1.0  # (1 ms + 1 ms) / 2, in start order
