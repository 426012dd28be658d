"""Verified rollouts on real containers, under a steady client load.

One deployment (the CPU stand-in example with tensor parallelism 1, its smoke set asking for the
exact answer) goes through three changes while clients on the host keep calling it through the
Service: a new checkpoint whose engine loads but answers wrongly, one whose engine crashes at
load, and a good change. The two bad revisions are refused on their verification pod (no client
request reaches them, the serving pod stays as it was, the verification workload is removed and
Degraded says why); the good one rolls over. Every client request of the whole run must get the
right answer, and `kubectl describe` must tell the story in order.

The same story runs on both runtimes: `engine` (examples/cpu-standin.yaml: a build Job per
checkpoint, the ensemble) and `llmapi` (examples/cpu-standin-llmapi.yaml: a fetch Job, the llmapi
model whose LLM loads the checkpoint itself).

Real: the node, the containers, tritonserver, the operator's smoke requests to the pod's IP, the
NetworkPolicy enforcer. SIMULATED: the GPUs, and the two faults (engine: the stand-in's fake build
tools copy a `tritonllm_standin_fault` key from the model's config.json into the engine, and the
stand-in model honours it, tests/triton/standin/tensorrt_llm_cpu_standin.py; llmapi: the stand-in
image's simulated LLM API reads the key from the checkpoint's config.json at load).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.operator_harness import Operator, get_cr, run_operator
from tests.cluster.test_real_flow import (
    EXPECTED_4,
    PROMPT,
    _diagnose,
    _first_answer,
    _pods,
    _service_ip,
    _volume_dir,
    asks,
    seeded,
)
from tests.cluster.test_real_lifecycle import Load
from tests.helpers import example_body
from tritonllm.api import constants as c
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

NAME = "rollout"
STORE = "tritonllm-cpu-store"
FAULT_KEY = "tritonllm_standin_fault"
EXAMPLES = {"engine": "cpu-standin", "llmapi": "cpu-standin-llmapi"}


def rollout_cr(runtime: str = "engine") -> dict[str, Any]:
    obj = example_body(EXAMPLES[runtime])
    obj["metadata"] = {"name": NAME}
    spec = obj["spec"]
    spec["engine"]["parallelism"] = {"tensor": 1, "pipeline": 1}
    # A serving pod and a verification pod (or a build, or a surge pod) fit the node's 2 CPUs.
    spec["podTemplate"]["resources"] = {"cpu": "0.9", "memory": "3Gi"}
    spec["rollout"] = {
        "smoke": [{"prompt": PROMPT, "maxTokens": 4, "expectExact": EXPECTED_4,
                   "maxLatencySeconds": 30}],
        "verifyTimeoutSeconds": 300,
    }
    return obj


def faulty_models(cluster: LocalCluster, ns: str) -> None:
    """Copies of the seeded model whose config.json asks the stand-in for a fault."""
    models = _volume_dir(cluster, ns, STORE) / "models"
    for fault in ("wrong-answer", "crash-at-load"):
        target = models / f"tiny-gpt2-{fault}"
        shutil.copytree(models / "tiny-gpt2", target, dirs_exist_ok=True)
        config = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps({**config, FAULT_KEY: fault}))


def _serving_revisions(cluster: LocalCluster, ns: str) -> set[str]:
    return {p["metadata"]["annotations"].get(c.ANNOTATION_REVISION, "")
            for p in _pods(cluster, ns, c.COMPONENT_SERVER)
            if not p["metadata"].get("deletionTimestamp")}


def _verify_workload(cluster: LocalCluster, ns: str) -> bool:
    out = cluster.kubectl("get", "deployment", f"{NAME}-verify", "-n", ns, check=False)
    return out.returncode == 0


def _patch(cluster: LocalCluster, ns: str, spec: dict[str, Any]) -> None:
    cluster.kubectl("patch", "tllm", NAME, "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": spec}))


def refused(cluster: LocalCluster, ns: str, op: Operator, source: str, said: str) -> float:
    """A change to a bad checkpoint: verified, refused, the serving pod untouched."""
    before = _serving_revisions(cluster, ns)
    earlier = ((get_cr(cluster, ns, NAME).get("status") or {}).get("rollout") or {}).get(
        "revision")
    start = time.monotonic()
    _patch(cluster, ns, {"model": {"source": f"pvc://{STORE}/models/{source}"}})

    def failed() -> dict[str, Any] | None:
        cr = get_cr(cluster, ns, NAME)
        rollout = (cr.get("status") or {}).get("rollout") or {}
        return cr if rollout.get("state") == "Failed" and rollout.get("revision") != earlier \
            else None

    try:
        cr = wait_for(failed, timeout=360, interval=1, what=f"{source} refused")
        wait_for(lambda: not _verify_workload(cluster, ns), timeout=60, interval=1,
                 what="verification workload removed")
    except Exception as exc:
        raise AssertionError(f"{exc}\n{_diagnose(cluster, ns, op)}") from exc
    seconds = time.monotonic() - start
    degraded = next(x for x in cr["status"]["conditions"] if x["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "VerificationFailed", degraded
    assert said in degraded["message"], degraded["message"]
    available = next(x for x in cr["status"]["conditions"] if x["type"] == "Available")
    assert available["status"] == "True", available
    assert _serving_revisions(cluster, ns) == before
    return seconds


@pytest.mark.parametrize("runtime", sorted(EXAMPLES))
def test_verified_rollouts_refuse_bad_engines_and_roll_a_good_one_under_load(
    cluster: LocalCluster, namespace: str, tmp_path: Path, runtime: str
) -> None:
    ns = namespace
    refs = seeded(cluster, ns)
    faulty_models(cluster, ns)
    body = rollout_cr(runtime)
    ask = asks(body)
    with run_operator(cluster, ns, tmp_path, tools_image=refs["operator"]) as op:
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
        _first_answer(cluster, ns, NAME, op, 420, **ask)
        first = _serving_revisions(cluster, ns)
        url = (f"http://{_service_ip(cluster, ns, NAME)}:8000/v2/models/{ask['model']}"
               "/generate")
        with Load(url, ask["length_input"]) as load:
            time.sleep(2)
            start = time.monotonic()
            wrong = refused(cluster, ns, op, "tiny-gpt2-wrong-answer",
                            f"expected exactly '{EXPECTED_4}'")
            crash = refused(cluster, ns, op, "tiny-gpt2-crash-at-load",
                            "the verification pod failed")
            good_start = time.monotonic()
            _patch(cluster, ns, {"model": {"source": f"pvc://{STORE}/models/tiny-gpt2"},
                                 "engine": {"limits": {"maxBatchSize": 2}}})

            def rolled() -> bool:
                cr = get_cr(cluster, ns, NAME)
                st = cr.get("status") or {}
                revisions = _serving_revisions(cluster, ns)
                return ((st.get("rollout") or {}).get("state") == "Verified"
                        and st.get("reason") == "Ready"
                        and cr["metadata"]["generation"] == st.get("observedGeneration")
                        and len(revisions) == 1 and revisions != first
                        and not _verify_workload(cluster, ns))

            try:
                wait_for(rolled, timeout=360, interval=1, what="the good change rolled over")
            except Exception as exc:
                raise AssertionError(f"{exc}\n{_diagnose(cluster, ns, op)}") from exc
            good = time.monotonic() - good_start
            # the good revision's timeline, its verification included
            timeline = wait_for(lambda: (lambda ph: ph if ph and all(p.get("end") for p in ph)
                                         and len(ph) == 6 else None)(
                (get_cr(cluster, ns, NAME).get("status") or {}).get("phases")),
                timeout=60, interval=1, what="the good revision's phases all ended")
            time.sleep(3)
            end = time.monotonic()
        answered, failures = load.between(start, end)
        print(f"\n[measure] verified rollouts under load ({runtime}): "
              f"{answered + len(failures)} requests, "
              f"{len(failures)} failed; wrong-answer engine refused after {wrong:.1f} s, "
              f"crash-at-load engine refused after {crash:.1f} s, good change rolled over "
              f"after {good:.1f} s")
        print(f"[measure] the good change's phases ({runtime}): " + ", ".join(
            f"{p['name']} {p['seconds']:.0f} s" for p in timeline))
        assert [p["name"] for p in timeline] == ["EngineBuild", "RepositoryWrite", "Verification",
                                                 "WaitingForGpus", "PodStart", "ModelLoad"]
        assert not failures, failures[:5]
        assert answered > 30
        described = cluster.kubectl("describe", "tllm", NAME, "-n", ns).stdout
    # (one Event per reason and pass: Degraded and Progressing flip together on a failure)
    events = described[described.index("Events:"):]
    order = [line.split()[1] for line in events.splitlines()
             if len(line.split()) > 1 and line.split()[1] in
             ("Verifying", "VerificationFailed", "Verified")]
    print("[measure] kubectl describe, rollout Events in order: " + " -> ".join(order))
    assert order == ["Verifying", "VerificationFailed", "Verifying",
                               "VerificationFailed", "Verifying", "Verified"], events
