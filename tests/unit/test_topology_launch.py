"""One topology, derived once; one mpirun builder (tritonllm.triton.launch) for every case.

The topology is derived from the spec in tritonllm.api and read everywhere else: the workload and
its GPUs, the build Job, the launch plan (which carries it into the pod) and the mpirun command,
which is complete as rendered, multi-node hosts and SSH agent included.
"""

from __future__ import annotations

import pytest

from tests.cases import ROOT, cr
from tests.helpers import container, ranks
from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, parse_deployment
from tritonllm.api.topology import Topology
from tritonllm.render import Rendered, render_all
from tritonllm.triton.launch import (
    TRTLLM_LLMAPI_LAUNCH,
    MpiSsh,
    launch_spec,
    mpirun_argv,
    rank_args,
    rsh_agent,
)


def r_topology(r: Rendered) -> Topology:
    return Topology.from_wire(r.launch_plan)


# TensorRT-LLM 0.21: both runtimes exist.
LLMAPI_IMAGE = "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3"


def rendered(tensor: int, pipeline: int, per_node: int = 8, runtime: str = "engine") -> Rendered:
    spec = {"engine": {"parallelism": {"tensor": tensor, "pipeline": pipeline}},
            "gpu": {"perNode": per_node}, "runtime": runtime}
    if runtime == "llmapi":
        spec["image"] = LLMAPI_IMAGE
    return render_all(parse_deployment(cr(spec)))


@pytest.mark.parametrize(
    ("tp", "pp", "per_node", "expect"),
    [
        # (world, GPUs per pod, pods per group, ranks per node, workload)
        (1, 1, 8, (1, 1, 1, 1, "Deployment")),
        (4, 1, 8, (4, 4, 1, 4, "Deployment")),
        (1, 2, 8, (2, 2, 1, 2, "Deployment")),
        (8, 2, 8, (16, 8, 2, 8, "LeaderWorkerSet")),
        (4, 4, 4, (16, 4, 4, 4, "LeaderWorkerSet")),
        (2, 1, 1, (2, 1, 2, 1, "LeaderWorkerSet")),
    ],
)
def test_topology_is_derived_once_from_the_spec(
    tp: int, pp: int, per_node: int, expect: tuple[int, int, int, int, str]
) -> None:
    t = Topology.derive(tensor=tp, pipeline=pp, gpus_per_node=per_node)
    assert (t.world_size, t.gpus_per_pod, t.pods_per_group, t.ranks_per_node,
            t.workload_kind) == expect
    assert t.multi_node == (expect[2] > 1)
    assert Topology.from_wire(t.to_wire()) == t
    # Both runtimes lay a world out alike: one pod when it fits a node, else a group.
    for runtime in ("engine", "llmapi"):
        spec = {"engine": {"parallelism": {"tensor": tp, "pipeline": pp}},
                "gpu": {"perNode": per_node}, "runtime": runtime, "image": LLMAPI_IMAGE}
        assert parse_deployment(cr(spec)).spec.topology == t


@pytest.mark.parametrize(("tp", "pp"), [(4, 1), (1, 2), (8, 2)])
def test_every_layer_reads_the_same_topology(tp: int, pp: int) -> None:
    r = rendered(tp, pp)
    t = parse_deployment(cr({"engine": {"parallelism": {"tensor": tp, "pipeline": pp}}})
                         ).spec.topology
    assert Topology.from_wire(r.launch_plan) == t  # the pod reads it from its plan
    step = r.repository_configmap["data"]["repository.json"]
    assert f'"podsPerGroup": {t.pods_per_group}' in step
    assert r.workload.kind == t.workload_kind and r.workload.api_version == t.workload_api_version
    template = "leaderTemplate" if t.multi_node else "template"
    gpus = container(r.workload, template=template)["resources"]["limits"][c.GPU_RESOURCE]
    assert gpus == str(t.gpus_per_pod)
    build = container(r.build_job, "build")["resources"]["limits"][c.GPU_RESOURCE]
    assert build == str(t.gpus_per_pod)
    workers = next(s for s in r.build_plan["steps"] if s["name"] == "build")["argv"]
    assert workers[workers.index("--workers") + 1] == str(t.gpus_per_pod)
    if t.multi_node:
        assert r.workload["spec"]["leaderWorkerTemplate"]["size"] == t.pods_per_group


def test_single_node_argv_runs_every_rank_in_the_pod() -> None:
    r = rendered(4, 1)
    argv = r.launch_plan["argv"]
    assert argv[:3] == ["mpirun", "--allow-run-as-root", "--tag-output"]
    assert ranks(argv) == 4
    assert "--hostfile" not in argv and "plm_rsh_agent" not in argv
    spec = launch_spec(r_topology(r), runtime="engine", model_repository=r.repository_dir)
    assert argv == mpirun_argv(spec)
    segments = " ".join(argv).split(" : ")
    assert "--http-port=8000" in segments[0] and "--allow-http=false" in segments[3]


def test_pipeline_parallel_argv_has_one_rank_per_stage_and_tensor_slice() -> None:
    r = rendered(2, 2)
    argv = r.launch_plan["argv"]
    assert ranks(argv) == 4 and r.launch_plan["worldSize"] == 4
    assert r.launch_plan["podsPerGroup"] == 1 and "--hostfile" not in argv
    spec = launch_spec(r_topology(r), runtime="engine", model_repository=r.repository_dir)
    for rank in range(4):
        assert f"--id=rank{rank}" in rank_args(spec, rank)
        assert f"shm-region-prefix-name=prefix{rank}_" in " ".join(rank_args(spec, rank))


def test_multi_node_argv_is_complete_hosts_and_ssh_agent_included() -> None:
    r = rendered(8, 2)
    plan = r.launch_plan
    argv = plan["argv"]
    ssh = MpiSsh()
    assert argv[3:5] == ["--bind-to", "none"]  # no rank pinned to one core
    assert argv[5:17] == [
        "--hostfile", ssh.hostfile,
        "--mca", "plm", "rsh",  # over an image's OMPI_MCA_plm=isolated
        "--mca", "plm_rsh_agent", rsh_agent(ssh),
        "--mca", "plm_rsh_no_tree_spawn", "1",
        "--display-map",  # which pod runs which rank, in the leader's log
    ]
    assert ranks(argv) == 16
    assert plan["ssh"] == {"port": c.MPI_SSH_PORT, "keyDir": c.MPI_SSH_MOUNT,
                           "workDir": c.MPI_WORKDIR, "agent": rsh_agent(ssh)}
    agent = rsh_agent(ssh).split()
    assert agent[:5] == ["ssh", "-p", "2222", "-i", f"{c.MPI_WORKDIR}/id_ed25519"]
    assert f"UserKnownHostsFile={c.MPI_WORKDIR}/known_hosts" in agent
    spec = launch_spec(r_topology(r), runtime="engine", model_repository=r.repository_dir)
    assert argv == mpirun_argv(spec)


def test_llmapi_runs_one_tritonserver_without_mpirun() -> None:
    r = rendered(2, 1, runtime="llmapi")
    argv = r.launch_plan["argv"]
    assert argv[0].endswith("/tritonserver") and "mpirun" not in argv


def test_llmapi_group_runs_every_rank_under_trtllm_llmapi_launch() -> None:
    """Two pods of one GPU: the engine group's mpirun (hostfile, SSH agent, rank map), then one
    segment of world-size ranks, each `trtllm-llmapi-launch <rank 0's tritonserver>`: the
    launcher runs that command on rank 0 and the LLM API's worker on every other rank."""
    r = rendered(2, 1, per_node=1, runtime="llmapi")
    plan, engine = r.launch_plan, rendered(2, 1, per_node=1).launch_plan
    argv = plan["argv"]
    assert plan["runtime"] == "llmapi" and plan["podsPerGroup"] == 2 and plan["worldSize"] == 2
    assert plan["ssh"] == engine["ssh"]  # the same login check, keys and hostfile
    options = engine["argv"][:engine["argv"].index("-n")]
    assert argv[:len(options)] == options and "--display-map" in options
    spec = launch_spec(r_topology(r), runtime="llmapi", model_repository=r.repository_dir)
    assert argv[len(options):] == ["-n", "2", TRTLLM_LLMAPI_LAUNCH, *rank_args(spec, 0)]
    assert argv == mpirun_argv(spec)
    assert ":" not in argv and ranks(argv) == 0  # one MPMD segment, not one per rank
    assert argv[len(options) + 3] == "/opt/tritonserver/bin/tritonserver"
    assert "--http-port=8000" in argv and not any(a.startswith("--load-model") for a in argv)
    assert f"--model-repository={r.repository_dir}" in argv


def test_llmapi_group_of_two_pods_with_two_ranks_each() -> None:
    r = rendered(2, 2, per_node=2, runtime="llmapi")
    argv = r.launch_plan["argv"]
    assert argv[argv.index("-n"):argv.index("-n") + 3] == ["-n", "4", TRTLLM_LLMAPI_LAUNCH]
    assert r.launch_plan["ranksPerNode"] == 2  # the hostfile's slots: ranks 0-1 on the leader
    lws = r.workload
    assert lws.kind == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    for template in ("leaderTemplate", "workerTemplate"):
        limits = container(lws, template=template)["resources"]["limits"]
        assert limits[c.GPU_RESOURCE] == "2"


def test_llmapi_group_pods_are_the_engine_groups_pods() -> None:
    """Same leader/worker roles, SSH Secret, probes on the leader only, and the NetworkPolicy
    rule that opens every port between the group's pods (MPI between the ranks, and the ports
    TensorRT-LLM's workers use to reach rank 0), nothing else."""
    r, engine = rendered(2, 1, per_node=1, runtime="llmapi"), rendered(2, 1, per_node=1)
    for template in ("leaderTemplate", "workerTemplate"):
        ours, theirs = container(r.workload, template=template), container(engine.workload,
                                                                            template=template)
        assert ours["command"] == theirs["command"]
        assert ("ports" in ours) == ("ports" in theirs) == (template == "leaderTemplate")
        assert any(m["name"] == "mpi-ssh" for m in ours["volumeMounts"])
    policy = r.network_policy
    assert policy is not None and policy == engine.network_policy
    group = [rule for rule in policy["spec"]["ingress"] if "ports" not in rule]
    assert group == [{"from": [{"podSelector": policy["spec"]["podSelector"]}]}]
    assert r.verify_workload is not None and r.verify_workload.kind == "LeaderWorkerSet"


def test_llmapi_on_one_node_keeps_one_tritonserver() -> None:
    r = rendered(4, 2, per_node=8, runtime="llmapi")
    assert r.workload.kind == "Deployment"
    assert TRTLLM_LLMAPI_LAUNCH not in r.launch_plan["argv"] and r.launch_plan["ssh"] is None


def test_a_multi_node_llmapi_deployment_cannot_run_as_root() -> None:
    spec = {"runtime": "llmapi", "image": LLMAPI_IMAGE, "gpu": {"perNode": 1},
            "engine": {"parallelism": {"tensor": 2, "pipeline": 1}}}
    assert parse_deployment(cr(spec)).spec.topology.multi_node
    with pytest.raises(InvalidDeployment) as exc:
        parse_deployment(cr({**spec, "podTemplate": {"runAsUser": 0}}))
    assert any(e.field.endswith("podTemplate.runAsUser") and "cannot run as root" in e.message
               for e in exc.value.errors), exc.value.errors
    one_node = {**spec, "gpu": {"perNode": 2}, "podTemplate": {"runAsUser": 0}}
    assert not parse_deployment(cr(one_node)).spec.topology.multi_node  # root is fine there


def test_only_triton_launch_builds_mpirun_command_lines() -> None:
    """No other module assembles or splices mpirun flags (the pod executes the plan's argv)."""
    package = ROOT / "operator" / "tritonllm"
    for path in sorted(package.rglob("*.py")):
        if path == package / "triton" / "launch.py":
            continue
        text = path.read_text()
        for flag in ('"--hostfile"', '"--host"', '"plm_rsh_agent"', '"--allow-run-as-root"'):
            assert flag not in text, f"{path.relative_to(ROOT)} builds mpirun flags ({flag})"


def test_runtime_reads_the_topology_from_the_plan() -> None:
    from tritonllm.runtime import files, report

    plan = rendered(8, 2).launch_plan
    assert files.plan_topology(plan).ranks_per_node == 8
    with pytest.raises(report.Failure) as exc:
        files.plan_topology({k: v for k, v in plan.items() if k != "ranksPerNode"})
    assert exc.value.code == report.EXIT_INVALID
