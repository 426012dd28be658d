"""Multi-node on the LLM API runtime, for real: a LeaderWorkerSet group of two real pods on the
real node, started by the same group machinery as the engine runtime's (tests/cluster/
test_real_multinode.py: stable names, the leader's SSH login check, the hostfile, mpirun over SSH,
the NetworkPolicy), every rank under `trtllm-llmapi-launch` as TensorRT-LLM documents multi-node
LLM API serving.

examples/cpu-standin-llmapi-multinode.yaml is applied with kubectl (tp 2 across the group, one
rank per pod): rank 0 runs tritonserver with the llmapi model in the leader and serves through the
operator's Service; rank 1 runs the LLM API's worker in the worker pod, with no tritonserver, and
holds a TCP connection to the leader across the pod network, through the rendered NetworkPolicy.
The leader's `openai` sidecar answers the official `openai` SDK through the Service's port 9000.
Then the failures the engine runtime's groups recover from: a worker pod deleted (LeaderWorkerSet
recreates the group), a rank killed (mpirun stops, the group is recreated rather than serving with
a missing rank, and the operator says so: ServingPodFailed); and a verified rollout of the group
under load that loses no request.

Simulated: the GPUs, and TensorRT-LLM (the stand-in image's `tensorrt_llm` package and its
`trtllm-llmapi-launch`, whose worker ranks connect to the leader over TCP where the real LLM API
uses MPI). Real: the pods, containers, sshd, mpirun, tritonserver, DNS, kube-proxy, the policy
enforcer, LeaderWorkerSet.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.cases import ROOT
from tests.cluster.operator_harness import get_cr
from tests.cluster.test_real_flow import EXPECTED_4, PROMPT, _service_ip
from tests.cluster.test_real_multinode import (
    Env,
    _events,
    group_env,
    leader_and_worker,
    lose_the_worker,
    rank_map,
    ready_and_answering,
    roll_under_load,
    tritonservers,
    wait_new_group,
)
from tests.helpers import example_body
from tritonllm.api import constants as c
from tritonllm_dev.local import LocalCluster

pytestmark = pytest.mark.cluster

EXAMPLE = ROOT / "examples" / "cpu-standin-llmapi-multinode.yaml"
NAME = "cpu-standin-llmapi-multinode"
# Where the stand-in's worker ranks reach the leader (TRITONLLM_STANDIN_LEADER_PORT's default).
STANDIN_LEADER_PORT = 29531
# The processes of the MPI ranks in a pod: what a rank started inherits its rank's environment.
RANK_PROCESSES = (
    "import json, os\n"
    "out = []\n"
    "for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try:\n"
    "        env = open(f'/proc/{p}/environ', 'rb').read().split(b'\\0')\n"
    "        argv = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
    "    except OSError:\n"
    "        continue\n"
    "    rank = [v.split(b'=', 1)[1].decode() for v in env\n"
    "            if v.startswith(b'OMPI_COMM_WORLD_RANK=')]\n"
    "    if rank:\n"
    "        out.append([int(p), int(rank[0]), [a.decode() for a in argv if a]])\n"
    "print(json.dumps(out))\n"
)
# ESTABLISHED TCP connections of the pod's network namespace: [local port, remote IP, port].
CONNECTIONS = (
    "import json, socket, struct\n"
    "out = []\n"
    "for line in open('/proc/net/tcp').read().splitlines()[1:]:\n"
    "    f = line.split()\n"
    "    if f[3] != '01':\n"
    "        continue\n"
    "    ip, port = f[2].split(':')\n"
    "    remote = socket.inet_ntoa(struct.pack('<I', int(ip, 16)))\n"
    "    out.append([int(f[1].split(':')[1], 16), remote, int(port, 16)])\n"
    "print(json.dumps(out))\n"
)


@pytest.fixture(scope="module")
def env(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with group_env(cluster, tmp_path_factory, "mnl") as made:
        yield made


def in_pod(env: Env, pod: str, script: str) -> Any:
    return json.loads(env.kubectl("exec", pod, "-c", "triton", "--", "python3", "-c",
                                  script).stdout)


def test_an_llmapi_group_of_two_pods_serves_with_one_rank_in_each(env: Env) -> None:
    start = time.monotonic()
    env.cluster.kubectl("apply", "-n", env.ns, "-f", str(EXAMPLE))
    ready_and_answering(env, NAME)
    print(f"\n[measure] llmapi multi-node tp2 (2 pods): apply -> first answer "
          f"{time.monotonic() - start:.1f} s (no engine build)")
    leader, workers = leader_and_worker(env, NAME)
    assert len(workers) == 1
    lname, wname = leader["metadata"]["name"], workers[0]["metadata"]["name"]
    lip, wip = leader["status"]["podIP"], workers[0]["status"]["podIP"]
    assert rank_map(env, lname) == {0: lname, 1: wip}
    # Rank 0 is the leader's tritonserver; the worker pod runs rank 1 and no tritonserver.
    assert tritonservers(env, lname) == 1 and tritonservers(env, wname) == 0
    ranks = in_pod(env, wname, RANK_PROCESSES)
    assert ranks and {rank for _, rank, _ in ranks} == {1}, ranks
    assert any("tensorrt_llm.llmapi.mgmn_worker_node" in argv for _, _, argv in ranks), ranks
    # Each stand-in rank says where it runs; mpirun tags and forwards rank 1's line.
    log = env.kubectl("logs", lname, "-c", "triton").stdout
    assert re.search(rf"rank=1 world=2 pid=\d+ host={wname} role=worker", log), log[-3000:]
    # Rank 1 reaches the leader over the pod network, through the group's NetworkPolicy.
    links = in_pod(env, wname, CONNECTIONS)
    assert [lip, STANDIN_LEADER_PORT] in [[ip, port] for _, ip, port in links], links
    assert env.answer(NAME) == EXPECTED_4
    # llmapi's request asks for a stream with its `streaming` input (the ensemble's: `stream`).
    events = env.stream(NAME, {"text_input": PROMPT, env.asks(NAME)["length_input"]: 3,
                               "streaming": True})
    assert len(events) >= 2 and all("text_output" in e for e in events), events
    # The OpenAI API of the group: the leader's `openai` sidecar (the worker has none), through
    # the Service's port 9000, asked with the official SDK.
    containers = {p["metadata"]["name"]: [ctr["name"] for ctr in p["spec"]["containers"]]
                  for p in (leader, *workers)}
    assert "openai" in containers[lname] and "openai" not in containers[wname], containers
    sdk = openai.OpenAI(base_url=f"http://{_service_ip(env.cluster, env.ns, NAME)}:"
                        f"{c.OPENAI_PORT}/v1", api_key="unused", max_retries=0, timeout=60)
    answer = sdk.completions.create(model=NAME, prompt=PROMPT, max_tokens=4)
    assert answer.choices[0].text.split() == EXPECTED_4.split(), answer
    assert answer.usage is not None and answer.usage.completion_tokens == 4, answer


def test_a_lost_llmapi_worker_pod_recreates_the_group(env: Env) -> None:
    lose_the_worker(env, NAME, "llmapi multi-node")


def test_a_killed_llmapi_worker_rank_restarts_the_group(env: Env) -> None:
    """The worker's rank (the launcher and the LLM API worker it started) killed: mpirun stops
    the group, the leader's container exits with mpirun's verdict, LeaderWorkerSet recreates the
    group, and the new group answers; no replica serves with a rank missing."""
    leader, workers = leader_and_worker(env, NAME)
    old = {leader["metadata"]["uid"], workers[0]["metadata"]["uid"]}
    wname = workers[0]["metadata"]["name"]
    pids = [pid for pid, _, _ in in_pod(env, wname, RANK_PROCESSES)]
    assert pids
    start = time.monotonic()
    kill = f"import os, signal\nfor p in {pids!r}:\n    os.kill(p, signal.SIGKILL)\n"
    env.kubectl("exec", wname, "-c", "triton", "--", "python3", "-c", kill)
    wait_new_group(env, NAME, old)
    print(f"\n[measure] llmapi multi-node: rank killed -> new group answers "
          f"{time.monotonic() - start:.1f} s")
    failed = [e for e in _events(env, NAME) if e.get("reason") == "ServingPodFailed"]
    assert failed and "exited with code" in failed[-1]["message"], _events(env, NAME)
    assert "mpirun" in failed[-1]["message"], failed[-1]["message"]
    print(f"[measure] llmapi multi-node: the operator said: {failed[-1]['message']}")


def test_an_llmapi_group_rolls_under_load_with_no_failed_request(env: Env) -> None:
    """A launch setting changed under steady load: verified first on a group of its own, then a
    new group; the old one drains (its leader's SIGTERM reaches the tritonserver that rank 0's
    launcher started) and no request fails."""
    changed = example_body(EXAMPLE.stem)
    changed["spec"]["serving"]["kvCache"] = {"freeGpuMemFraction": 0.8}
    answered, failures, seconds, verify_pods = roll_under_load(env, NAME, changed, pods=2)
    rollout = get_cr(env.cluster, env.ns, NAME)["status"]["rollout"]
    print(f"\n[measure] llmapi multi-node rollout, 1 group: {answered + len(failures)} "
          f"requests, {len(failures)} failed, {seconds:.1f} s; {rollout['message']}")
    assert answered > 10 and not failures, failures[:5]
    assert rollout["state"] == "Verified", rollout
    assert verify_pods == {f"{NAME}-verify-0", f"{NAME}-verify-0-1"}, verify_pods
