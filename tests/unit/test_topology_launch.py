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
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.topology import Topology
from tritonllm.render import Rendered, render_all
from tritonllm.triton.launch import MpiSsh, launch_spec, mpirun_argv, rank_args, rsh_agent


def r_topology(r: Rendered) -> Topology:
    return Topology.from_wire(r.launch_plan)


def rendered(tensor: int, pipeline: int, per_node: int = 8, runtime: str = "engine") -> Rendered:
    spec = {"engine": {"parallelism": {"tensor": tensor, "pipeline": pipeline}},
            "gpu": {"perNode": per_node}, "runtime": runtime}
    if runtime == "llmapi":
        spec["image"] = "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3"
    return render_all(parse_deployment(cr(spec)))


@pytest.mark.parametrize(
    ("tp", "pp", "per_node", "runtime", "expect"),
    [
        # (world, GPUs per pod, pods per group, ranks per node, workload)
        (1, 1, 8, "engine", (1, 1, 1, 1, "Deployment")),
        (4, 1, 8, "engine", (4, 4, 1, 4, "Deployment")),
        (1, 2, 8, "engine", (2, 2, 1, 2, "Deployment")),
        (8, 2, 8, "engine", (16, 8, 2, 8, "LeaderWorkerSet")),
        (4, 4, 4, "engine", (16, 4, 4, 4, "LeaderWorkerSet")),
        (2, 1, 8, "llmapi", (2, 2, 1, 2, "Deployment")),
    ],
)
def test_topology_is_derived_once_from_the_spec(
    tp: int, pp: int, per_node: int, runtime: str, expect: tuple[int, int, int, int, str]
) -> None:
    t = Topology.derive(tensor=tp, pipeline=pp, gpus_per_node=per_node, runtime=runtime)
    assert (t.world_size, t.gpus_per_pod, t.pods_per_group, t.ranks_per_node,
            t.workload_kind) == expect
    assert t.multi_node == (expect[2] > 1)
    assert Topology.from_wire(t.to_wire()) == t


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
