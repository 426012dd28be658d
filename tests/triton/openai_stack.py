"""The OpenAI frontend as a serving pod runs it, in front of a real tritonserver of the triton tier.

What runs for real: `tritonllm openai --config <openai.json>` as its own process (the command the
`openai` sidecar runs), its config being what the operator renders for the deployment
(tritonllm.triton.openai.frontend_config) with only the Triton address and the port adapted to
this machine; the tritonserver of stack.py (engine ensemble, CPU stand-in for tensorrt_llm) or
llmapi_stack.py (our llmapi model over the SIMULATED LLM API); the model's tokenizer files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers import free_ports
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.triton.openai import FRONTEND_CONFIG_KEY, FrontendConfig, frontend_config

STARTUP_SECONDS = 60
# A chat template in the shape of Llama 2's chat models (a system prompt folded into the first
# user turn, [INST] ... [/INST], the BOS text at the start of every exchange), written here.
LLAMA2_STYLE_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
    "{% set messages = messages[1:] %}{% else %}{% set system = '' %}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)


def tokenizer_with_template(tokenizer_dir: Path, out: Path, template: str | None) -> Path:
    """A copy of the model's tokenizer files, with `template` as chat_template.jinja (or none:
    the test tokenizer has no chat template of its own)."""
    shutil.copytree(tokenizer_dir, out, dirs_exist_ok=True)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    if template is not None:
        (out / "chat_template.jinja").write_text(template)
    return out


@dataclasses.dataclass
class Frontend:
    url: str  # http://127.0.0.1:<port>
    proc: subprocess.Popen[bytes]
    config: FrontendConfig
    log: Path

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: bytes | dict[str, Any],
             headers: dict[str, str] | None = None,
             timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def metrics(self) -> str:
        return self.get("/metrics")[1].decode()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def config_for(dep: TritonLLMDeployment, grpc: str, tokenizer_dir: Path,
               **overrides: Any) -> FrontendConfig:
    """What the operator renders for `dep`, with this machine's Triton address and a free
    port (and `overrides`, e.g. max_concurrent_requests)."""
    rendered = frontend_config(dep, tokenizer_dir=str(tokenizer_dir))
    return rendered.model_copy(update={"triton_grpc": grpc, "port": free_ports(1)[0],
                                       **overrides})


@contextlib.contextmanager
def run_frontend(config: FrontendConfig, root: Path) -> Iterator[Frontend]:
    """`tritonllm openai --config root/openai.json` until it serves /v1/models; SIGTERM on exit."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / FRONTEND_CONFIG_KEY
    path.write_text(config.model_dump_json(indent=2))
    log = root / "openai.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tritonllm.cli.main", "openai", "--config", str(path),
             "--bind", "127.0.0.1", "--drain-seconds", "5"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    frontend = Frontend(f"http://127.0.0.1:{config.port}", proc, config, log)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            with contextlib.suppress(OSError):
                if frontend.get("/v1/models", timeout=2)[0] == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tritonllm openai did not start:\n{frontend.output()[-4000:]}")
            time.sleep(0.1)
        yield frontend
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
