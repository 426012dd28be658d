"""Shared by the autoscaling tier's tests: a simulated metrics exporter, and what the operator
and the API server say about who writes a workload's replica count."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.cluster.operator_harness import Operator


class SimulatedExporter:
    """Serves ``/metrics`` in Prometheus's text format from values the test sets."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, name: str, labels: dict[str, str], value: float) -> None:
        self.series[(name, tuple(sorted(labels.items())))] = value

    def render(self) -> str:
        lines = []
        for (name, labels), value in sorted(self.series.items()):
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.append(f"{name}{{{text}}} {value}" if text else f"{name} {value}")
        return "\n".join(lines) + "\n"

    def scrape_config(self, job: str) -> dict[str, Any]:
        """A Prometheus scrape job of this exporter that keeps the labels it writes."""
        return {"job_name": job, "honor_labels": True,
                "static_configs": [{"targets": [self.address]}]}


def replica_writes(op: Operator) -> float:
    """The operator's own count of replica writes (tritonllm_replica_writes_total)."""
    return sum(float(m.group(1)) for m in re.finditer(
        r"^tritonllm_replica_writes_total\{[^}]*\} ([0-9.e+]+)$", op.metrics(), re.M))


def replica_managers(obj: dict[str, Any]) -> set[str]:
    """Field managers of spec.replicas in an object read with --show-managed-fields."""
    return {e["manager"] for e in obj["metadata"].get("managedFields") or []
            if "f:replicas" in ((e.get("fieldsV1") or {}).get("f:spec") or {})}
