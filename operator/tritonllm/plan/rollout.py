"""The rollout gate: whether the serving workload may move to the rendered revision now.

spec.rollout.strategy Verified (the default): a change of what the serving pods run first starts
the new revision on a verification workload (`<name>-verify`: one pod, or one group, that the
Service does not select), and the operator sends its Ready pod the smoke set (the handlers do the
HTTP requests, `judge` decides). Only a revision that answered every request may reach the
serving workload, which then rolls over as before (one surge pod at a time, maxUnavailable 0). A
revision that fails (a wrong, slow or missing answer, a crashed verification pod, no Ready pod
within rollout.verifyTimeoutSeconds) is recorded in status.rollout as Failed: the serving pods
stay on the revision they run, the verification workload is removed (its GPUs freed), Degraded
says which request failed with the answer it got, and the revision is not tried again until the
spec renders another one (or the strategy is Immediate).

Nothing is verified where there is no traffic to protect: the first deployment, a workload with
no ready replica, and a change that leaves the pod template as it is (replicas).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.spec import SmokeRequest
from tritonllm.api.status import RolloutStatus
from tritonllm.render import Manifest, ObjectRef, Rendered
from tritonllm.render.serving import template_revision, verify_name

from .conditions import Cond
from .observed import Obj, Observed, SmokeAnswer, SmokeRun, WorkloadObs
from .status import Summary
from .writes import Decision, EventNote, parse_time, rfc3339, want

# Quote at most this much of a wrong answer.
ANSWER_QUOTE = 200


def _delivery(request: SmokeRequest, answer: SmokeAnswer) -> str | None:
    """What was wrong with how an answer came (none, not 200, too late), before its content."""
    if answer.status is None:
        return f"no answer after {answer.seconds:.1f} s: {answer.error}"
    if answer.status != 200:
        return f"HTTP {answer.status}: {answer.error[:ANSWER_QUOTE]}"
    if answer.seconds > request.maxLatencySeconds:
        return f"answered in {answer.seconds:.1f} s, above maxLatencySeconds " \
               f"{request.maxLatencySeconds:g}"
    return None


def judge(request: SmokeRequest, answer: SmokeAnswer) -> str | None:
    """None when the answer passes; else what was wrong with it."""
    if (problem := _delivery(request, answer)) is not None:
        return problem
    text = answer.text
    if text is None:  # why, when the handlers could tell (not JSON, too large)
        return answer.error[:ANSWER_QUOTE] or "the answer has no text_output"
    if request.expectExact is not None:
        return None if text == request.expectExact else \
            f"answered {text[:ANSWER_QUOTE]!r}, expected exactly {request.expectExact!r}"
    if request.expectPrefix is not None and not text.startswith(request.expectPrefix):
        return f"answered {text[:ANSWER_QUOTE]!r}, expected it to start with " \
               f"{request.expectPrefix!r}"
    # With no expectation, any answer passes, an empty one too: a model may end at once (its
    # first token the end id), which is not a fault of the engine.
    return None


def verdict(dep: TritonLLMDeployment, run: SmokeRun) -> tuple[bool, str]:
    """(passed, what to say): the first request that failed, or a summary of all."""
    smoke = dep.spec.rollout.smoke_set
    for i, (request, answer) in enumerate(zip(smoke, run.answers, strict=False)):
        wrong = judge(request, answer)
        if wrong is not None:
            return False, f"smoke request {i + 1} of {len(smoke)} to pod {run.pod} " \
                          f"(prompt {request.prompt[:80]!r}): {wrong}"
    if len(run.answers) < len(smoke):
        return False, f"only {len(run.answers)} of {len(smoke)} smoke requests were sent"
    wrong = None if run.openai is None else judge_openai(smoke[0], run.openai)
    if wrong is not None:
        return False, f"the OpenAI smoke request (/v1/completions, prompt " \
                      f"{smoke[0].prompt[:80]!r}) to pod {run.pod}: {wrong}"
    slowest = max((a.seconds for a in run.answers), default=0.0)
    also = " and the OpenAI request" if run.openai is not None else ""
    return True, f"pod {run.pod} answered all {len(smoke)} smoke requests{also} (slowest " \
                 f"{slowest:.2f} s)"


def judge_openai(request: SmokeRequest, answer: SmokeAnswer) -> str | None:
    """The OpenAI request passes with HTTP 200, a choice with text and the usage (the handlers
    put what was missing in `error`), within the first request's latency bound."""
    if (problem := _delivery(request, answer)) is not None:
        return problem
    if answer.text is None:
        return answer.error[:ANSWER_QUOTE] or "the answer has no choice with text"
    return None


@dataclasses.dataclass(frozen=True)
class Gate:
    """The gate's decision for this pass."""

    open: bool  # the serving workload may be applied with the rendered revision
    status: dict[str, Any] | None = None  # status.rollout (None: left as it is)
    degraded: Cond | None = None  # replaces Degraded and Progressing when set
    progressing: Cond | None = None

    def fields(self) -> dict[str, Any]:
        """The status fields the gate decides (status.rollout, when it changes)."""
        return {} if self.status is None else {"rollout": RolloutStatus.model_validate(self.status)}

    def amend(self, summary: Summary) -> Summary:
        """The summary with the gate's conditions, while it holds the rollout."""
        if self.degraded is not None:
            progress = Cond(c.COND_PROGRESSING, "False", r.VERIFICATION_FAILED,
                            "the serving pods stay on the revision they run")
            return Summary(self.degraded, progress, r.VERIFICATION_FAILED)
        if self.progressing is not None:
            return Summary(summary.degraded, self.progressing, r.VERIFYING)
        return summary


def rollout_gate(
    p: Decision, dep: TritonLLMDeployment, rendered: Rendered, obs: Observed, old: Obj | None
) -> Gate:
    """Whether the rendered workload may be applied now; wants the verification workload while
    its revision is verified, and removes it otherwise. `old`: status.rollout as it is."""
    verify = rendered.verify_workload
    target = template_revision(rendered.workload.body)
    record = dict(old or {})
    live = obs.workload
    if verify is None or target is None or live is None or template_revision(live) == target:
        remove_verification(p, dep, obs)  # nothing to verify: Immediate, first, or no change
        return Gate(open=True)
    same = record.get("revision") == target
    if same and record.get("state") == "Failed":  # even with no replica ready: known bad
        remove_verification(p, dep, obs)
        return _failed(record)
    if (same and record.get("state") == "Verified") or WorkloadObs.of(live).ready == 0:
        remove_verification(p, dep, obs)  # passed, or no traffic to protect
        return Gate(open=True)
    started = str(record.get("started") or "") if same else ""
    started = started or rfc3339(obs.now)
    outcome = _outcome(dep, obs, target, started)
    if outcome is not None:
        return _decided(p, dep, obs, target, started, outcome)
    fresh = not same or record.get("state") != "Verifying"
    return _verifying(p, dep, obs, verify, target, started, fresh=fresh)


def _decided(
    p: Decision,
    dep: TritonLLMDeployment,
    obs: Observed,
    target: str,
    started: str,
    outcome: tuple[bool, str],
) -> Gate:
    """The verdict: recorded; the verification workload goes; the gate opens if it passed."""
    passed, message = outcome
    status = {"revision": target, "state": "Verified" if passed else "Failed",
              "message": message, "started": started, "finished": rfc3339(obs.now)}
    remove_verification(p, dep, obs)
    if passed:
        p.events.append(EventNote("Normal", r.VERIFIED, f"revision {target}: {message}; the "
                                  "serving workload rolls over to it"))
        return Gate(open=True, status=status)
    return dataclasses.replace(_failed(status), status=status)


def _verifying(
    p: Decision,
    dep: TritonLLMDeployment,
    obs: Observed,
    verify: Manifest,
    target: str,
    started: str,
    *,
    fresh: bool,
) -> Gate:
    """No verdict yet: the verification workload runs the target revision; the serving one
    stays as it is."""
    want(p, obs, verify)
    said = f"verifying revision {target} on {verify.kind} {verify.name} (no client traffic) " \
           "before the serving pods move to it"
    if fresh:
        p.events.append(EventNote("Normal", r.VERIFYING, said))
    p.requeue(_seconds_left(dep, obs, started) + 1)
    status = {"revision": target, "state": "Verifying", "started": started, "message": said}
    progressing = Cond(c.COND_PROGRESSING, "True", r.VERIFYING, f"{said}: {_waiting(obs)}")
    return Gate(open=False, status=status, progressing=progressing)


def _outcome(
    dep: TritonLLMDeployment, obs: Observed, target: str, started: str
) -> tuple[bool, str] | None:
    """The verdict reached this pass, if any: the smoke run, a failed pod, or the timeout."""
    if obs.verify_failure:
        return False, f"the verification pod failed: {obs.verify_failure}"
    if obs.smoke is not None and obs.smoke.revision == target:
        return verdict(dep, obs.smoke)
    if _seconds_left(dep, obs, started) <= 0:
        why = f"; {obs.unschedulable}" if obs.unschedulable else ""
        return False, f"no verification pod was Ready within rollout.verifyTimeoutSeconds " \
                      f"({dep.spec.rollout.verifyTimeoutSeconds} s){why}"
    return None


def _seconds_left(dep: TritonLLMDeployment, obs: Observed, started: str) -> float:
    begun = parse_time(started) or obs.now
    deadline = begun + dt.timedelta(seconds=dep.spec.rollout.verifyTimeoutSeconds)
    return (deadline - obs.now).total_seconds()


def _waiting(obs: Observed) -> str:
    if obs.verify_workload is None:
        return "creating its verification workload"
    if obs.unschedulable:
        return f"its pod cannot be scheduled: {obs.unschedulable}"
    if WorkloadObs.of(obs.verify_workload).ready > 0:
        return "sending the smoke set"
    return "waiting for its pod to be Ready (engine check, model load)"


def _failed(record: Obj) -> Gate:
    message = f"revision {record.get('revision')} failed verification: {record.get('message')}; "
    message += "the serving pods stay on the revision they run; change the spec (or set "
    message += "rollout.strategy Immediate) to try again"
    return Gate(open=False, degraded=Cond(c.COND_DEGRADED, "True", r.VERIFICATION_FAILED, message))


def remove_verification(p: Decision, dep: TritonLLMDeployment, obs: Observed) -> None:
    if obs.verify_workload is not None:
        topology = dep.spec.topology
        p.delete.append(ObjectRef(topology.workload_api_version, topology.workload_kind,
                                  dep.namespace, verify_name(dep)))
