"""A verified rollout's smoke set (tritonllm.handlers.smoke) against real HTTP servers on the
loopback standing in for a verification pod, which runs the deployment author's image: what it
answers is read only up to a limit, never inflated or redirected; the set has one deadline from
its latency bounds and runs outside the reconcile pass; and only a pod that the verification
workload controls (through its ReplicaSet or leader StatefulSet) is sent it."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from tests.cases import cr
from tests.fake_kube import FakeKube
from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment, parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.observe import read_before_render
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.handlers.smoke import ANSWER_LIMIT, SmokeChecks
from tritonllm.plan import SmokeRun
from tritonllm.plan.rollout import judge
from tritonllm.render import naming, render_all
from tritonllm.render.serving import template_revision, verify_name

NS = "default"
TARGET = "rev-new"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MULTI_NODE = {"gpu": {"perNode": 2}, "engine": {"parallelism": {"tensor": 2, "pipeline": 2}}}


@contextlib.asynccontextmanager
async def pod_server(monkeypatch: pytest.MonkeyPatch, handler: Handler) -> AsyncIterator[None]:
    """An HTTP server on 127.0.0.1 at a free port, which the smoke requests are sent to."""
    running: set[asyncio.Task[Any]] = set()

    @web.middleware
    async def tracked(request: web.Request, handler: Handler) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        running.add(task)
        try:
            return await handler(request)
        finally:
            running.discard(task)

    app = web.Application(middlewares=[tracked])
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    monkeypatch.setattr(c, "HTTP_PORT", runner.addresses[0][1])
    try:
        yield
    finally:
        for task in running:  # answers that never end: the server waits for none of them
            task.cancel()
        await runner.cleanup()


def deployment(name: str = "demo", spec: dict[str, Any] | None = None,
               smoke: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    patch = {**(spec or {}), "rollout": {"smoke": smoke or [{"prompt": "hi"}]}}
    return cr(patch, metadata={"name": name, "namespace": NS, "uid": f"uid-{name}",
                               "generation": 1})


def verification(dep: TritonLLMDeployment, target: str, *, ours: bool = True) -> list[dict]:
    """The verification workload (Ready, running `target`), what controls its pods, and its
    Ready pod (a group's leader): as the Deployment or LeaderWorkerSet controllers make them."""
    kind = dep.spec.topology.workload_kind
    name = verify_name(dep)
    owner = {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": dep.name,
             "uid": dep.metadata.uid if ours else "uid-someone-else", "controller": True}
    template = {"metadata": {"annotations": {c.ANNOTATION_REVISION: target}}}
    spec = ({"replicas": 1, "template": template} if kind == "Deployment"
            else {"replicas": 1, "leaderWorkerTemplate": {"leaderTemplate": template}})
    workload = {"apiVersion": dep.spec.topology.workload_api_version, "kind": kind,
                "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                             "labels": {c.LABEL_MANAGED_BY: c.APP_NAME},
                             "ownerReferences": [owner]},
                "spec": spec, "status": {"replicas": 1, "readyReplicas": 1}}
    middle = "ReplicaSet" if kind == "Deployment" else "StatefulSet"
    middle_name = f"{name}-5d8f9" if kind == "Deployment" else name
    controller = {"apiVersion": "apps/v1", "kind": middle, "metadata": {
        "name": middle_name, "namespace": NS, "uid": f"uid-{middle_name}",
        "ownerReferences": [ref(workload)]}}
    return [workload, controller, pod(dep, f"{middle_name}-0", ref(controller), target)]


def ref(obj: dict[str, Any], **change: Any) -> dict[str, Any]:
    """A controller reference to `obj`."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, **change}


def pod(dep: TritonLLMDeployment, name: str, owner: dict[str, Any] | None, target: str
        ) -> dict[str, Any]:
    """A Ready pod with the verification pod's labels and revision (anyone may write those)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "uid": f"uid-{name}",
        "labels": {c.LABEL_INSTANCE: dep.name, c.LABEL_COMPONENT: c.COMPONENT_VERIFY,
                   "leaderworkerset.sigs.k8s.io/worker-index": "0"},
        "annotations": {c.ANNOTATION_REVISION: target},
        "ownerReferences": [owner] if owner else []},
        "status": {"podIP": "127.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def world(body: dict[str, Any], *extra: dict[str, Any], ours: bool = True
          ) -> tuple[FakeKube, TritonLLMDeployment, dict[str, Any]]:
    """The API server with the verification objects (forged ones in `extra` listed first), the
    deployment, and its verification workload as the watch cache holds it."""
    dep = parse_deployment(body)
    kube = FakeKube([body, *extra, *verification(dep, TARGET, ours=ours)])
    verify = kube.cache().get(dep.spec.topology.workload_kind, NS, verify_name(dep))
    assert verify is not None
    return kube, dep, verify


async def smoke_run(smoke: SmokeChecks, kube: FakeKube, dep: TritonLLMDeployment,
                    verify: dict[str, Any], within: float) -> SmokeRun:
    """The set's answers as the passes read them, asked until there are some (at most
    `within` seconds)."""
    async def ask() -> SmokeRun:
        while True:
            run = await smoke.run(kube, dep, verify, TARGET, None)
            if run is not None:
                return run
            await asyncio.sleep(0.005)
    return await asyncio.wait_for(ask(), within)


async def hang(_: web.Request) -> web.StreamResponse:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


async def answer(_: web.Request) -> web.StreamResponse:
    return web.json_response({"text_output": "hello"})


# --- what an answer may cost -------------------------------------------------------------------


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_an_answer_larger_than_the_limit_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch, declared: bool
) -> None:
    """A body over ANSWER_LIMIT fails its request as soon as the limit is passed (or its length
    is declared), whatever else the pod would send: it is not read to its end."""
    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        if declared:
            resp.content_length = 300 * 2**20
        await resp.prepare(request)
        await resp.write(b'{"text_output": "' + b"x" * (2 * ANSWER_LIMIT))
        await asyncio.sleep(3600)  # the rest never comes: only a reader that stops returns
        return resp

    async def main() -> None:
        async with pod_server(monkeypatch, big):
            kube, dep, verify = world(deployment(smoke=[{"prompt": "hi",
                                                         "maxLatencySeconds": 30}]))
            run = await smoke_run(SmokeChecks(), kube, dep, verify, within=2.0)
            (got,) = run.answers
            assert (got.status, got.text) == (200, None)
            request = dep.spec.rollout.smoke_set[0]
            assert judge(request, got) == f"the answer is larger than {ANSWER_LIMIT // 1024} KiB"
            assert got.seconds < 2.0

    asyncio.run(main())


def test_a_compressed_answer_is_not_inflated(monkeypatch: pytest.MonkeyPatch) -> None:
    """10 MiB of text in a 10 KiB gzip body: read as the bytes sent (not JSON), never inflated
    (the smoke requests ask for no encoding)."""
    bomb = gzip.compress(json.dumps({"text_output": "x" * 10 * 2**20}).encode(), compresslevel=1)
    assert len(bomb) < ANSWER_LIMIT
    seen: list[str] = []

    async def compressed(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Accept-Encoding", ""))
        return web.Response(body=bomb, headers={"Content-Encoding": "gzip",
                                                "Content-Type": "application/json"})

    async def main() -> None:
        async with pod_server(monkeypatch, compressed):
            kube, dep, verify = world(deployment())
            (got,) = (await smoke_run(SmokeChecks(), kube, dep, verify, within=2.0)).answers
            assert got.text is None and got.error.startswith("not JSON")
            assert judge(dep.spec.rollout.smoke_set[0], got) is not None
            assert seen == ["identity"]

    asyncio.run(main())


def test_a_redirect_is_not_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod cannot send the operator's POST elsewhere (another address of the cluster)."""
    elsewhere: list[str] = []

    async def redirect(request: web.Request) -> web.StreamResponse:
        if request.path == "/elsewhere":
            elsewhere.append(request.method)
            return web.json_response({"text_output": "hello"})
        raise web.HTTPTemporaryRedirect("/elsewhere")

    async def main() -> None:
        async with pod_server(monkeypatch, redirect):
            kube, dep, verify = world(deployment())
            (got,) = (await smoke_run(SmokeChecks(), kube, dep, verify, within=2.0)).answers
            assert got.status == 307
            assert (judge(dep.spec.rollout.smoke_set[0], got) or "").startswith("HTTP 307")
            assert elsewhere == []

    asyncio.run(main())


# --- how long a set may take -------------------------------------------------------------------


@pytest.mark.parametrize("how", ["silent", "drip"])
def test_a_pod_that_never_finishes_an_answer_costs_the_set_its_latency_bound(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """No answer (or one a byte at a time) is given up at maxLatencySeconds, and the set ends
    at its first failed request: three requests of 0.1 s end after 0.1 s, not 3 x (0.1 s +
    a grace)."""
    async def drip(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        while True:
            await resp.write(b" ")
            await asyncio.sleep(0.01)

    async def main() -> None:
        async with pod_server(monkeypatch, hang if how == "silent" else drip):
            smoke = [{"prompt": f"q{i}", "maxLatencySeconds": 0.1} for i in range(3)]
            kube, dep, verify = world(deployment(smoke=smoke))
            start = time.monotonic()
            run = await smoke_run(SmokeChecks(), kube, dep, verify, within=2.0)
            took = time.monotonic() - start
            (got,) = run.answers
            assert got.status is None and 0.1 <= got.seconds < 0.5
            assert "no complete answer within 0.1 s" in got.error
            assert took < 0.5

    asyncio.run(main())


def test_the_set_runs_outside_the_pass_and_ends_with_a_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pass that finds the pod starts the set and returns; later passes see it under way
    (no second request); forgetting the deployment cancels it; a set that ends asks for a
    pass of its deployment, which reads its answers."""
    sent: list[str] = []
    gate = asyncio.Event()

    async def gated(request: web.Request) -> web.StreamResponse:
        sent.append((await request.json())["text_input"])
        await gate.wait()
        return web.json_response({"text_output": "hello"})

    async def main() -> None:
        async with pod_server(monkeypatch, gated):
            kube, dep, verify = world(deployment())
            passes: list[tuple[str, str]] = []
            smoke = SmokeChecks(lambda ns, name: passes.append((ns, name)))
            first = await asyncio.wait_for(smoke.run(kube, dep, verify, TARGET, None), 0.5)
            assert first is None
            await asyncio.sleep(0.05)
            assert await smoke.run(kube, dep, verify, TARGET, None) is None
            assert sent == ["hi"]
            smoke.forget(NS, "demo")
            gate.set()
            await asyncio.sleep(0.05)
            assert passes == []  # cancelled: no answers, no pass
            run = await smoke_run(smoke, kube, dep, verify, within=2.0)
            assert [a.text for a in run.answers] == ["hello"] and len(sent) == 2
            assert passes == [(NS, "demo")]
            # the verdict in the status: the answers are let go
            done = {"revision": TARGET, "state": "Verified"}
            assert await smoke.run(kube, dep, verify, TARGET, done) is None
            assert len(sent) == 2

    asyncio.run(main())


def test_a_hanging_smoke_set_delays_no_other_deployments_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As many deployments as there are pass slots verify against pods that never answer
    (maxLatencySeconds 600): their passes end at once, and so does the pass of another
    deployment, while their sets are under way."""
    async def main() -> None:
        async with pod_server(monkeypatch, hang):
            settings = OperatorSettings(check_gpu_nodes=False, api_concurrency=1)
            objects: list[dict[str, Any]] = [
                deployment("other"),
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "tritonllm-model-store", "namespace": NS}}]
            slots = 3 * settings.api_concurrency  # PASSES_PER_CLIENT_SLOT
            names = [f"slow{i}" for i in range(slots)]
            for name in names:
                body = deployment(name, smoke=[{"prompt": "hi", "maxLatencySeconds": 600}])
                objects += [body, *verification(parse_deployment(body), "")]
            kube = FakeKube(objects)
            cache = kube.cache()
            for name in names:  # the revision the pass renders is the one being verified
                dep = parse_deployment(kube.objects[(c.KIND, NS, name)])
                opts = read_before_render(cache, settings, dep, naming.engine_key(dep)).opts
                target = template_revision(render_all(dep, opts).workload.body)
                for kind in ("Deployment", "Pod"):
                    obj = next(o for (k, _, n), o in kube.objects.items()
                               if k == kind and n.startswith(f"{name}-verify"))
                    meta = obj["spec"]["template"]["metadata"] if kind == "Deployment" \
                        else obj["metadata"]
                    meta["annotations"][c.ANNOTATION_REVISION] = target
            rec = Reconciler(kube, settings, cache)
            for name in [*names, "other"]:
                rec.request(NS, name)
            await asyncio.wait_for(rec.wait_idle(), 2.0)
            assert kube.objects[(c.KIND, NS, "other")].get("status")
            sent = [call.verb for call in kube.calls if call.kind == "Pod"]
            assert sent == ["list"] * slots  # each slow deployment's set was started
            rec.stop()

    asyncio.run(main())


# --- which pod is sent the set -----------------------------------------------------------------


@pytest.mark.parametrize("spec", [{}, MULTI_NODE], ids=["Deployment", "LeaderWorkerSet"])
def test_only_a_pod_the_verification_workload_controls_is_sent_the_set(
    monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any]
) -> None:
    """Pods with the verification pod's labels and revision, listed before it: one with no
    owner, one whose controller reference names the real controller with another uid, one
    controlled by a ReplicaSet (StatefulSet) of someone else's workload. The set goes to the
    pod whose controller is the verification workload's."""
    async def main() -> None:
        async with pod_server(monkeypatch, answer):
            body = deployment(spec=spec)
            dep = parse_deployment(body)
            real = verification(dep, TARGET)[1]
            middle = real["kind"]
            foreign = {"apiVersion": "apps/v1", "kind": middle, "metadata": {
                "name": "theirs", "namespace": NS, "uid": "uid-theirs", "ownerReferences": [
                    {"kind": dep.spec.topology.workload_kind, "name": "theirs",
                     "uid": "uid-their-workload", "controller": True}]}}
            forged = [pod(dep, "forged-0", None, TARGET),
                      pod(dep, "forged-1", ref(real, uid="uid-forged"), TARGET),
                      pod(dep, "forged-2", ref(foreign), TARGET), foreign]
            kube, dep, verify = world(body, *forged)
            run = await smoke_run(SmokeChecks(), kube, dep, verify, within=2.0)
            assert run.pod == f"{real['metadata']['name']}-0"
            assert [a.text for a in run.answers] == ["hello"]
            # one read of each controller named, the forged ones' included
            assert sorted(x.name for x in kube.calls if x.verb == "get") == sorted(
                [real["metadata"]["name"], "theirs"])

    asyncio.run(main())


def test_no_set_is_sent_to_a_verification_workload_the_deployment_does_not_control(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A workload under the verification workload's name, labelled ours, but controlled by
    another deployment (or anyone): its pod is not asked, whatever it would answer."""
    sent: list[str] = []

    async def counted(request: web.Request) -> web.StreamResponse:
        sent.append(request.path)
        return web.json_response({"text_output": "hello"})

    async def main() -> None:
        async with pod_server(monkeypatch, counted):
            kube, dep, verify = world(deployment(), ours=False)
            smoke = SmokeChecks()
            for _ in range(3):
                assert await smoke.run(kube, dep, verify, TARGET, None) is None
                await asyncio.sleep(0.01)
            assert sent == [] and not any(x.kind == "Pod" for x in kube.calls)

    asyncio.run(main())


# --- what is asked ------------------------------------------------------------------------------


@pytest.mark.parametrize(("runtime", "path", "length"), [
    ("engine", "/v2/models/ensemble/generate", "max_tokens"),
    ("llmapi", "/v2/models/tensorrt_llm/generate", "sampling_param_max_tokens"),
])
def test_the_smoke_request_asks_each_runtimes_model_by_its_own_length_input(
    monkeypatch: pytest.MonkeyPatch, runtime: str, path: str, length: str
) -> None:
    """The llmapi model reads its length from sampling_param_max_tokens: a `max_tokens` key
    would reach it as an ignored request parameter, and an exact-answer check would see the LLM
    API's default length instead of the set's."""
    seen: list[tuple[str, dict[str, Any]]] = []

    async def record(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, await request.json()))
        return web.json_response({"text_output": "hello"})

    spec = {"runtime": runtime, "image": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"}

    async def main() -> None:
        async with pod_server(monkeypatch, record):
            kube, dep, verify = world(deployment(
                spec=spec, smoke=[{"prompt": "hi", "maxTokens": 3}]))
            run = await smoke_run(SmokeChecks(), kube, dep, verify, within=2.0)
            assert [a.text for a in run.answers] == ["hello"]
            assert seen == [(path, {"text_input": "hi", length: 3})]

    asyncio.run(main())


# --- the OpenAI request --------------------------------------------------------------------------


def _openai_world(containers: list[str]) -> tuple[FakeKube, TritonLLMDeployment, dict[str, Any]]:
    """world() with a verification pod that runs `containers`."""
    body = deployment()
    dep = parse_deployment(body)
    objects = verification(dep, TARGET)
    objects[-1]["spec"] = {"containers": [{"name": n} for n in containers]}
    kube = FakeKube([body, *objects])
    verify = kube.cache().get(dep.spec.topology.workload_kind, NS, verify_name(dep))
    assert verify is not None
    return kube, dep, verify


def _openai_pod(completion: dict[str, Any], seen: list[tuple[str, Any]]) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, await request.json()))
        if request.path == "/v1/completions":
            return web.json_response(completion)
        return web.json_response({"text_output": "hello"})
    return handle


COMPLETION = {"id": "cmpl-1", "object": "text_completion", "model": "demo",
              "choices": [{"index": 0, "text": " there", "finish_reason": "length"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}


def _openai_run(monkeypatch: pytest.MonkeyPatch, containers: list[str],
                completion: dict[str, Any]) -> tuple[SmokeRun, list[tuple[str, Any]], Any]:
    seen: list[tuple[str, Any]] = []

    async def main() -> tuple[SmokeRun, TritonLLMDeployment]:
        async with pod_server(monkeypatch, _openai_pod(completion, seen)):
            monkeypatch.setattr(c, "OPENAI_PORT", c.HTTP_PORT)  # one server, both ports
            kube, dep, verify = _openai_world(containers)
            return await smoke_run(SmokeChecks(), kube, dep, verify, within=2.0), dep

    run, dep = asyncio.run(main())
    return run, seen, dep


def test_a_pod_with_the_frontend_is_sent_one_openai_completion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tritonllm.plan.rollout import verdict

    run, seen, dep = _openai_run(monkeypatch, ["triton", "openai"], COMPLETION)
    assert [path for path, _ in seen] == ["/v2/models/ensemble/generate", "/v1/completions"]
    assert seen[1][1] == {"model": "demo", "prompt": "hi", "max_tokens": 16}
    assert run.openai is not None and run.openai.text == " there"
    passed, said = verdict(dep, run)
    assert passed and "and the OpenAI request" in said


@pytest.mark.parametrize(("completion", "why"), [
    ({**COMPLETION, "usage": None}, "usage"),
    ({**COMPLETION, "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 9}},
     "usage"),
    ({**COMPLETION, "choices": []}, "no choices"),
    ({"error": {"message": "model demo has no chat template"}}, "no choices"),
])
def test_an_openai_answer_without_text_or_usage_fails_the_revision(
    monkeypatch: pytest.MonkeyPatch, completion: dict[str, Any], why: str,
) -> None:
    from tritonllm.plan.rollout import verdict

    run, _, dep = _openai_run(monkeypatch, ["triton", "openai"], completion)
    passed, said = verdict(dep, run)
    assert not passed
    assert "OpenAI smoke request (/v1/completions" in said and why in said


def test_a_pod_without_the_frontend_is_sent_no_openai_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, seen, _ = _openai_run(monkeypatch, ["triton"], COMPLETION)
    assert [path for path, _ in seen] == ["/v2/models/ensemble/generate"]
    assert run.openai is None
