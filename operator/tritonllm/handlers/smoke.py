"""The smoke set of a verified rollout: sent by the operator to the verification pod of a new
revision, over HTTP straight to the pod's IP (the Service does not select it). The planner
(tritonllm.plan.rollout) judges the answers; this module only sends the requests and records
what came back.

A pod IP is reachable from the operator's pod (the serving pods' NetworkPolicy admits the
operator's namespace on the HTTP port with a verified rollout: TRITONLLM_OPERATOR_NAMESPACE) and
from a node-local operator. The set is sent once per revision; its answers are kept until the
status records the verdict.

The verification pod runs the deployment author's image, so nothing it does may cost the
operator more than a bounded amount:

- the set runs in a task of its own, outside the reconcile pass and its slot: the pass that finds
  the pod starts it, later passes read its answers (none while it runs), and its end asks for a
  pass of its deployment. A new revision, the verdict in the status, or the deployment gone
  cancel it;
- one deadline for the whole set, the sum of its latency bounds (an answer later than its bound
  fails anyway), and the set stops at the first answer that fails;
- at most ANSWER_LIMIT bytes of an answer are read, never decompressed, and no redirect is
  followed;
- the pod must be controlled by the verification workload: its controller (the ReplicaSet of a
  Deployment, the leader StatefulSet of a LeaderWorkerSet) is read by name and must carry the
  uid the pod names and have the workload, by uid, as its own controller. Labels and owner
  references alone can be written by anyone who may create a pod in the namespace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.spec import SmokeRequest
from tritonllm.k8s.client import Kube
from tritonllm.plan import SmokeAnswer, SmokeRun, WorkloadObs, is_ours, judge
from tritonllm.render.serving import max_tokens_input, model_name, template_revision
from tritonllm.triton.openai import served_model_name

log = logging.getLogger("tritonllm.smoke")

Obj = dict[str, Any]
Key = tuple[str, str]
# The most of one answer that is read. The JSON of the longest expected answer (4096 characters,
# each escaped as \uXXXX) fits with room to spare; a longer answer fails its request unread.
ANSWER_LIMIT = 64 * 1024
# Of an answer's text_output, what judge reads is kept until the verdict is written: the
# expected text plus one character (a longer answer differs), or the quote of a wrong one.
KEEP_TEXT = 256
# LeaderWorkerSet labels each pod of a group with its index in the group (the leader's is 0).
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# What controls the pods of each kind of verification workload (apps/v1).
POD_CONTROLLER = {"Deployment": "ReplicaSet", "LeaderWorkerSet": "StatefulSet"}
# The OpenAI smoke request asks for at most this many tokens (it checks the path, not the model).
OPENAI_MAX_TOKENS = 16


class SmokeChecks:
    """One smoke set per deployment and revision, sent in the background; its answers kept until
    the verdict is in the status. `on_done(namespace, name)` asks for a pass once a set ended."""

    def __init__(self, on_done: Callable[[str, str], None] | None = None) -> None:
        self._on_done = on_done
        self._runs: dict[Key, SmokeRun] = {}
        self._sending: dict[Key, tuple[str, asyncio.Task[None]]] = {}  # (revision, task)

    async def run(
        self,
        kube: Kube,
        dep: TritonLLMDeployment,
        verify: Obj | None,
        target: str | None,
        rollout: Obj | None,
    ) -> SmokeRun | None:
        """The smoke set's answers from the verification pod of `target`, once sent; None while
        there is no Ready pod or the set runs (this starts it), or once status.rollout holds
        the verdict for it."""
        key = (dep.namespace, dep.name)
        if not _wanted(dep, verify, target, rollout):
            self.forget(*key)
            return None
        assert verify is not None and target is not None
        known = self._runs.get(key)
        if known is not None and known.revision == target:
            return known
        sending = self._sending.get(key)
        if sending is not None and sending[0] == target:
            return None
        if WorkloadObs.of(verify).ready < 1:
            return None
        pod = await _target_pod(kube, dep, verify, target)
        if pod is None:
            return None
        self.forget(*key)  # another revision's set, if one still runs
        task = asyncio.create_task(self._send(key, dep, target, pod))
        self._sending[key] = (target, task)
        return None

    async def _send(self, key: Key, dep: TritonLLMDeployment, target: str, pod: Obj) -> None:
        ip, name = pod["status"]["podIP"], pod["metadata"]["name"]
        smoke = dep.spec.rollout.smoke_set
        openai: SmokeAnswer | None = None
        try:
            answers = await send_set(ip, model_name(dep), smoke,
                                     length_input=max_tokens_input(dep))
            passed = len(answers) == len(smoke) and all(
                judge(q, a) is None for q, a in zip(smoke, answers, strict=True))
            if passed and runs_openai(pod):
                openai = await send_openai(ip, served_model_name(dep), smoke[0])
        except Exception as exc:  # a fault of ours: said in the verdict, not lost with the task
            log.exception("%s/%s: smoke set not sent", *key)
            answers = (SmokeAnswer(None, None, 0.0, f"not sent: {type(exc).__name__}"),)
        self._runs[key] = SmokeRun(target, name, answers, openai)
        self._sending.pop(key, None)
        if self._on_done is not None:
            self._on_done(*key)

    def forget(self, namespace: str, name: str) -> None:
        self._runs.pop((namespace, name), None)
        sending = self._sending.pop((namespace, name), None)
        if sending is not None:
            sending[1].cancel()

    def stop(self) -> None:
        """The replica stops acting: every set under way is cancelled."""
        for key in list(self._sending):
            self.forget(*key)


def _wanted(
    dep: TritonLLMDeployment, verify: Obj | None, target: str | None, rollout: Obj | None
) -> bool:
    """Whether the set of `target` is wanted: the deployment's own verification workload runs
    it, and status.rollout has no verdict for it yet."""
    rollout = rollout or {}
    done = rollout.get("revision") == target and rollout.get("state") in ("Verified", "Failed")
    return (verify is not None and target is not None and not done
            and template_revision(verify) == target and is_ours(verify, dep.metadata.uid or ""))


async def _target_pod(
    kube: Kube, dep: TritonLLMDeployment, verify: Obj, target: str
) -> Obj | None:
    """The Ready verification pod (a group's leader) of the target revision that the
    verification workload controls."""
    labels = {c.LABEL_INSTANCE: dep.name, c.LABEL_COMPONENT: c.COMPONENT_VERIFY}
    kind = dep.spec.topology.workload_kind
    owners: dict[str, Obj | None] = {}  # each read once: forged pods may all name one
    for pod in await kube.list("v1", "Pod", dep.namespace, labels=labels):
        ref = _controller(pod, POD_CONTROLLER[kind])
        if ref is None or not _ready_leader(pod, target):
            continue
        name = str(ref.get("name", ""))
        if name not in owners:
            owners[name] = await kube.get("apps/v1", str(ref["kind"]), dep.namespace, name)
        if _controls(owners[name], ref, kind, verify):
            return pod
    return None


def _ready_leader(pod: Obj, target: str) -> bool:
    meta, st = pod["metadata"], pod.get("status") or {}
    if (meta.get("annotations") or {}).get(c.ANNOTATION_REVISION) != target:
        return False
    if (meta.get("labels") or {}).get(LWS_WORKER_INDEX, "0") != "0" or meta.get(
            "deletionTimestamp"):
        return False
    ready = any(x.get("type") == "Ready" and x.get("status") == "True"
                for x in st.get("conditions") or [])
    return ready and bool(st.get("podIP"))


def _controller(obj: Mapping[str, Any], kind: str, uid: str | None = None) -> Obj | None:
    """The object's controller reference, if it is of `kind` (and has `uid`, when given)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:  # an object has one controller at most
            if ref.get("kind") != kind or not ref.get("uid") or uid not in (None, ref["uid"]):
                return None
            return dict(ref)
    return None


def _controls(owner: Obj | None, ref: Obj, kind: str, verify: Obj) -> bool:
    """Whether `owner`, read under the name of the pod's controller reference `ref`, is the
    controller the verification workload made: it has the uid the pod names, and the
    workload's uid as its own controller."""
    uid = (verify.get("metadata") or {}).get("uid")
    return (owner is not None and bool(uid) and owner["metadata"].get("uid") == ref["uid"]
            and _controller(owner, kind, uid) is not None)


def set_deadline_seconds(requests: Sequence[SmokeRequest]) -> float:
    """How long a whole smoke set may take: the sum of its requests' latency bounds."""
    return sum(r.maxLatencySeconds for r in requests)


async def send_set(ip: str, model: str, requests: Sequence[SmokeRequest], *,
                   length_input: str = "max_tokens") -> tuple[SmokeAnswer, ...]:
    """The requests in order, within the set's deadline; it stops at the first answer that
    fails (the verdict is then known). The answers have their text cut to what judge reads."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + set_deadline_seconds(requests)
    answers: list[SmokeAnswer] = []
    for request in requests:
        left = deadline - loop.time()
        if left <= 0:
            break
        answer = await send(ip, model, request, seconds=min(request.maxLatencySeconds, left),
                            length_input=length_input)
        keep = max(len(request.expectExact or request.expectPrefix or ""), KEEP_TEXT) + 1
        if answer.text is not None and len(answer.text) > keep:
            answer = SmokeAnswer(answer.status, answer.text[:keep], answer.seconds, answer.error)
        answers.append(answer)
        if judge(request, answer) is not None:
            break
    return tuple(answers)


async def send(
    ip: str, model: str, request: SmokeRequest, *, seconds: float | None = None,
    length_input: str = "max_tokens",
) -> SmokeAnswer:
    """One generate request (HTTP, the pod's own port), timed, given up after `seconds` (its
    latency bound unless less is left of the set's deadline). `length_input` names the
    model's length input (render.serving.max_tokens_input)."""
    url = f"http://{ip}:{c.HTTP_PORT}/v2/models/{model}/generate"
    body = {"text_input": request.prompt, length_input: request.maxTokens}
    limit = request.maxLatencySeconds if seconds is None else seconds
    start = time.monotonic()
    try:
        async with asyncio.timeout(limit):
            return await _post(url, body, start)
    except TimeoutError:
        return SmokeAnswer(None, None, time.monotonic() - start,
                           f"no complete answer within {limit:g} s")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return SmokeAnswer(None, None, time.monotonic() - start,
                           f"{type(exc).__name__}: {exc}"[:300])


def runs_openai(pod: Obj) -> bool:
    """Whether the pod runs the OpenAI frontend (its revision rendered the sidecar)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(x.get("name") == c.OPENAI_CONTAINER for x in containers)


async def send_openai(ip: str, model: str, request: SmokeRequest) -> SmokeAnswer:
    """One non-streamed /v1/completions request to the frontend's port with the first smoke
    request's prompt and at most OPENAI_MAX_TOKENS tokens, within that request's latency
    bound. Its text is the first choice's; an answer without usage fails (`error` says why)."""
    url = f"http://{ip}:{c.OPENAI_PORT}/v1/completions"
    body = {"model": model, "prompt": request.prompt,
            "max_tokens": min(request.maxTokens, OPENAI_MAX_TOKENS)}
    start = time.monotonic()
    try:
        async with asyncio.timeout(request.maxLatencySeconds):
            answer = await _post(url, body, start, read=_completion_text)
    except TimeoutError:
        return SmokeAnswer(None, None, time.monotonic() - start,
                           f"no complete answer within {request.maxLatencySeconds:g} s")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return SmokeAnswer(None, None, time.monotonic() - start,
                           f"{type(exc).__name__}: {exc}"[:300])
    return answer


def _completion_text(said: Any) -> tuple[str | None, str]:
    """A completion's first choice's text, or why the answer is not a completion with usage."""
    choices = said.get("choices") if isinstance(said, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, "the answer has no choices"
    text = choices[0].get("text")
    if not isinstance(text, str):
        return None, "the answer's first choice has no text"
    usage = said.get("usage")
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    counts = [usage.get(k) for k in keys] if isinstance(usage, dict) else []
    ints = [n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    if len(ints) != 3 or ints[0] + ints[1] != ints[2] or ints[0] < 1:
        return None, f"the answer's usage is not token counts: {str(usage)[:120]}"
    return text, ""


def _text_output(said: Any) -> tuple[str | None, str]:
    out = said.get("text_output") if isinstance(said, dict) else None
    return (out, "") if isinstance(out, str) else (None, "")


async def _post(
    url: str, body: Obj, start: float,
    read: Callable[[Any], tuple[str | None, str]] = _text_output,
) -> SmokeAnswer:
    # A compressed answer would be read unbounded once inflated; a redirect would send the
    # request wherever the pod says.
    async with aiohttp.ClientSession(auto_decompress=False) as session, session.post(
        url, json=body, allow_redirects=False, headers={"Accept-Encoding": "identity"}
    ) as resp:
        raw = await _read_capped(resp)
        seconds = time.monotonic() - start
        if raw is None:
            return SmokeAnswer(resp.status, None, seconds,
                               f"the answer is larger than {ANSWER_LIMIT // 1024} KiB")
        text = raw.decode("utf-8", errors="replace")
        if resp.status != 200:
            return SmokeAnswer(resp.status, None, seconds, text[:500])
        try:
            said = json.loads(text)
        except ValueError:
            return SmokeAnswer(resp.status, None, seconds, f"not JSON: {text[:200]}")
        out, why = read(said)
        return SmokeAnswer(200, out, seconds, why)


async def _read_capped(resp: aiohttp.ClientResponse) -> bytes | None:
    """The body, or None when it is longer than ANSWER_LIMIT (not read past that)."""
    if (resp.content_length or 0) > ANSWER_LIMIT:
        return None
    chunks: list[bytes] = []
    size = 0
    while size <= ANSWER_LIMIT:
        chunk = await resp.content.read(ANSWER_LIMIT + 1 - size)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    return None
