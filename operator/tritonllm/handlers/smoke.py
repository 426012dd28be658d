"""The smoke set of a verified rollout: sent by the operator to the verification pod of a new
revision, over HTTP straight to the pod's IP (the Service does not select it). The planner
(tritonllm.plan.rollout) judges the answers; this module only sends the requests and records
what came back.

A pod IP is reachable from the operator's pod (the serving pods' NetworkPolicy admits the
operator's namespace on the HTTP port with a verified rollout: TRITONLLM_OPERATOR_NAMESPACE) and
from a node-local operator. The set is sent once per revision; its answers are kept until the
status records the verdict.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.spec import SmokeRequest
from tritonllm.k8s.client import Kube
from tritonllm.plan import SmokeAnswer, SmokeRun, WorkloadObs
from tritonllm.render.serving import model_name, template_revision

Obj = dict[str, Any]
# Seconds past a request's latency bound before it is given up (its answer is then "none").
GRACE_SECONDS = 5.0
# LeaderWorkerSet labels each pod of a group with its index in the group (the leader's is 0).
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


class SmokeChecks:
    """One smoke run per deployment and revision, kept until the verdict is in the status."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], SmokeRun] = {}

    async def run(
        self,
        kube: Kube,
        dep: TritonLLMDeployment,
        verify: Obj | None,
        target: str | None,
        rollout: Obj | None,
    ) -> SmokeRun | None:
        """The smoke set's answers from the Ready verification pod of `target`; None while
        there is none, or once status.rollout holds the verdict for it."""
        key = (dep.namespace, dep.name)
        done = (rollout or {}).get("revision") == target and (rollout or {}).get("state") in (
            "Verified", "Failed")
        if verify is None or target is None or done or template_revision(verify) != target:
            self._runs.pop(key, None)
            return None
        known = self._runs.get(key)
        if known is not None and known.revision == target:
            return known
        if WorkloadObs.of(verify).ready < 1:
            return None
        pod = await _ready_pod(kube, dep, target)
        if pod is None:
            return None
        ip, name = pod["status"]["podIP"], pod["metadata"]["name"]
        smoke = dep.spec.rollout.smoke_set
        answers = [await send(ip, model_name(dep), request) for request in smoke]
        run = SmokeRun(target, name, tuple(answers))
        self._runs[key] = run
        return run

    def forget(self, namespace: str, name: str) -> None:
        self._runs.pop((namespace, name), None)


async def _ready_pod(kube: Kube, dep: TritonLLMDeployment, target: str) -> Obj | None:
    """The verification pod (a group's leader) of the target revision that is Ready."""
    labels = {c.LABEL_INSTANCE: dep.name, c.LABEL_COMPONENT: c.COMPONENT_VERIFY}
    for pod in await kube.list("v1", "Pod", dep.namespace, labels=labels):
        meta, st = pod["metadata"], pod.get("status") or {}
        if (meta.get("annotations") or {}).get(c.ANNOTATION_REVISION) != target:
            continue
        if (meta.get("labels") or {}).get(LWS_WORKER_INDEX, "0") != "0" or meta.get(
                "deletionTimestamp"):
            continue
        ready = any(x.get("type") == "Ready" and x.get("status") == "True"
                    for x in st.get("conditions") or [])
        if ready and st.get("podIP"):
            return pod
    return None


async def send(ip: str, model: str, request: SmokeRequest) -> SmokeAnswer:
    """One generate request (HTTP, the pod's own port), timed."""
    url = f"http://{ip}:{c.HTTP_PORT}/v2/models/{model}/generate"
    body = {"text_input": request.prompt, "max_tokens": request.maxTokens}
    timeout = aiohttp.ClientTimeout(total=request.maxLatencySeconds + GRACE_SECONDS)
    start = time.monotonic()
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
            url, json=body
        ) as resp:
            raw = await resp.text()
            seconds = time.monotonic() - start
            if resp.status != 200:
                return SmokeAnswer(resp.status, None, seconds, raw[:500])
            try:
                text = (await resp.json(content_type=None)).get("text_output")
            except ValueError:
                return SmokeAnswer(resp.status, None, seconds, f"not JSON: {raw[:200]}")
            return SmokeAnswer(200, text if isinstance(text, str) else None, seconds)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return SmokeAnswer(None, None, time.monotonic() - start,
                           f"{type(exc).__name__}: {exc}"[:300])
