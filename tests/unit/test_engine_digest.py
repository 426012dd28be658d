"""The engine digest anchored outside the store, step by step: the build reports it (its
termination message), the operator records it in the TritonLLMEngine status and renders it into
the launch plan, `tritonllm launch` refuses an engine whose artifact.json is not the reported one,
and the deployment says so (EngineTampered).

The host-level tests run the real `tritonllm build` and `tritonllm launch` (the zipapp, stdlib
only) against FAKE TensorRT-LLM tools (tests/fake_trtllm.py), on a store that an attacker
rewrites: an engine file, artifact.json's checksums and the verification marker all at once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fake_trtllm import FakeImage, image, write_plan
from tests.unit.test_plan import World
from tests.unit.test_runtime_launch import built, run_launch, verified_line
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.plan.observed import build_report, serving_failure
from tritonllm.render import RenderOptions
from tritonllm.runtime import engine_files, report, verified

__all__ = ["image"]  # fixture (pyz: tests/conftest.py)

DIGEST = "sha256:" + "a" * 64
PRINTS = "sha256:" + "b" * 64
REPORT = json.dumps({"engineDigest": DIGEST, "fingerprintDigest": PRINTS})


def build_pod(message: str, *, exit_code: int = 0, owner: str = "job-uid") -> dict[str, Any]:
    return {
        "metadata": {"name": "tritonllm-build-x-abcde", "creationTimestamp": "2026-11-25T08:00:00Z",
                     "ownerReferences": [{"kind": "Job", "uid": owner, "controller": True}]},
        "status": {"containerStatuses": [{"name": "build", "state": {"terminated": {
            "exitCode": exit_code, "message": message}}}]},
    }


JOB = {"metadata": {"uid": "job-uid"}}


def test_a_succeeded_build_pod_reports_both_digests() -> None:
    assert build_report(JOB, [build_pod(REPORT)]) == {"digest": DIGEST,
                                                      "fingerprintDigest": PRINTS}
    only = json.dumps({"engineDigest": DIGEST})
    assert build_report(JOB, [build_pod(only)]) == {"digest": DIGEST}


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (build_pod(REPORT, owner="someone-else"), "a pod the Job does not control"),
        (build_pod(REPORT, exit_code=1), "a failed container"),
        (build_pod("build done\n"), "not JSON"),
        (build_pod(json.dumps({"engineDigest": "sha256:xyz"})), "not a digest"),
        (build_pod(json.dumps({"engineDigest": "a" * 64})), "no sha256: prefix"),
        (build_pod(json.dumps([DIGEST])), "not an object"),
    ],
)
def test_what_is_not_a_report_of_this_job_is_not_read(pod: dict[str, Any], why: str) -> None:
    assert build_report(JOB, [pod]) == {}, why
    assert build_report({"metadata": {}}, [build_pod(REPORT)]) == {}  # a Job without a uid


def opts_of(world: World) -> RenderOptions:
    """As the reconciler renders: the digest of a Ready record."""
    status = world.engine_status or {}
    ready = status.get("state") == "Ready"
    return RenderOptions(engine_digest=status.get("digest") if ready else None,
                         engine_fingerprints=status.get("fingerprintDigest"))


def repository_plan_of(world: World) -> dict[str, Any]:
    cm = world.objects[("ConfigMap", world.render.repository_configmap.name)]
    launch_key = next(k for k in cm["data"] if k.endswith("launch.json"))
    return dict(json.loads(cm["data"][launch_key]))


def test_the_recorded_digest_reaches_the_launch_plan_before_the_repository_is_written() -> None:
    w = World(build_pods=[build_pod(REPORT)])
    w.step()
    w.finish_job(w.render.build_job.name)
    p = w.step(opts_of(w))
    # Recorded from the build pod's report; this pass rendered no digest, so it writes no
    # repository (its plan would name none) and looks again soon.
    assert w.engine_status["state"] == "Ready"
    assert (w.engine_status["digest"], w.engine_status["fingerprintDigest"]) == (DIGEST, PRINTS)
    assert ("Job", w.render.repository_job.name) not in w.objects
    assert p.requeue_after is not None and p.requeue_after <= 5
    undigested = w.render.repository_key
    w.step(opts_of(w))
    assert w.render.repository_key != undigested  # the digest is part of the revision
    assert ("Job", w.render.repository_job.name) in w.objects
    launch = repository_plan_of(w)
    assert launch["engineDigest"] == {"engine": DIGEST, "fingerprints": PRINTS}
    assert w.render.launch_plan["engineDigest"] == launch["engineDigest"]


def test_a_build_that_reports_nothing_is_ready_as_before_and_says_so() -> None:
    w = World()
    w.step()
    w.finish_job(w.render.build_job.name)
    w.step(opts_of(w))
    assert w.engine_status["state"] == "Ready" and w.engine_status.get("digest") is None
    assert "reported no engine digest" in w.engine_status["message"]
    assert ("Job", w.render.repository_job.name) in w.objects  # nothing to wait for
    assert "engineDigest" not in w.render.launch_plan


def test_a_serving_pod_that_refuses_a_tampered_engine_is_engine_tampered() -> None:
    message = ("[tampered] engine digest mismatch: the engine in /models/engines/x is not the "
               "one its build reported to the operator")
    pod = {"metadata": {"name": "demo-1", "uid": "u",
                        "labels": {c.LABEL_COMPONENT: "server", c.LABEL_INSTANCE: "demo"}},
           "status": {"containerStatuses": [{"name": "triton", "restartCount": 1,
                                             "state": {"waiting": {}}, "lastState": {
                                                 "terminated": {"exitCode": 18,
                                                                "message": message}}}]}}
    failure = serving_failure(pod)
    assert failure is not None
    w = World(serving_failure=failure)
    w.step()
    w.finish_job(w.render.build_job.name)
    w.step()
    w.finish_job(w.render.repository_job.name, uid="repo")
    w.step()
    w.step()
    degraded = w.cond(c.COND_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", r.ENGINE_TAMPERED), degraded
    assert "engine digest mismatch" in degraded["message"]


# --- the real build and launch, on a store rewritten by an attacker -----------------------------


def built_and_reported(img: FakeImage, name: str) -> tuple[dict[str, Any], Path, dict[str, Any]]:
    """Build with the fake tools; the report the build left as its termination message."""
    log = img.root / "termination-log"
    log.write_text("")  # the kubelet creates it; the build writes it only where it exists
    plan, _ = built(img, name, **{verified.ENV_REPORT: str(log)})
    report = json.loads(log.read_text())
    anchored = {**plan, "engineDigest": {"engine": report["engineDigest"],
                                         "fingerprints": report["fingerprintDigest"]}}
    return plan, write_plan(img.root / "etc/launch-anchored.json", anchored), report


def rewrite_store(engine: Path) -> None:
    """What someone who can write the engine directory can do: change a file, then rewrite
    artifact.json's checksums to match, and a verification marker for the new artifact.json."""
    time.sleep(0.05)
    victim = sorted(engine.glob("rank*.engine"))[-1]
    victim.write_bytes(b"evil engine")  # the size of the fake tools' engine files
    reseal(engine)


def reseal(directory: Path) -> None:
    """After a file of the engine directory changed: artifact.json's checksums rewritten to
    match, and a verification marker for the new artifact.json."""
    artifact_path = directory / engine_files.ARTIFACT
    artifact = json.loads(artifact_path.read_text())
    artifact["files"] = engine_files.engine_checksums(directory)
    artifact_path.write_text(json.dumps(artifact))
    _, digest = engine_files.read_artifact(directory)
    names = engine_files.engine_file_paths(directory)
    verified.write_marker(directory, digest, verified.fingerprints(directory, names), by="build")


def test_the_build_reports_the_digest_of_what_artifact_json_records(image: FakeImage) -> None:
    plan, _, report = built_and_reported(image, "llama2-7b-tp4")
    artifact, _ = engine_files.read_artifact(Path(plan["engineDir"]))
    assert report["engineDigest"] == verified.engine_digest(artifact)
    assert report["engineDigest"].startswith("sha256:") and len(report["engineDigest"]) == 71
    assert len(json.dumps(report)) < 4096  # the kubelet's limit of a termination message


def test_launch_refuses_an_engine_rewritten_together_with_its_artifact_json(
    image: FakeImage,
) -> None:
    plan, anchored, _ = built_and_reported(image, "llama2-7b-tp4")
    code, log = run_launch(image, anchored)
    assert code == 0, log  # as built: accepted, without hashing (the reported fingerprints)
    assert "hashed=false" in verified_line(log) and "as the build reported them" in log
    rewrite_store(Path(plan["engineDir"]))
    # Without the anchored digest the rewrite is invisible: every check reads the store.
    unanchored = write_plan(image.root / "etc/launch.json", plan)
    code, log = run_launch(image, unanchored)
    assert code == 0, log
    calls = len(image.calls("mpirun"))
    # With it, launch refuses before anything runs, and says why and what to do.
    code, log = run_launch(image, anchored)
    assert code == report.EXIT_TAMPERED == 18, log
    assert "error=tampered" in log and "engine digest mismatch" in log, log
    assert "not the one its build reported to the operator" in log
    assert "kubectl delete tllme" in log
    assert len(image.calls("mpirun")) == calls  # nothing served


def test_a_touched_but_unchanged_engine_is_hashed_in_full_and_accepted(image: FakeImage) -> None:
    """Fingerprints other than the reported ones (a restored store, a file rewritten with the
    same bytes) cost a full hash, not a refusal; the marker on the store is not consulted."""
    plan, anchored, _ = built_and_reported(image, "llama2-7b-tp4")
    rank0 = Path(plan["engineDir"]) / "rank0.engine"
    time.sleep(0.05)
    rank0.write_bytes(rank0.read_bytes())
    code, log = run_launch(image, anchored)
    assert code == 0, log
    line = verified_line(log)
    assert "hashed=true" in line and "not those the build reported" in line, line
