"""The GPU recipe: the in-pod runtime on real NVIDIA GPUs (scripts/gpu-check, docs/gpu.md).

Not a pytest module and not in CI: it runs on a machine with GPUs, Open MPI and a python3 with
PyTorch, with nothing but this repository and the carried files (.gpu-carry: the nvidia-pytriton
wheel and the few Python packages python3 lacks there). World size = the GPUs it sees (--tp).

1. `tritonllm build` (the zipapp under python -S) of the build plan the operator renders for a
   tp=N CR, with the fake TensorRT-LLM tools (tests/fake_trtllm.py) but the REAL nvidia-smi:
   artifact.json must record the GPU product (name and nvidia.com/gpu.product label) and count.
2. `tritonllm launch --mode single` refuses an engine built on another GPU product and one of
   another world size, with the errors the CPU tests expect, before starting mpirun.
3. `tritonllm launch` of the launch plan rendered for that CR (tests/triton/stack.py: only
   binary, ports and repository adapted) starts mpirun with world size N: a tritonserver per rank,
   the GPU stand-in (tests/triton/standin/tensorrt_llm_gpu_standin.py, a tensor-parallel toy
   with an NCCL all-reduce per token, NOT TensorRT-LLM) on cuda:<local rank> of each.
4. Checks: one rank per GPU (by UUID), the ranks' CPU affinity, answers of HTTP generate and
   generate_stream and of gRPC (tritonclient) against the toy's unsharded reference, Triton's
   nv_gpu_* metrics on rank 0 covering exactly its pod's GPUs, each moving, and the inference
   counters moving; in a group, the worker pods' GPUs busy in nvidia-smi.
5. Figures (stand-in figures, not TensorRT-LLM): launch to ready, generate latency and tokens/s
   at each concurrency, GPU memory per process; with --on gpu,cpu the same again with the
   stand-in on the CPU (gloo), to show what the stand-in itself measures.

With --pods 2 (tests/gpu/pods.py), step 3 is the multi-node launch of a LeaderWorkerSet group:
leader and worker `tritonllm launch` each in its own network namespace of this host, mpirun over
SSH between them, world/2 ranks and GPUs per pod; the checks add the group's start (login check,
hostfile, rank map), each rank in its pod, and the group's drain.

With --on llmapi (tests/gpu/llmapi.py), runtime llmapi instead: the rendered llmapi repository
and launch plan, with a SIMULATED LLM API computing a Llama (Llama-2-7B's architecture, random
weights) tensor parallel on the GPUs, its answers checked against transformers, unsharded.

With --openai (tests/gpu/openai_check.py), each single-pod stack also gets the product's OpenAI
frontend (`tritonllm openai`, the FrontendConfig the operator renders for the CR) and the clients
people run against it: the `openai` SDK (answers = Triton's own, usage, errors) and NVIDIA's
aiperf at --openai-levels, beside `tritonllm bench --api openai`.

Prints one `check ok|FAIL <name>: <detail>` line per check and writes figures.json to --out;
exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from bench.triton_pipeline import PROMPT, drive, pct

from tests.fake_trtllm import FakeImage, relocate, write_plan
from tests.gpu import openai_check, pods
from tests.gpu.pods import PodsStack
from tests.helpers import (
    cmdline,
    cpus_allowed,
    descendants,
    example,
    free_ports,
    grpc_inputs,
    grpc_stream,
    pyz_archive,
)
from tests.triton.stack import (
    GPU_STANDIN,
    STANDIN,
    OnGpus,
    Server,
    Stack,
    TritonInstall,
    carried_install,
    ensure_install,
    launch_env,
    make_tokenizer,
    ranks_of,
    run_stack,
)
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import render_all
from tritonllm.runtime.probes import product_label

EXAMPLE = "gpt2-medium"
T = TypeVar("T")
SPECIAL = ("<pad>", "<unk>", "</s>", "<s>")  # tests/triton/make_tokenizer.py
OTHER_GPU = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")  # an engine "built elsewhere"

# --- pure helpers (tests/unit/test_gpu_check.py) -------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """Prometheus text format, samples only (comments and HELP/TYPE lines skipped)."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or line.startswith("#"):
            continue
        out.append(Sample(m.group(1), dict(_LABEL.findall(m.group(2) or "")),
                          float(m.group(3))))
    return out


def by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    """{label value: sample value} of one metric, e.g. nv_gpu_utilization by gpu_uuid."""
    return {s.labels[label]: s.value for s in samples if s.name == name and label in s.labels}


def total(samples: list[Sample], name: str, **match: str) -> float:
    return sum(s.value for s in samples
               if s.name == name and all(s.labels.get(k) == v for k, v in match.items()))


def parse_standin_lines(log: str) -> list[dict[str, str]]:
    """The stand-in's `tritonllm-standin k=v ...` lines (mpirun's [1,r]<stderr>: tag ignored)."""
    out = []
    for line in log.splitlines():
        _, sep, rest = line.partition("tritonllm-standin ")
        if sep:
            out.append(dict(f.split("=", 1) for f in rest.split() if "=" in f))
    return out


def placement_problems(lines: list[dict[str, str]], world: int,
                       gpus: list[tuple[int, str]]) -> list[str]:
    """What is wrong with the ranks' placement: one rank per GPU, rank r on cuda:r (one pod),
    each on a distinct GPU that nvidia-smi lists under index r (same product: same order)."""
    problems = []
    ranks = sorted(int(line["rank"]) for line in lines)
    if ranks != list(range(world)):
        problems.append(f"stand-in ranks {ranks}, expected 0..{world - 1}")
    index_of = {uuid: index for index, uuid in gpus}
    seen: dict[str, int] = {}
    for line in lines:
        rank = int(line["rank"])
        if line.get("device") != f"cuda:{rank}" or line.get("local_rank") != str(rank):
            problems.append(f"rank {rank} on {line.get('device')} (local rank "
                            f"{line.get('local_rank')}), expected cuda:{rank}")
        uuid = line.get("uuid", "")
        if uuid in seen:
            problems.append(f"ranks {seen[uuid]} and {rank} share GPU {uuid}")
        seen[uuid] = rank
        if index_of.get(uuid) != rank:
            problems.append(f"rank {rank} runs on {uuid}, nvidia-smi index "
                            f"{index_of.get(uuid)}")
    return problems


def compute_apps(csv: str) -> list[tuple[int, float, str]]:
    """nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits."""
    out = []
    for line in csv.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[0].isdigit():
            out.append((int(fields[0]), float(fields[1]), fields[2]))
    return out


def words(ids: list[int], vocab: dict[str, int]) -> list[str]:
    """Decoded tokens as the postprocessing model returns them one by one (specials: "")."""
    by_id = {i: w for w, i in vocab.items()}
    return ["" if by_id[i] in SPECIAL else by_id[i] for i in ids]


def text_of(ids: list[int], vocab: dict[str, int]) -> str:
    return " ".join(w for w in words(ids, vocab) if w)


def figure_rows(results: list[dict[str, Any]]) -> list[str]:
    """A fixed-width table of the figures (one row per device x endpoint x concurrency)."""
    rows = [f"{'stand-in on':<11} {'endpoint':<16} {'conc':>4} {'req/s':>8} {'tok/s':>9} "
            f"{'p50 ms':>8} {'p95 ms':>8} {'ttft p50':>8} {'n':>6} {'err':>4}"]
    for r in results:
        ttft = f"{r['ttft_p50_ms']:8.1f}" if r.get("ttft_p50_ms") is not None else f"{'-':>8}"
        rows.append(f"{r['device']:<11} {r['endpoint']:<16} {r['concurrency']:>4} "
                    f"{r['requests_per_s']:8.1f} {r['tokens_per_s']:9.1f} {r['p50_ms']:8.1f} "
                    f"{r['p95_ms']:8.1f} {ttft} {r['requests']:>6} {r['errors']:>4}")
    return rows


# --- the checks ----------------------------------------------------------------------------------


class Checks:
    def __init__(self) -> None:
        self.results: list[tuple[str, bool, str]] = []

    def __call__(self, name: str, ok: bool, detail: Any = "") -> bool:
        self.results.append((name, bool(ok), str(detail)))
        print(f"check {'ok' if ok else 'FAIL'} {name}: {detail}", flush=True)
        return bool(ok)

    def guarded(self, name: str, step: Callable[..., Any], *args: Any) -> Any:
        """Run a step; an exception in it is a failed check, and the recipe goes on."""
        try:
            return step(*args)
        except Exception as exc:
            self(name, False, f"{type(exc).__name__}: {exc}")
            return None

    @property
    def failed(self) -> list[str]:
        return [name for name, ok, _ in self.results if not ok]


def say(*parts: Any) -> None:
    print(*parts, flush=True)


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, check=False)


def smi(*args: str) -> list[str]:
    return run("nvidia-smi", *args).stdout.strip().splitlines()


def gpu_readings(lines: list[str]) -> dict[str, tuple[float, float]]:
    """{uuid: (utilization as a fraction, memory used in bytes)} from nvidia-smi
    --query-gpu=uuid,utilization.gpu,memory.used --format=csv,noheader,nounits."""
    out = {}
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[0].startswith("GPU-"):
            with contextlib.suppress(ValueError):  # "[N/A]"
                out[fields[0]] = (float(fields[1]) / 100, float(fields[2]) * 2**20)
    return out


def gpus_busy() -> dict[str, tuple[float, float]]:
    return gpu_readings(smi("--query-gpu=uuid,utilization.gpu,memory.used",
                            "--format=csv,noheader,nounits"))


def gpus_listed() -> list[tuple[int, str, str]]:
    """(index, name, uuid) of every GPU nvidia-smi lists."""
    out = []
    for line in smi("--query-gpu=index,name,uuid", "--format=csv,noheader"):
        index, name, uuid = (f.strip() for f in line.split(","))
        out.append((int(index), name, uuid))
    return out


def facts() -> dict[str, Any]:
    import torch

    info = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpus": smi("--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version",
                    "--format=csv,noheader"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "nccl": str(torch.cuda.nccl.version()) if torch.cuda.is_available() else None,
        "mpirun": run("mpirun", "--version").stdout.splitlines()[:1],
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("CUDA_", "NVIDIA_VISIBLE", "NCCL_", "OMPI_"))},
    }
    for key, value in info.items():
        say(f"fact {key}: {value}")
    return info


PREFLIGHT = """
import traceback
try:
    import numpy, torch, transformers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    print("numpy", numpy.__version__, "torch", torch.__version__, "transformers",
          transformers.__version__)
except Exception as exc:
    while exc is not None:
        traceback.print_exception(exc, chain=False)
        exc = exc.__cause__ or exc.__context__
    raise SystemExit(1)
"""


def preflight(install: TritonInstall, check: Checks) -> None:
    """What the stubs will import, by the interpreter they embed (PYTHONPATH ignored there)."""
    env = {k: v for k, v in install.env.items() if k != "PYTHONPATH"}
    out = run(str(install.python), "-c", PREFLIGHT, env=env)
    check("the models' python imports numpy, torch and transformers' AutoTokenizer",
          out.returncode == 0, (out.stdout + out.stderr).strip()[-3000:])


# --- 1. build ------------------------------------------------------------------------------------


def build(dep: TritonLLMDeployment, root: Path, pyz: Path, check: Checks, gpus: int,
          expect_product: str | None) -> Path:
    """`tritonllm build` with the fake TensorRT-LLM tools and the real nvidia-smi."""
    img = FakeImage(root / "image", pyz)
    (img.bin / "nvidia-smi").unlink()  # the machine's own
    plan: dict[str, Any] = relocate(render_all(dep).build_plan, img.root)
    plan["exampleRoots"] = [str(img.examples)]
    img.set_trtllm_version(plan["trtllmVersion"])
    path = write_plan(img.root / "etc/build.json", plan)
    env = img.env(PATH=f"{img.bin}:{os.environ['PATH']}",
                  FAKE_TRTLLM_VERSION=plan["trtllmVersion"])
    env.pop("FAKE_GPUS")
    started = time.monotonic()
    out = img.tritonllm("build", "--plan", str(path), env=env, timeout=300)
    say(out.stdout + out.stderr)
    check("build exits 0", out.returncode == 0, f"exit {out.returncode} in "
          f"{time.monotonic() - started:.1f}s")
    engine = Path(plan["engineDir"])
    artifact = json.loads((engine / "artifact.json").read_text())
    say("artifact.json:", json.dumps({k: v for k, v in artifact.items() if k != "steps"}))
    (_, name, _), *_ = gpus_listed()
    check("artifact records nvidia-smi's GPU name", artifact["gpuProduct"] == name,
          artifact["gpuProduct"])
    check("artifact records the product label", artifact["gpuProductLabel"] == product_label(name)
          and (expect_product is None or artifact["gpuProductLabel"] == expect_product),
          f"{artifact['gpuProductLabel']} (expected {expect_product or product_label(name)})")
    check("artifact records the GPU count", artifact["gpuCount"] == gpus,
          f"{artifact['gpuCount']} (nvidia-smi lists {gpus})")
    check("artifact tp x pp = world size", artifact["worldSize"] == dep.spec.world_size
          and artifact["tensorParallel"] == dep.spec.world_size, artifact["worldSize"])
    trtllm_meta = root / "trtllm-metadata"  # the image's TensorRT-LLM version, nothing else
    for info in img.site.glob("tensorrt_llm-*.dist-info"):
        shutil.copytree(info, trtllm_meta / info.name)
    return engine


# --- 2. refusals ---------------------------------------------------------------------------------


def refusals(dep: TritonLLMDeployment, root: Path, pyz: Path, engine: Path, repo_env: OnGpus,
             install: TritonInstall, check: Checks) -> None:
    """launch refuses an engine of another GPU product and one of another world size."""
    name = gpus_listed()[0][1]
    other = next(o for o in OTHER_GPU if product_label(o) != product_label(name))
    world = dep.spec.world_size
    other_tp = 2 if world == 1 else 1
    cases = {
        "other-gpu": ({"gpuProduct": other}, None,
                      f"the engine was built on {other} but this pod runs on {name}"),
        "other-world": ({"tensorParallel": other_tp, "pipelineParallel": 1,
                         "worldSize": other_tp}, other_tp,
                        f"built for tp={other_tp} x pp=1 = {other_tp} ranks but this deployment "
                        f"runs world size {world}"),
    }
    repo = root / "refusal-repository"
    repo.mkdir(parents=True, exist_ok=True)
    for case, (changes, config_tp, message) in cases.items():
        variant = root / f"engine-{case}"
        shutil.copytree(engine, variant)
        artifact = json.loads((variant / "artifact.json").read_text())
        (variant / "artifact.json").write_text(json.dumps({**artifact, **changes}))
        if config_tp is not None:
            config = json.loads((variant / "config.json").read_text())
            config["pretrained_config"]["mapping"]["tp_size"] = config_tp
            (variant / "config.json").write_text(json.dumps(config))
        plan = {**render_all(dep).launch_plan, "engineDir": str(variant),
                "modelRepository": str(repo)}
        path = write_plan(root / f"launch-{case}.json", plan)
        env = launch_env(install, gpus=True) | dict(repo_env.env)
        out = run(sys.executable, "-S", str(pyz), "launch", "--mode", "single", "--plan",
                  str(path), env=env)
        text = out.stdout + out.stderr
        say(text.strip())
        check(f"launch refuses an engine of {case}", out.returncode == 14 and message in text
              and "event=exec" not in text, f"exit {out.returncode}")


# --- 3./4. the stack -----------------------------------------------------------------------------


def post(server: Server, path: str, body: dict[str, Any], timeout: float = 60) -> bytes:
    request = urllib.request.Request(server.url(path), data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return bytes(response.read())


def metrics(server: Server) -> list[Sample]:
    with urllib.request.urlopen(f"http://{server.metrics}/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())


def stream_outputs(server: Server, model: str, inputs: list[tuple[str, str, Any]],
                   output: str, only: bool = False) -> list[Any]:
    """Every response's `output` of one decoupled gRPC stream request (tritonclient); with
    `only`, the request asks for that output alone (as gRPC clients do)."""
    results = grpc_stream(server.grpc, model, inputs, outputs=[output] if only else None)
    return [value for result in results if (value := result.as_numpy(output)) is not None]


def grpc_infer(server: Server, model: str, inputs: list[tuple[str, str, Any]],
               output: str) -> Any:
    """One non-streaming gRPC request (tritonclient): the output as numpy."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        return client.infer(model, grpc_inputs(inputs)).as_numpy(output)
    finally:
        client.close()


def answers(stack: Stack, vocab: dict[str, int], check: Checks, tag: str) -> None:
    import numpy as np

    from tests.triton.standin.tensorrt_llm_gpu_toy import reference_tokens

    prompt = [vocab["<s>"], *(vocab[w] for w in PROMPT.split())]
    n = 12
    ref = reference_tokens(prompt, n, end_id=vocab["</s>"])
    say(f"reference (unsharded, CPU): prompt {prompt} -> {ref} = {text_of(ref, vocab)!r}")
    check("the toy's reference answer is not trivial", len(set(ref)) > 1, ref)
    server = stack.server
    for model in ("ensemble", "tensorrt_llm_bls"):
        out = json.loads(post(server, f"/v2/models/{model}/generate",
                              {"text_input": PROMPT, "max_tokens": n}))
        check(f"[{tag}] HTTP generate ({model}) = reference",
              out["text_output"] == text_of(ref, vocab), repr(out["text_output"]))
    ids_in = [("input_ids", "INT32", np.array([prompt], np.int32)),
              ("input_lengths", "INT32", np.array([[len(prompt)]], np.int32)),
              ("request_output_len", "INT32", np.array([[n]], np.int32))]
    if not stack.plan.get("decoupled"):
        text = grpc_infer(server, "ensemble", [
            ("text_input", "BYTES", np.array([[PROMPT.encode()]], object)),
            ("max_tokens", "INT32", np.array([[n]], np.int32))], "text_output")
        got_text = text.reshape(-1)[0].decode()
        check(f"[{tag}] gRPC infer (tritonclient, ensemble) = reference",
              got_text == text_of(ref, vocab), repr(got_text))
        ids = grpc_infer(server, "tensorrt_llm", ids_in, "output_ids")
        tokens = [int(t) for t in ids.reshape(-1)]
        check(f"[{tag}] gRPC tensorrt_llm output_ids = unsharded reference (bit-exact "
              "all-reduce)", tokens == ref, tokens)
        return
    body = post(server, "/v2/models/ensemble/generate_stream",
                {"text_input": PROMPT, "max_tokens": n, "stream": True}).decode()
    events = [json.loads(line[len("data: "):]) for line in body.splitlines()
              if line.startswith("data: ")]
    texts = [e.get("text_output") for e in events]
    check(f"[{tag}] HTTP generate_stream = reference, one event per token",
          texts == words(ref, vocab) and not [e for e in events if "error" in e], texts)
    streamed = stream_outputs(server, "ensemble", [
        ("text_input", "BYTES", np.array([[PROMPT.encode()]], object)),
        ("max_tokens", "INT32", np.array([[n]], np.int32)),
        ("stream", "BOOL", np.array([[True]], bool))], "text_output")
    got = [v.reshape(-1)[0].decode() for v in streamed]
    check(f"[{tag}] gRPC stream (tritonclient, ensemble) = reference",
          got == words(ref, vocab), got)
    for model in ("ensemble", "tensorrt_llm_bls"):  # a subset of the outputs: they are pruned
        streamed = stream_outputs(server, model, [
            ("text_input", "BYTES", np.array([[PROMPT.encode()]], object)),
            ("max_tokens", "INT32", np.array([[n]], np.int32)),
            ("stream", "BOOL", np.array([[True]], bool))], "text_output", only=True)
        got = [v.reshape(-1)[0].decode() for v in streamed]
        check(f"[{tag}] gRPC stream ({model}, text_output only) = reference",
              got == words(ref, vocab), got)
    ids = stream_outputs(server, "tensorrt_llm", ids_in, "output_ids")
    tokens = [int(t) for v in ids for t in v.reshape(-1)]
    check(f"[{tag}] gRPC stream tensorrt_llm output_ids = unsharded reference (bit-exact "
          "all-reduce)", tokens == ref, tokens)


def placement(stack: Stack, world: int, check: Checks) -> None:
    log = stack.log.read_text(errors="replace")
    lines = parse_standin_lines(log)
    for line in lines:
        say("rank:", line)
    gpus = [(index, uuid) for index, _, uuid in gpus_listed()]
    problems = placement_problems(lines, world, gpus)
    check("one rank per GPU, rank r on cuda:r = nvidia-smi index r", not problems,
          problems or [(line["rank"], line["uuid"]) for line in lines])
    ranks = ranks_of(stack)
    pod = cpus_allowed(stack.launch.pid)
    affinity = {f"rank{r}": sorted({cpus_allowed(p) for p in [pid, *ranks.stub_pids(r)]})
                for r, pid in enumerate(ranks.tritonserver)}
    check("no rank bound to a core (mpirun --bind-to none)",
          all(a == [pod] for a in affinity.values()), f"launcher {pod}, ranks {affinity}")
    apps = compute_apps("\n".join(smi("--query-compute-apps=pid,used_memory,gpu_uuid",
                                      "--format=csv,noheader,nounits")))
    on = {int(line["pid"]): sorted(u for p, _, u in apps if p == int(line["pid"]))
          for line in lines}
    check("each rank's stand-in process holds memory on its own GPU only (nvidia-smi)",
          all(on[int(line["pid"])] == [line.get("uuid")] for line in lines), on)


@contextlib.contextmanager
def sampling(read: Callable[[], T], every: float = 0.5) -> Iterator[list[T]]:
    """`read()` (rank 0's metrics, nvidia-smi's readings) taken in the background while the
    block runs."""
    samples: list[T] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            with contextlib.suppress(OSError, ValueError):
                samples.append(read())

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


def memory_per_process(stack: Stack | PodsStack,
                       gpus: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    if isinstance(stack, PodsStack):
        servers = {r: pid for r, (pid, _) in stack.servers().items()}
    else:
        servers = dict(enumerate(ranks_of(stack).tritonserver))
    roles = {}
    for r, pid in servers.items():
        roles[pid] = f"rank{r} tritonserver"
        for stub in descendants(pid):
            argv = cmdline(stub)
            if argv[:1] and argv[0].endswith("triton_python_backend_stub"):
                model = Path(argv[1]).parent.parent.name if argv[1:] else "?"
                roles[stub] = f"rank{r} stub {model}"
    index = {uuid: i for i, _, uuid in gpus}
    return [{"gpu": index.get(uuid), "process": roles.get(pid, str(pid)), "mib": mib}
            for pid, mib, uuid in compute_apps("\n".join(smi(
                "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits")))]


def figures(stack: Stack, device: str, levels: list[int], seconds: float, max_tokens: int,
            check: Checks) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`device` names the stack in the figures (gpu, cpu, gpu+stream, ...)."""
    results = []
    with sampling(lambda: metrics(stack.server)) as idle:
        time.sleep(3)  # idle: a worker rank waits on the CPU, not in a GPU kernel
    idle_util: dict[str, float] = {}
    for snapshot in idle:
        for uuid, value in by_label(snapshot, "nv_gpu_utilization", "gpu_uuid").items():
            idle_util[uuid] = max(value, idle_util.get(uuid, 0))
    before = metrics(stack.server)
    # nvidia-smi sees every GPU of the host, the worker pods' too (rank 0's metrics do not).
    with sampling(lambda: metrics(stack.server)) as samples, sampling(gpus_busy) as busy:
        for stream in (False, True) if stack.plan.get("decoupled") else (False,):
            for level in levels:
                s, elapsed = drive(stack.server, stream=stream, concurrency=level,
                                   seconds=seconds, max_tokens=max_tokens)
                results.append({
                    "device": device,
                    "endpoint": "generate_stream" if stream else "generate",
                    "concurrency": level, "requests": len(s.latency), "errors": s.errors,
                    "requests_per_s": len(s.latency) / elapsed,
                    "tokens_per_s": len(s.latency) * max_tokens / elapsed,
                    "p50_ms": pct(s.latency, 50) * 1000, "p95_ms": pct(s.latency, 95) * 1000,
                    "ttft_p50_ms": pct(s.first, 50) * 1000 if stream else None,
                })
                say(figure_rows(results[-1:])[-1])
    after = metrics(stack.server)
    check(f"[{device}] no request failed", not [r for r in results if r["errors"]],
          [(r["endpoint"], r["concurrency"], r["errors"]) for r in results])
    gauges: dict[str, dict[str, float]] = {"utilization_idle_max": idle_util,
                                           "utilization_max": {}, "memory_used_max_bytes": {}}
    for snapshot in samples:
        for uuid, value in by_label(snapshot, "nv_gpu_utilization", "gpu_uuid").items():
            gauges["utilization_max"][uuid] = max(value, gauges["utilization_max"].get(uuid, 0))
        for uuid, value in by_label(snapshot, "nv_gpu_memory_used_bytes", "gpu_uuid").items():
            old = gauges["memory_used_max_bytes"].get(uuid, 0)
            gauges["memory_used_max_bytes"][uuid] = max(value, old)
    counters = {name: {model: total(after, name, model=model) - total(before, name, model=model)
                       for model in ("ensemble", "tensorrt_llm")}
                for name in ("nv_inference_request_success", "nv_inference_count",
                             "nv_inference_exec_count", "nv_inference_queue_duration_us",
                             "nv_inference_compute_infer_duration_us")}
    smi_max: dict[str, dict[str, float]] = {"utilization_max": {}, "memory_used_max_bytes": {}}
    for reading in busy:
        for uuid, (util, used) in reading.items():
            smi_max["utilization_max"][uuid] = max(util, smi_max["utilization_max"].get(uuid, 0))
            old = smi_max["memory_used_max_bytes"].get(uuid, 0)
            smi_max["memory_used_max_bytes"][uuid] = max(used, old)
    say(f"[{device}] metrics during the load: {json.dumps(gauges)}")
    say(f"[{device}] nvidia-smi during the load: {json.dumps(smi_max)}")
    say(f"[{device}] counter increases: {json.dumps(counters)}")
    return results, {"gauges": gauges, "smi": smi_max, "counters": counters,
                     "pending_request_count_present": any(
                         s.name == "nv_inference_pending_request_count" for s in after)}


def metric_checks(seen: dict[str, Any], gpus: list[tuple[int, str, str]],
                  baseline_memory: dict[str, float], check: Checks,
                  pod_devices: tuple[int, ...] | None = None) -> None:
    """Rank 0's Triton metrics cover the GPUs of its own pod (`pod_devices`, nvidia-smi indices;
    None: one pod, all of them): the other ranks run with metrics off, so in a group the worker
    pods' GPUs are not Triton's to report (DCGM's exporter's, docs/observability.md). Those are
    proven busy by nvidia-smi instead."""
    mine = [uuid for i, _, uuid in gpus if pod_devices is None or i in pod_devices]
    others = [uuid for _, _, uuid in gpus if uuid not in mine]
    util = seen["gauges"]["utilization_max"]
    memory = seen["gauges"]["memory_used_max_bytes"]
    check("rank 0's nv_gpu_* series cover exactly its pod's GPUs",
          set(util) == set(memory) == set(mine),
          {"pod": mine, "utilization": sorted(util), "memory": sorted(memory)})
    check("nv_gpu_utilization moves on every GPU of rank 0's pod",
          all(util.get(u, 0) > 0 for u in mine), util)
    check("nv_gpu_memory_used_bytes above the idle GPU on every GPU of rank 0's pod",
          all(memory.get(u, 0) > baseline_memory.get(u, 0) for u in mine),
          {u: (baseline_memory.get(u), memory.get(u)) for u in mine})
    if others:
        smi_util = seen["smi"]["utilization_max"]
        smi_memory = seen["smi"]["memory_used_max_bytes"]
        check("the worker pods' GPUs busy in nvidia-smi (utilization, memory above idle)",
              all(smi_util.get(u, 0) > 0 and smi_memory.get(u, 0) > baseline_memory.get(u, 0)
                  for u in others),
              {u: (smi_util.get(u), baseline_memory.get(u), smi_memory.get(u)) for u in others})
    counters = seen["counters"]
    check("inference counters move (success, count, queue and compute time)",
          all(v > 0 for name in counters for v in counters[name].values()), counters)
    check("nv_inference_pending_request_count is exported (autoscaling metric)",
          seen["pending_request_count_present"], "")


def run_bench(stack: Stack, tag: str, args: argparse.Namespace, report: dict[str, Any],
              check: Checks) -> None:
    """`tritonllm bench` (its library, as the command calls it) against this stack's gRPC
    endpoint: the product's benchmark on a GPU machine, through the stand-in."""
    from tritonllm.cli import bench

    levels = [int(x) for x in args.bench.split(",")]
    load = bench.Load(max_tokens=args.max_tokens, prompt="the quick brown fox jumps over")
    result = bench.bench(stack.server.grpc, load, levels, args.bench_requests)
    say(f"[{tag}] tritonllm bench ({'streaming' if result['streaming'] else 'not decoupled'}, "
        f"max_tokens {load.max_tokens}, {args.bench_requests} requests per level; times in ms)")
    for line in bench.table(result["levels"]).splitlines():
        say(f"[{tag}] {line}")
    report.setdefault("bench", {})[tag] = result
    check(f"[{tag}] tritonllm bench: no request failed",
          not any(level["errors"] for level in result["levels"]),
          [(level["concurrency"], level["errors"]) for level in result["levels"]])


def serve(started: contextlib.AbstractContextManager[Any], dep: TritonLLMDeployment, tag: str,
          vocab: dict[str, int], gpus: list[tuple[int, str, str]], idle: dict[str, float],
          args: argparse.Namespace, report: dict[str, Any], check: Checks,
          placed: Callable[[Any], None] | None) -> Any:
    """One stack (a pod, or a group of pods): launch, `placed` (the placement checks), answers,
    figures, memory; then SIGTERM and the launcher's exit code. Returns the stopped stack."""
    with started as stack:
        stack.plan["decoupled"] = dep.spec.serving.streaming
        say(f"launch to ready: {stack.ready_seconds:.1f}s")
        say("argv:", " ".join(stack.plan["argv"]))
        report["ready_seconds"][tag] = round(stack.ready_seconds, 1)
        if placed is not None:
            check.guarded(f"[{tag}] placement", placed, stack)
        check.guarded(f"[{tag}] answers", answers, stack, vocab, check, tag)
        levels = [int(x) for x in args.concurrency.split(",")]
        measured = check.guarded(f"[{tag}] figures", figures, stack, tag, levels,
                                 args.seconds, args.max_tokens, check)
        if measured is not None:
            report["figures"] += measured[0]
            report["metrics"][tag] = measured[1]
            if tag == "gpu":
                leader = stack.group.leader.devices if isinstance(stack, PodsStack) else None
                check.guarded("metrics", metric_checks, measured[1], gpus, idle, check, leader)
        if args.bench:
            check.guarded(f"[{tag}] tritonllm bench", run_bench, stack, tag, args, report, check)
        if args.openai and not isinstance(stack, PodsStack):
            check.guarded(f"[{tag}] openai", openai_check.run, tag, dep, stack.server.grpc,
                          args.tokenizer_dir, args.max_tokens, args, report, check, say)
        report["memory"][tag] = memory_per_process(stack, gpus)
        for row in report["memory"][tag]:
            say(f"[{tag}] GPU memory: GPU {row['gpu']} {row['process']}: {row['mib']} MiB")
    stopped = stack.launch.returncode
    check(f"[{tag}] SIGTERM drains and launch exits 0", stopped == 0, f"exit {stopped}")
    return stack


# --- two pods (--pods 2) -------------------------------------------------------------------------


def group_placement(stack: PodsStack, per_pod: int, uuids: dict[int, str] | None,
                    check: Checks, tag: str) -> None:
    """The group's start in the leader's log, every rank a tritonserver in its own pod (network
    namespace, pod user), the stand-in's ranks on their pods' hosts and GPUs."""
    log = stack.log.read_text(errors="replace")
    for name, problems in pods.group_problems(log, stack.group, per_pod).items():
        check(f"[{tag}] {name}", not problems, problems or {
            "login": [e for e in pods.launch_events(log, "worker-ready")],
            "hostfile": [e.get("hosts") for e in pods.launch_events(log, "hostfile")],
            "rank map": pods.display_map(log)}[name])
    servers = stack.servers()
    expected = {r: stack.group.pods[r // per_pod].name for r in range(stack.spec.world_size)}
    check(f"[{tag}] every rank a tritonserver in its own pod's network namespace, as the pod "
          f"user (UID {stack.uid})",
          {r: pod for r, (_, pod) in servers.items()} == expected
          and all(pods.uid_of(pid) == stack.uid for pid, _ in servers.values()),
          {r: (pid, pod, pods.uid_of(pid)) for r, (pid, pod) in servers.items()})
    lines = parse_standin_lines(log)
    for line in lines:
        say("rank:", line)
    shared = len({d for pod in stack.group.pods for d in pod.devices}) < stack.spec.world_size
    problems = pods.pod_placement_problems(lines, stack.group, per_pod, uuids, shared=shared)
    what = "rank r on its pod's host" + (", on cuda:<local rank> = its pod's own GPU"
                                         if uuids is not None else "")
    what += " (the pods share the GPUs)" if shared and uuids is not None else ""
    check(f"[{tag}] {what}", not problems,
          problems or [(line["rank"], line.get("host"), line.get("uuid")) for line in lines])
    if uuids is not None:
        apps = compute_apps("\n".join(smi("--query-compute-apps=pid,used_memory,gpu_uuid",
                                          "--format=csv,noheader,nounits")))
        on = {int(line["pid"]): sorted(u for p, _, u in apps if p == int(line["pid"]))
              for line in lines}
        check(f"[{tag}] each rank's stand-in process holds memory on its own GPU only",
              all(on[int(line["pid"])] == [line.get("uuid")] for line in lines), on)


def serve_group(install: TritonInstall, dep: TritonLLMDeployment, root: Path, tokenizer: Path,
                pyz: Path, on: OnGpus, tag: str, group: pods.Group, keys: Path,
                vocab: dict[str, int], gpus: list[tuple[int, str, str]],
                idle: dict[str, float], args: argparse.Namespace, report: dict[str, Any],
                check: Checks) -> None:
    """The group's stack in two pods; after the leader's SIGTERM, the worker's."""
    per_pod = dep.spec.world_size // len(group.pods)
    uuids = {i: uuid for i, _, uuid in gpus} if tag.startswith("gpu") else None
    started = pods.run_pods(install, dep, root, tokenizer, pyz, group, keys, on=on, env={},
                            homes=args.work / "pods", uid=args.pod_uid)
    stack = serve(started, dep, tag, vocab, gpus, idle, args, report, check,
                  lambda s: group_placement(s, per_pod, uuids, check, tag))
    if stack is None:
        return
    log = stack.log.read_text(errors="replace")
    check(f"[{tag}] the leader ended the group after its ranks drained",
          any(e.get("ended") == "group" for e in pods.launch_events(log, "drain")),
          pods.launch_events(log, "drain"))
    check(f"[{tag}] the worker's launch exits 0 on SIGTERM (sshd stopped)",
          stack.worker.returncode == 0, f"exit {stack.worker.returncode}")
    left = [(pid, argv[-1]) for pid, argv in pods.tritonservers()
            if any(pods.netns_inode(pid) == pods.named_netns_inode(p.netns)
                   for p in group.pods)]
    check(f"[{tag}] no rank left in either pod", not left, left)


def host_tools(carry: Path, work: Path) -> None:
    """OpenSSH's ssh and sshd and iproute2's ip, carried (scripts/gpu-check prepare) for a GPU
    host that has none: unpacked and put first on PATH, for this process and the pods."""
    packed = carry / "host-tools.tar.xz"
    if not packed.exists():
        return
    with tarfile.open(packed) as tar:
        tar.extractall(work / "host-tools", filter="tar")
    os.environ["PATH"] = f"{work / 'host-tools' / 'bin'}:{os.environ['PATH']}"
    say(f"host tools: {sorted(p.name for p in (work / 'host-tools' / 'bin').iterdir())}")


def mpi_keys(carry: Path, work: Path) -> Path:
    """The deployment's MPI SSH keys as the operator generates them (tritonllm.render.mpi):
    carried (prepare made them, with `cryptography`), else made here."""
    if (carry / "mpi-ssh").is_dir():
        return carry / "mpi-ssh"
    from tritonllm.render.mpi import ssh_key_pairs

    keys = work / "mpi-ssh-keys"
    keys.mkdir(parents=True, exist_ok=True)
    for name, text in ssh_key_pairs().items():
        (keys / name).write_text(text)
    return keys


# --- main ----------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--carry", type=Path, default=Path(".gpu-carry"),
                    help="folder with the nvidia-pytriton wheel (else the triton tier's venv)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/tritonllm-gpu-check"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check-out")))
    ap.add_argument("--tp", type=int, default=0, help="world size (default: the GPUs listed)")
    ap.add_argument("--expect-product", help="nvidia.com/gpu.product label to expect")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--bench", metavar="LEVELS",
                    help="also run `tritonllm bench` at these comma-separated concurrencies")
    ap.add_argument("--bench-requests", type=int, default=64, help="requests per bench level")
    ap.add_argument("--echo-standin", action="store_true",
                    help="serve the CPU tier's echo stand-in instead (no PyTorch in the models)")
    ap.add_argument("--on", default="gpu",
                    help="one stack each, comma-separated: gpu or cpu (where the stand-in "
                    "computes; cpu: gloo), +stream (serving.streaming: decoupled), +nopool "
                    "(no CUDA memory pool in tritonserver); e.g. gpu,cpu,gpu+stream; llmapi: "
                    "runtime llmapi with the LLM-API stand-in (a Llama in PyTorch, tests/gpu/"
                    "llmapi.py)")
    ap.add_argument("--llmapi-layers", type=int, default=None,
                    help="llmapi: decoder layers of the Llama-2-7B architecture (default 32)")
    ap.add_argument("--llmapi-tokens", type=int, default=16,
                    help="llmapi: tokens compared with the reference per prompt")
    ap.add_argument("--llmapi-max-tokens", type=int, default=32,
                    help="llmapi: max_tokens of each `tritonllm bench` request")
    ap.add_argument("--llmapi-model-py", type=Path, default=None,
                    help="llmapi: serve this model.py instead of the rendered one (to try a "
                    "change to the product's model on GPUs; the figures then are not the "
                    "product's)")
    ap.add_argument("--pods", type=int, default=1, choices=(1, 2),
                    help="2: the multi-node launch of a LeaderWorkerSet group, leader and worker "
                    "each in a network namespace of this host, world/2 ranks (and GPUs) each; "
                    "needs root")
    ap.add_argument("--pod-uid", type=int, default=pods.POD_UID,
                    help="the pods' user (runAsUser); 0 only where the files are root-only")
    ap.add_argument("--openai", action="store_true",
                    help="also serve each single-pod stack through the OpenAI frontend "
                    "(tritonllm openai) and drive it with the openai SDK, aiperf and tritonllm "
                    "bench --api openai (carry: scripts/gpu-check prepare-openai)")
    ap.add_argument("--openai-levels", default="1,8",
                    help="--openai: aiperf and bench concurrencies")
    ap.add_argument("--openai-requests", type=int, default=32,
                    help="--openai: requests per aiperf and bench level")
    ap.add_argument("--share-gpus", action="store_true",
                    help="--pods on a host with fewer GPUs than ranks: the pods share them "
                    "(NCCL between the pods over their network; NOT one rank per GPU)")
    args = ap.parse_args()
    check = Checks()
    report: dict[str, Any] = {"note": "stand-in figures (a tensor-parallel toy), NOT TensorRT-LLM"}
    report["facts"] = facts()
    gpus = gpus_listed()
    world = args.tp or len(gpus)
    if world % args.pods:
        ap.error(f"world size {world} does not split over {args.pods} pods")
    label = product_label(gpus[0][1])
    # A multi-node CR: perNode = the ranks (GPUs) of one pod of the group.
    args.gpu_spec = {"product": label} | ({"perNode": world // args.pods} if args.pods > 1 else {})
    dep = example(EXAMPLE, engine={"parallelism": {"tensor": world, "pipeline": 1}},
                  serving={"streaming": True, "bls": True}, gpu=args.gpu_spec)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.pods > 1:
        host_tools(args.carry, args.work)  # before the environments copy PATH
    wheels = sorted(args.carry.glob("nvidia_pytriton-*"))
    install = (carried_install(wheels[0], args.work / "pytriton", Path(sys.executable),
                               sorted(args.carry.glob("models/*.whl")))
               if wheels else ensure_install())
    say(f"models run by {install.python}")
    check.guarded("the models' python imports what the models import", preflight, install, check)
    pyz = pyz_archive(args.work)
    tokenizer = make_tokenizer(install, args.work / "tokenizer")
    if args.openai:
        openai_check.add_chat_template(tokenizer)
    args.tokenizer_dir = tokenizer
    vocab = json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]

    report.update(figures=[], metrics={}, ready_seconds={}, memory={})
    tags = args.on.split(",")
    if "llmapi" in tags:  # runtime llmapi: no engine, its own stack (tests/gpu/llmapi.py)
        from tests.gpu import llmapi

        check.guarded("[llmapi] stack", llmapi.run, install, world, pyz, gpus, args, report,
                      check, say)
        args.on = ",".join(t for t in tags if t != "llmapi")
    if args.on:
        engine_path(args, dep, world, label, gpus, install, pyz, tokenizer, vocab, report,
                    check)

    say("\n== figures (stand-in figures, NOT TensorRT-LLM)")
    for device, seconds in report["ready_seconds"].items():
        say(f"launch to ready, stand-in on {device}: {seconds}s")
    for row in figure_rows(report["figures"]):
        say(row)
    report["checks"] = [{"name": n, "ok": ok, "detail": d} for n, ok, d in check.results]
    (args.out / "figures.json").write_text(json.dumps(report, indent=2, default=str))
    passed = len(check.results) - len(check.failed)
    say(f"\ngpu-check: {passed} passed, {len(check.failed)} failed")
    for name in check.failed:
        say(f"  failed: {name}")
    return 1 if check.failed else 0


def engine_path(args: argparse.Namespace, dep: TritonLLMDeployment, world: int, label: str,
                gpus: list[tuple[int, str, str]], install: TritonInstall, pyz: Path,
                tokenizer: Path, vocab: dict[str, int], report: dict[str, Any],
                check: Checks) -> None:
    """The engine runtime's stacks: build, refusals, then each --on stack."""
    say(f"\n== build (tp={world}, gpu.product={label})")
    engine = build(dep, args.work / "build", pyz, check, len(gpus), args.expect_product)
    meta = args.work / "build" / "trtllm-metadata"
    base_env = {"PYTHONPATH": os.pathsep.join([str(meta), os.environ.get("PYTHONPATH", "")])}

    if args.pods == 1:
        say("\n== launch refusals")
        refusals(dep, args.work / "refusals", pyz, engine, OnGpus(engine, base_env), install,
                 check)
    group = pods.make_group(EXAMPLE, args.pods, world // args.pods,
                            wrap=len(gpus) if args.share_gpus else None) \
        if args.pods > 1 else None
    if group is None:
        stacks(install, world, engine, base_env, tokenizer, pyz, vocab, gpus, args, report,
               check)
    else:
        with pods.pod_network(group, args.work / "pods", args.pod_uid):
            say(f"\n== two pods: {[(p.name, p.address, p.visible) for p in group.pods]}")
            stacks(install, world, engine, base_env, tokenizer, pyz, vocab, gpus, args, report,
                   check, group, mpi_keys(args.carry, args.work))



def stacks(install: TritonInstall, world: int, engine: Path, base_env: dict[str, str],
           tokenizer: Path, pyz: Path, vocab: dict[str, int], gpus: list[tuple[int, str, str]],
           args: argparse.Namespace, report: dict[str, Any], check: Checks,
           group: pods.Group | None = None, keys: Path | None = None) -> None:
    """One stack per --on entry, in one pod or (`group`) in the group's pods."""
    idle = idle_memory()
    for tag in args.on.split(","):
        device, *flags = tag.split("+")
        where = f"{len(group.pods)} pods" if group else "one pod"
        say(f"\n== launch (world size {world} in {where}, stand-in on {device}, "
            f"{flags or 'plain'})")
        env = {**base_env, "TRITONLLM_STANDIN_RENDEZVOUS": f"127.0.0.1:{free_ports(1)[0]}"}
        if device == "cpu":
            env["TRITONLLM_STANDIN_DEVICE"] = "cpu"
        elif world > len(gpus) and not args.share_gpus:
            check(f"[{tag}] world size {world} on {len(gpus)} GPU(s)", False,
                  "one rank per GPU: only the cpu stack runs more ranks than GPUs")
            continue
        # nopool: no CUDA memory pool in tritonserver (test-only extra arguments).
        extra = tuple(f"--cuda-memory-pool-byte-size={i}:0" for i, _, _ in gpus) \
            if "nopool" in flags else ()
        on = OnGpus(engine, env, {"model.py": STANDIN} if args.echo_standin else GPU_STANDIN,
                    extra)
        variant = example(EXAMPLE, engine={"parallelism": {"tensor": world, "pipeline": 1}},
                          serving={"streaming": "stream" in flags, "bls": True},
                          gpu=args.gpu_spec)
        name = tag.replace("+", "-") + ("-pods" if group else "")
        root = args.work / f"stack-{name}"
        root.mkdir(parents=True, exist_ok=True)
        try:
            if group is None:
                started = run_stack(install, variant, root, tokenizer, pyz, gpus=on)
                placed = (lambda s: placement(s, world, check)) if device == "gpu" else None
                check.guarded(f"[{tag}] launch, checks and figures", serve, started, variant,
                              tag, vocab, gpus, idle, args, report, check, placed)
            else:
                assert keys is not None
                check.guarded(f"[{tag}] group launch, checks and figures", serve_group, install,
                              variant, root, tokenizer, pyz, on, tag, group, keys, vocab, gpus,
                              idle, args, report, check)
        finally:
            keep_logs(root, name, tag, args.out)


def keep_logs(root: Path, name: str, tag: str, out: Path) -> None:
    """The launch logs (every pod's) to --out; their telling lines to stdout."""
    for log in sorted(root.glob("*.log")):
        target = f"launch-{name}.log" if log.name == "launch.log" else f"{name}-{log.name}"
        shutil.copy(log, out / target)
        for line in log.read_text(errors="replace").splitlines():
            if re.search(r"failed to load|Fatal Python|Traceback|error:|File \"|"
                         r"tritonllm-standin |Data for node|Process rank|"
                         r"event=(exec|exit|gpu|engine|worker-ready|hostfile|drain|sshd)", line):
                say(f"[{tag}] {log.stem}: {line[:300]}")


def idle_memory() -> dict[str, float]:
    """GPU memory in use before anything of ours runs (bytes, by UUID), from nvidia-smi."""
    out = {}
    for line in smi("--query-gpu=uuid,memory.used", "--format=csv,noheader,nounits"):
        uuid, mib = (f.strip() for f in line.split(","))
        out[uuid] = float(mib) * 2**20
    return out


if __name__ == "__main__":
    sys.exit(main())
