"""What a verification pod's answers cost the operator: figures, not pass/fail.

    .venv/bin/python -m bench.smoke_answer [--mib 300] [--source DIR ...]

For each source tree given (default: this checkout; e.g. `--source /path/to/old-checkout` to
compare with an older operator), a child process imports its tritonllm.handlers.smoke and:

- sends one smoke request (`send`) to a local server that answers `--mib` MiB of text_output,
  and reports its peak resident memory (VmHWM) before and after;
- asks for the smoke set of one request with maxLatencySeconds 2 of a server that never
  answers, the way a reconcile pass does (`SmokeChecks.run`, asked again until it has the
  answers), and reports how long the first call held the pass and how long until the answers.

The servers run in this process, so the child's memory is the client's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, json, os, sys, time
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.spec import SmokeRequest
from tritonllm.handlers import smoke

def hwm_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

async def main():
    out = {}
    c.HTTP_PORT = int(os.environ["BIG_PORT"])
    out["hwm_before_mib"] = round(hwm_mib(), 1)
    answer = await smoke.send("127.0.0.1", "ensemble", SmokeRequest(prompt="hi",
                                                                    maxLatencySeconds=600))
    out["hwm_after_mib"] = round(hwm_mib(), 1)
    out["answer"] = [answer.status, None if answer.text is None else len(answer.text),
                     answer.error[:80]]
    c.HTTP_PORT = int(os.environ["SILENT_PORT"])
    body = {"apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
            "metadata": {"name": "demo", "namespace": "default", "uid": "uid-demo"},
            "spec": {"image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
                     "model": {"source": "hf://meta-llama/Llama-2-7b-hf"},
                     "rollout": {"smoke": [{"prompt": "hi", "maxLatencySeconds": 2}]}}}
    dep = parse_deployment(body)
    owner = {"apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
             "name": "demo", "uid": "uid-demo", "controller": True}
    verify = {"metadata": {"name": "demo-verify", "uid": "uid-verify",
                           "labels": {c.LABEL_MANAGED_BY: c.APP_NAME}, "ownerReferences": [owner]},
              "spec": {"replicas": 1, "template": {"metadata": {"annotations": {
                  c.ANNOTATION_REVISION: "rev"}}}},
              "status": {"replicas": 1, "readyReplicas": 1}}
    rs = {"metadata": {"name": "demo-verify-1", "uid": "uid-rs", "ownerReferences": [
        {"kind": "Deployment", "name": "demo-verify", "uid": "uid-verify", "controller": True}]}}
    pod = {"metadata": {"name": "demo-verify-1-a", "annotations": {c.ANNOTATION_REVISION: "rev"},
                        "labels": {}, "ownerReferences": [
                            {"kind": "ReplicaSet", "name": "demo-verify-1", "uid": "uid-rs",
                             "controller": True}]},
           "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}

    class Kube:
        async def list(self, *args, **kwargs):
            return [pod]

        async def get(self, *args):
            return rs

    checks = smoke.SmokeChecks()
    start = time.monotonic()
    run = await checks.run(Kube(), dep, verify, "rev", None)
    out["first_call_s"] = round(time.monotonic() - start, 3)
    while run is None:
        await asyncio.sleep(0.01)
        run = await checks.run(Kube(), dep, verify, "rev", None)
    out["answers_after_s"] = round(time.monotonic() - start, 3)
    out["verdict_answer"] = run.answers[0].error
    print(json.dumps(out))

asyncio.run(main())
"""


async def big(request: web.Request, mib: int) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    try:
        await resp.write(b'{"text_output": "')
        chunk = b"x" * 2**20
        for _ in range(mib):
            await resp.write(chunk)
        await resp.write(b'"}')
    except (ConnectionError, RuntimeError):
        pass  # the client stopped reading
    return resp


async def silent(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(3600)
    return web.Response()


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, shutdown_timeout=0, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=300)
    parser.add_argument("--source", action="append", default=[])
    args = parser.parse_args()
    big_app, silent_app = web.Application(), web.Application()
    big_app.router.add_route("*", "/{tail:.*}", lambda r: big(r, args.mib))
    silent_app.router.add_route("*", "/{tail:.*}", silent)
    (big_runner, big_port), (silent_runner, silent_port) = await serve(big_app), await serve(
        silent_app)
    for source in args.source or [str(ROOT)]:
        env = {**os.environ, "PYTHONPATH": f"{source}/operator", "BIG_PORT": str(big_port),
               "SILENT_PORT": str(silent_port)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, env=env, stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        print(json.dumps({"source": source, **json.loads(out or b"{}")}))
    for runner in (big_runner, silent_runner):
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
