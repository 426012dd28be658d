"""Multi-node for real: LeaderWorkerSet groups of real pods on the real node, mpirun over SSH
through the pod network, every rank a real tritonserver in its own pod.

examples/cpu-standin-multinode.yaml is applied with kubectl (tp 2 across a group of two pods,
one rank per pod), then a world of 4 with two ranks per pod. The leader's `tritonllm launch`
waits for each worker's sshd to accept mpirun's own login, writes the hostfile and runs mpirun,
whose rank map (--display-map) says which pod runs which rank. The NetworkPolicy the operator
renders is enforced (kube-router's firewall on the real node): pods of another namespace reach
neither sshd nor the serving ports, pods of the namespace reach the serving ports only.

Failures, each shown in the deployment's status and recovered with no manual step: a worker pod
deleted while serving (LeaderWorkerSet recreates the group), a worker the leader cannot reach (a
policy that blocks the group's egress: the leader's bounded login check names the worker and
the port, ServingPodFailed, and the group retries until the policy is lifted), a rank killed
(mpirun stops, the group is recreated rather than serving with a missing rank). Then a rollout
of two groups under load loses no request.

Simulated: the GPUs (the stand-in answers on CPU) and TensorRT-LLM's tools. Real: the pods,
containers, sshd, mpirun, tritonserver, DNS, kube-proxy, the policy enforcer, LeaderWorkerSet.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cases import ROOT
from tests.cluster.operator_harness import Operator, get_cr, run_operator, wait_condition
from tests.cluster.test_real_flow import (
    COUNT_TRITONSERVERS,
    EXPECTED_4,
    PROMPT,
    SEED,
    _diagnose,
    _first_answer,
    _grpc_stream,
    _post,
    _service_ip,
    _sse_events,
    asks,
    restrict,
    script_pod,
)
from tests.cluster.test_real_lifecycle import Load
from tests.helpers import example_body
from tritonllm_dev import images
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import REGISTRY_ADDR
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

EXAMPLE = ROOT / "examples" / "cpu-standin-multinode.yaml"
NAME = "cpu-standin-multinode"
GROUP_TIMEOUT = 420  # typically 30-60 s cold (build included) on 2 shared cores
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
# Open MPI's --display-map: a "Data for node: <host>" block per host, a line per rank in it.
MAP_NODE = re.compile(r"Data for node: (\S+)")
MAP_RANK = re.compile(r"Process rank: (\d+)")


@dataclass
class Env:
    cluster: LocalCluster
    ns: str
    op: Operator
    tmp: Path
    refs: dict[str, str]
    # How each deployment is asked for tokens (its model and length input), read from its CR.
    asked: dict[str, dict[str, str]] = field(default_factory=dict)

    def asks(self, name: str) -> dict[str, str]:
        if name not in self.asked:
            self.asked[name] = asks(get_cr(self.cluster, self.ns, name))
        return self.asked[name]

    def kubectl(self, *args: str, check: bool = True) -> Any:
        return self.cluster.kubectl("-n", self.ns, *args, check=check)

    def group_pods(self, name: str) -> list[dict[str, Any]]:
        pods = self.cluster.kubectl_json("get", "pods", "-n", self.ns, "-l", f"{LWS_NAME}={name}")
        return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]

    def url(self, name: str, path: str = "generate") -> str:
        model = self.asks(name)["model"]
        return f"http://{_service_ip(self.cluster, self.ns, name)}:8000/v2/models/{model}/{path}"

    def answer(self, name: str) -> str | None:
        body = {"text_input": PROMPT, self.asks(name)["length_input"]: 4}
        try:
            out = json.loads(_post(self.url(name), body, 20))
        except OSError:
            return None
        return str(out.get("text_output"))

    def stream(self, name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """generate_stream through the operator's Service: each event's JSON."""
        return _sse_events(_post(self.url(name, "generate_stream"), body))

    def diagnose(self) -> str:
        return _diagnose(self.cluster, self.ns, self.op)


@pytest.fixture(scope="module")
def env(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with group_env(cluster, tmp_path_factory, "mn") as made:
        yield made


@contextlib.contextmanager
def group_env(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory,
              prefix: str) -> Iterator[Env]:
    """A restricted namespace with the seeded store and an operator (the groups' modules)."""
    ns = f"{prefix}-{int(time.time()) % 100000}"
    cluster.kubectl("create", "namespace", ns)
    refs = images.ensure_images(REGISTRY_ADDR)
    restrict(cluster, ns)
    cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
    cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                    "--timeout=240s", timeout=270)
    tmp = tmp_path_factory.mktemp("multinode")
    with run_operator(cluster, ns, tmp, tools_image=refs["operator"]) as op:
        yield Env(cluster, ns, op, tmp, refs)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def example(name: str = NAME, **spec: Any) -> dict[str, Any]:
    obj = example_body(EXAMPLE.stem, **spec)
    obj["metadata"] = {"name": name}
    return obj


def ready_and_answering(env: Env, name: str, timeout: float = GROUP_TIMEOUT) -> float:
    start = time.monotonic()
    _first_answer(env.cluster, env.ns, name, env.op, timeout, **env.asks(name))
    return time.monotonic() - start


def rank_map(env: Env, leader: str) -> dict[int, str]:
    """Rank -> host, from the leader's mpirun --display-map."""
    log = env.kubectl("logs", leader, "-c", "triton").stdout
    ranks: dict[int, str] = {}
    host = ""
    for line in log.splitlines():
        if m := MAP_NODE.search(line):
            host = m.group(1)
        elif (m := MAP_RANK.search(line)) and host:
            ranks[int(m.group(1))] = host
    assert ranks, log[-4000:]
    return ranks


def tritonservers(env: Env, pod: str) -> int:
    out = env.kubectl("exec", pod, "-c", "triton", "--", "python3", "-c", COUNT_TRITONSERVERS)
    return int(out.stdout.strip())


def leader_and_worker(env: Env, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    pods = env.group_pods(name)
    leader = [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component")
              == "server"]
    workers = [p for p in pods if p not in leader]
    assert len(leader) == 1, [p["metadata"]["name"] for p in pods]
    return leader[0], workers


def test_a_group_of_two_pods_serves_with_one_rank_in_each(env: Env) -> None:
    start = time.monotonic()
    env.cluster.kubectl("apply", "-n", env.ns, "-f", str(EXAMPLE))
    ready_and_answering(env, NAME)
    took = time.monotonic() - start
    print(f"\n[measure] multi-node tp2 (2 pods): apply -> first answer {took:.1f} s (with build)")
    leader, workers = leader_and_worker(env, NAME)
    assert len(workers) == 1
    worker = workers[0]
    # Every rank a real tritonserver in its own pod: the map names the leader by its hostname
    # and the worker by the pod IP the login check resolved from its stable DNS name.
    ranks = rank_map(env, leader["metadata"]["name"])
    assert ranks == {0: leader["metadata"]["name"], 1: worker["status"]["podIP"]}, ranks
    assert tritonservers(env, leader["metadata"]["name"]) == 1
    assert tritonservers(env, worker["metadata"]["name"]) == 1
    log = env.kubectl("logs", leader["metadata"]["name"], "-c", "triton").stdout
    dns = f"{worker['metadata']['name']}.{leader['metadata']['name']}.{env.ns}"
    assert f"event=worker-ready host={dns} address={worker['status']['podIP']}" in log, log[-3000:]
    # generate, generate_stream (SSE) and gRPC streaming through the operator's Service.
    assert env.answer(NAME) == EXPECTED_4
    events = env.stream(NAME, {"text_input": PROMPT, "max_tokens": 3, "stream": True})
    assert len(events) >= 2 and all("text_output" in e for e in events), events
    grpc = _grpc_stream(f"{_service_ip(env.cluster, env.ns, NAME)}:8001")
    assert grpc and "".join(grpc).strip(), grpc


def _probe_pod(env: Env, ns: str, name: str, targets: list[tuple[str, int]]) -> dict[str, bool]:
    """A pod that tries TCP connections to the targets again and again for 15 s (the enforcer
    learns a new pod's IP a moment after the pod starts); which ones ever opened."""
    script = (
        "import json, socket, time\n"
        f"targets = {targets!r}\n"
        "out = {f'{h}:{p}': False for h, p in targets}\n"
        "end = time.monotonic() + 15\n"
        "while time.monotonic() < end and not all(out.values()):\n"
        "    for host, port in targets:\n"
        "        if out[f'{host}:{port}']:\n"
        "            continue\n"
        "        try:\n"
        "            socket.create_connection((host, port), timeout=1).close()\n"
        "            out[f'{host}:{port}'] = True\n"
        "        except OSError:\n"
        "            pass\n"
        "    time.sleep(0.5)\n"
        "print('PROBE', json.dumps(out))\n"
    )
    pod = script_pod(env.refs["triton-standin"], name, script, namespace=ns, container="probe")
    env.cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:
        wait_for(lambda: env.cluster.kubectl_json("get", "pod", name, "-n", ns)["status"].get(
            "phase") in ("Succeeded", "Failed"), timeout=120, interval=1, what=f"{name} done")
        log = env.cluster.kubectl("logs", name, "-n", ns).stdout
    finally:
        env.cluster.kubectl("delete", "pod", name, "-n", ns, "--wait=false", check=False)
    line = next(x for x in log.splitlines() if x.startswith("PROBE "))
    return {k: bool(v) for k, v in json.loads(line[6:]).items()}


def test_the_rendered_network_policy_is_enforced_between_real_pods(env: Env) -> None:
    leader, workers = leader_and_worker(env, NAME)
    lip, wip = leader["status"]["podIP"], workers[0]["status"]["podIP"]
    targets = [(lip, 8000), (lip, 8001), (lip, 8002), (wip, 2222), (lip, 2222)]
    other = f"{env.ns}-other"
    env.cluster.kubectl("create", "namespace", other, check=False)
    restrict(env.cluster, other)
    try:
        outside = _probe_pod(env, other, "probe-outside", targets)
    finally:
        env.cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
    inside = _probe_pod(env, env.ns, "probe-inside", targets)
    print(f"\n[measure] policy: same namespace {inside}; other namespace {outside}")
    # Another namespace reaches nothing of the group; a pod of the namespace that is not in
    # the group reaches the serving ports and not sshd; the group itself runs (its leader
    # reached the worker's sshd: the first test).
    assert not any(outside.values()), outside
    assert all(inside[f"{lip}:{p}"] for p in (8000, 8001, 8002)), inside
    assert not inside[f"{wip}:2222"], inside


def wait_new_group(env: Env, name: str, old: set[str]) -> None:
    """Until a group of pods none of which is in `old` (uids) answers."""
    def recovered() -> bool:
        uids = {p["metadata"]["uid"] for p in env.group_pods(name)}
        return len(uids) == 2 and not uids & old and env.answer(name) == EXPECTED_4

    try:
        wait_for(recovered, timeout=240, interval=0.5, what="a new group answers")
    except Exception as exc:
        raise AssertionError(f"{exc}\n{env.diagnose()}") from exc


def lose_the_worker(env: Env, name: str, what: str) -> None:
    """The group's worker pod deleted: LeaderWorkerSet recreates the whole group (its
    RecreateGroup event: it deleted the leader pod) and the new group answers. `what` names the
    measurement."""
    leader, workers = leader_and_worker(env, name)
    old = {leader["metadata"]["uid"], workers[0]["metadata"]["uid"]}
    start = time.monotonic()
    env.kubectl("delete", "pod", workers[0]["metadata"]["name"], "--wait=false")
    wait_new_group(env, name, old)
    took = time.monotonic() - start
    print(f"\n[measure] {what}: worker deleted -> new group answers {took:.1f} s")
    events = env.kubectl("get", "events", "--field-selector", "reason=RecreateGroup",
                         "-o", "json").stdout
    assert "deleted leader pod" in events, events[-2000:]


def test_a_lost_worker_recreates_the_group_and_it_answers_again(env: Env) -> None:
    lose_the_worker(env, NAME, "multi-node")


def _events(env: Env, name: str) -> list[dict[str, Any]]:
    out = env.cluster.kubectl_json("get", "events", "-n", env.ns, "--field-selector",
                                   f"involvedObject.name={name},involvedObject.kind="
                                   "TritonLLMDeployment")
    return list(out["items"])


def test_a_killed_rank_restarts_the_group_instead_of_serving_without_it(env: Env) -> None:
    leader, workers = leader_and_worker(env, NAME)
    old = {leader["metadata"]["uid"], workers[0]["metadata"]["uid"]}
    start = time.monotonic()
    kill = ("import os, signal\n"
            "for p in os.listdir('/proc'):\n"
            "    if p.isdigit() and open(f'/proc/{p}/cmdline','rb').read().split(b'\\0')[0]"
            ".endswith(b'/tritonserver'):\n"
            "        os.kill(int(p), signal.SIGKILL)\n")
    env.kubectl("exec", workers[0]["metadata"]["name"], "-c", "triton", "--", "python3", "-c",
                kill)
    wait_new_group(env, NAME, old)
    took = time.monotonic() - start
    print(f"\n[measure] multi-node: rank killed -> new group answers {took:.1f} s")
    # The leader's mpirun exited non-zero when the rank died; the operator said so.
    failed = [e for e in _events(env, NAME) if e.get("reason") == "ServingPodFailed"]
    assert failed and "exited with code" in failed[-1]["message"], _events(env, NAME)


def test_an_unreachable_worker_is_named_and_the_group_retries(env: Env) -> None:
    """A policy that blocks the group's egress (a default-deny egress, as many clusters have):
    the leader's login check gives up after its bound, the condition names the worker and the
    port, the group is recreated and tries again; once the policy is lifted it serves."""
    name = "mn-blocked"
    block = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-egress", "namespace": env.ns},
        "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/instance": name}},
                 "policyTypes": ["Egress"],
                 "egress": [{"ports": [{"protocol": "UDP", "port": 53},
                                       {"protocol": "TCP", "port": 53}]}]},
    }
    env.cluster.apply([block])
    env.kubectl("delete", "tllm", NAME, "--wait=true", "--timeout=120s")
    obj = example(name)
    obj["spec"]["podTemplate"]["env"] = [{"name": "TRITONLLM_WORKER_WAIT_TIMEOUT", "value": "15"}]
    env.cluster.kubectl("apply", "-n", env.ns, "-f", "-", input=json.dumps(obj))
    try:
        cr = wait_condition(env.cluster, env.ns, name, "Degraded", "True",
                            reason="ServingPodFailed", timeout=240)
    except Exception as exc:
        raise AssertionError(f"{exc}\n{env.diagnose()}") from exc
    message = next(c for c in cr["status"]["conditions"] if c["type"] == "Degraded")["message"]
    print(f"\n[measure] unreachable worker: {message}")
    worker = f"{name}-0-1.{name}-0.{env.ns}:2222"
    assert worker in message and "no SSH login to the workers after 15s" in message, message
    describe = env.kubectl("describe", "tllm", name).stdout
    assert "ServingPodFailed" in describe and worker in describe, describe[-3000:]
    lifted = time.monotonic()
    env.kubectl("delete", "networkpolicy", "deny-egress")
    try:
        wait_for(lambda: env.answer(name) == EXPECTED_4, timeout=240, interval=1,
                 what="the group answers once the policy is lifted")
    except Exception as exc:
        raise AssertionError(f"{exc}\n{env.diagnose()}") from exc
    print(f"[measure] unreachable worker: policy lifted -> group answers "
          f"{time.monotonic() - lifted:.1f} s (no manual step)")
    wait_condition(env.cluster, env.ns, name, "Degraded", "False", timeout=60)
    env.kubectl("delete", "tllm", name, "--wait=true", "--timeout=120s")


def test_world_size_four_with_two_ranks_per_pod(env: Env) -> None:
    name = "mn-world4"
    obj = example(name, engine={"parallelism": {"tensor": 2, "pipeline": 2}},
                  gpu={"perNode": 2})
    start = time.monotonic()
    env.cluster.kubectl("apply", "-n", env.ns, "-f", "-", input=json.dumps(obj))
    ready_and_answering(env, name)
    print(f"\n[measure] multi-node tp2 x pp2 (2 pods x 2 ranks): apply -> first answer "
          f"{time.monotonic() - start:.1f} s (build included)")
    leader, workers = leader_and_worker(env, name)
    ranks = rank_map(env, leader["metadata"]["name"])
    lname, wip = leader["metadata"]["name"], workers[0]["status"]["podIP"]
    assert ranks == {0: lname, 1: lname, 2: wip, 3: wip}, ranks
    assert tritonservers(env, lname) == 2
    assert tritonservers(env, workers[0]["metadata"]["name"]) == 2
    env.kubectl("delete", "tllm", name, "--wait=true", "--timeout=120s")


def roll_under_load(env: Env, name: str, changed: dict[str, Any],
                    pods: int) -> tuple[int, list[str], float, set[str]]:
    """Apply `changed` under steady load and wait until every group rolled over (Deployed, `pods`
    pods, none of the old ones): (answered, failures, seconds, verification pods seen)."""
    before = {p["metadata"]["uid"] for p in env.group_pods(name)}
    verify_pods: set[str] = set()

    def rolled() -> bool:
        verify_pods.update(p["metadata"]["name"] for p in env.group_pods(f"{name}-verify"))
        now = env.group_pods(name)
        cr = get_cr(env.cluster, env.ns, name)
        done = any(c["type"] == "Progressing" and c["reason"] == "Deployed"
                   for c in (cr.get("status") or {}).get("conditions") or [])
        return done and len(now) == pods and not {p["metadata"]["uid"] for p in now} & before

    with Load(env.url(name), length_input=env.asks(name)["length_input"]) as load:
        time.sleep(2)
        start = time.monotonic()
        env.cluster.kubectl("apply", "-n", env.ns, "-f", "-", input=json.dumps(changed))
        try:
            wait_for(rolled, timeout=420, interval=1, what="every group rolled over")
        except Exception as exc:
            raise AssertionError(f"{exc}\n{env.diagnose()}") from exc
        seconds = time.monotonic() - start
        time.sleep(3)
        end = time.monotonic()
    answered, failures = load.between(start, end)
    return answered, failures, seconds, verify_pods


def test_a_rollout_of_two_groups_loses_no_request(env: Env) -> None:
    name = "mn-rollout"
    obj = example(name, serving={"replicas": 2})
    env.cluster.kubectl("apply", "-n", env.ns, "-f", "-", input=json.dumps(obj))
    ready_and_answering(env, name)
    wait_for(lambda: len(env.group_pods(name)) == 4 and (get_cr(env.cluster, env.ns, name)
             .get("status") or {}).get("readyReplicas") == 2, timeout=240, interval=1,
             what="two groups ready")
    changed = copy.deepcopy(obj)
    # A launch setting: the repository (and so the pods) change, the engine does not.
    changed["spec"]["serving"]["kvCache"] = {"freeGpuMemFraction": 0.8}
    answered, failures, seconds, verify_pods = roll_under_load(env, name, changed, pods=4)
    rollout = get_cr(env.cluster, env.ns, name)["status"]["rollout"]
    print(f"\n[measure] multi-node rollout, 2 groups: {answered + len(failures)} requests, "
          f"{len(failures)} failed, {seconds:.1f} s; verified first on a group of its own: "
          f"{rollout['message']}")
    assert answered > 20 and not failures, failures[:5]
    # The change was verified first, on a one-group LeaderWorkerSet of its own (spec.rollout's
    # default): its leader answered the smoke set, then it was removed.
    assert rollout["state"] == "Verified", rollout
    assert f"pod {name}-verify-0 answered all 1 smoke requests" in rollout["message"], rollout
    assert verify_pods == {f"{name}-verify-0", f"{name}-verify-0-1"}, verify_pods
    assert not env.group_pods(f"{name}-verify")
    env.kubectl("delete", "tllm", name, "--wait=true", "--timeout=120s")
