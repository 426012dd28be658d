"""The pure parts of the GPU recipe (tests/gpu/check.py; it runs on GPU machines only): metrics
parsing, the stand-in's placement lines, nvidia-smi output, expected texts, the figure table; the
package view that the recipe's models environment gets (stack._CLOSURE); and the two-pod mode's
names, pod network commands, pod files, argv and the group's start read from the leader's log
(tests/gpu/pods.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.gpu import pods
from tests.gpu.check import (
    Checks,
    by_label,
    compute_apps,
    figure_rows,
    gpu_readings,
    metric_checks,
    parse_metrics,
    parse_standin_lines,
    placement_problems,
    text_of,
    total,
    words,
)
from tests.triton.stack import _CLOSURE
from tritonllm.runtime import ssh

# As Triton 2.51 exported them on the H200 machine (2026-11-23), trimmed.
METRICS = """\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-8f5951f4-b3eb-a769-2a75-05b29843beb9"} 0.05
nv_gpu_utilization{gpu_uuid="GPU-1b2cdef2-d965-c8f6-af94-5832135dbfbe"} 0.26
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-8f5951f4-b3eb-a769-2a75-05b29843beb9"} 2988441600
nv_gpu_memory_used_bytes{gpu_uuid="GPU-1b2cdef2-d965-c8f6-af94-5832135dbfbe"} 2889875456
nv_inference_request_success{model="ensemble",version="1"} 2810
nv_inference_request_success{model="tensorrt_llm",version="1"} 2810
nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} 5.5433893e+07
nv_cpu_utilization 0.125
"""
GPU0, GPU1 = "GPU-1b2cdef2-d965-c8f6-af94-5832135dbfbe", "GPU-8f5951f4-b3eb-a769-2a75-05b29843beb9"


def test_metrics_by_gpu_uuid_not_by_position() -> None:
    """Triton lists GPU 1 first here: only the gpu_uuid label identifies a GPU."""
    samples = parse_metrics(METRICS)
    assert by_label(samples, "nv_gpu_utilization", "gpu_uuid") == {GPU1: 0.05, GPU0: 0.26}
    assert by_label(samples, "nv_gpu_memory_used_bytes", "gpu_uuid")[GPU0] == 2889875456
    assert total(samples, "nv_inference_request_success") == 5620
    assert total(samples, "nv_inference_request_success", model="tensorrt_llm") == 2810
    assert total(samples, "nv_inference_queue_duration_us", model="tensorrt_llm") == 55433893
    assert total(samples, "nv_cpu_utilization") == 0.125
    assert not [s for s in samples if s.name.startswith("#")]


def standin_line(rank: int, uuid: str, device: str | None = None) -> str:
    return (f"[1,{rank}]<stderr>:tritonllm-standin rank={rank} local_rank={rank} world=2 "
            f"device={device or f'cuda:{rank}'} pid={100 + rank} cuda_visible_devices= "
            f"uuid={uuid} name=NVIDIA_H200 init_seconds=1.2")


def test_standin_lines_are_read_from_mpirun_tagged_output() -> None:
    log = "\n".join(["[1,0]<stderr>:I1123 model_lifecycle.cc:839] loaded", standin_line(1, GPU1),
                     standin_line(0, GPU0)])
    lines = parse_standin_lines(log)
    assert [(x["rank"], x["device"], x["uuid"], x["pid"]) for x in lines] == [
        ("1", "cuda:1", GPU1, "101"), ("0", "cuda:0", GPU0, "100")]


def test_placement_one_rank_per_gpu_in_nvidia_smi_order() -> None:
    gpus = [(0, GPU0), (1, GPU1)]
    good = parse_standin_lines("\n".join([standin_line(0, GPU0), standin_line(1, GPU1)]))
    assert placement_problems(good, 2, gpus) == []
    shared = parse_standin_lines("\n".join([standin_line(0, GPU0),
                                             standin_line(1, GPU0, "cuda:1")]))
    assert any("share GPU" in p for p in placement_problems(shared, 2, gpus))
    swapped = parse_standin_lines("\n".join([standin_line(0, GPU1), standin_line(1, GPU0)]))
    assert placement_problems(swapped, 2, gpus) == [
        f"rank 0 runs on {GPU1}, nvidia-smi index 1", f"rank 1 runs on {GPU0}, nvidia-smi index 0"]
    one = parse_standin_lines(standin_line(0, GPU0))
    assert placement_problems(one, 2, gpus) == ["stand-in ranks [0], expected 0..1"]
    wrong_device = parse_standin_lines(standin_line(0, GPU0, "cuda:1"))
    assert placement_problems(wrong_device, 1, gpus[:1]) == [
        "rank 0 on cuda:1 (local rank 0), expected cuda:0"]


def test_compute_apps_parses_nvidia_smi_csv() -> None:
    csv = f"801, 1570, {GPU0}\n776, 582, {GPU1}\nNo running processes found\n"
    assert compute_apps(csv) == [(801, 1570.0, GPU0), (776, 582.0, GPU1)]


def test_gpu_readings_parse_nvidia_smi_csv() -> None:
    lines = [f"{GPU0}, 32, 2850", f"{GPU1}, [N/A], 582", "No devices were found"]
    assert gpu_readings(lines) == {GPU0: (0.32, 2850 * 2**20)}


# Two pods of two GPUs each: the leader sees GPUs 0 and 1, the worker 2 and 3.
GPU2, GPU3 = "GPU-2c1d2e3f-0000-1111-2222-333344445555", "GPU-3d2e3f40-6666-7777-8888-999900001111"
FOUR = [(i, "NVIDIA H200", u) for i, u in enumerate((GPU0, GPU1, GPU2, GPU3))]
IDLE = {u: 1.0e9 for _, _, u in FOUR}  # bytes in use before anything of ours ran


def measured(triton: dict[str, float], smi: dict[str, float]) -> dict[str, object]:
    """What figures() returns: rank 0's nv_gpu_* maxima (utilization, memory) and nvidia-smi's."""
    return {"gauges": {"utilization_max": triton,
                       "memory_used_max_bytes": {u: 3.0e9 for u in triton}},
            "smi": {"utilization_max": smi, "memory_used_max_bytes": {u: 3.0e9 for u in smi}},
            "counters": {"nv_inference_count": {"ensemble": 5.0, "tensorrt_llm": 5.0}},
            "pending_request_count_present": True}


def failed_metric_checks(seen: dict[str, object], pod_devices: tuple[int, ...] | None) -> list[str]:
    check = Checks()
    metric_checks(seen, FOUR, IDLE, check, pod_devices)
    return check.failed


def test_a_groups_metric_checks_read_the_leaders_gpus_from_triton_the_workers_from_nvidia_smi(
) -> None:
    """Rank 0's metrics cover its own pod's GPUs (the workers run with metrics off): in a group
    of two pods the worker pod's GPUs are not asked of them, but of nvidia-smi."""
    busy = {GPU0: 0.3, GPU1: 0.06, GPU2: 0.05, GPU3: 0.04}
    seen = measured({GPU0: 0.3, GPU1: 0.06}, busy)
    assert failed_metric_checks(seen, (0, 1)) == []
    # a worker GPU idle in nvidia-smi: its rank did not compute there
    idle_worker = measured({GPU0: 0.3, GPU1: 0.06}, busy | {GPU3: 0.0})
    assert failed_metric_checks(idle_worker, (0, 1)) == [
        "the worker pods' GPUs busy in nvidia-smi (utilization, memory above idle)"]
    # rank 0 reporting a GPU outside its pod, or missing one of its pod's
    assert failed_metric_checks(measured({GPU0: 0.3, GPU1: 0.06, GPU2: 0.05}, busy), (0, 1)) == [
        "rank 0's nv_gpu_* series cover exactly its pod's GPUs"]
    assert failed_metric_checks(measured({GPU0: 0.3}, busy), (0, 1)) == [
        "rank 0's nv_gpu_* series cover exactly its pod's GPUs",
        "nv_gpu_utilization moves on every GPU of rank 0's pod",
        "nv_gpu_memory_used_bytes above the idle GPU on every GPU of rank 0's pod"]
    # one pod: rank 0 reports every GPU of the host, each one moving
    assert failed_metric_checks(measured(busy, {}), None) == []
    assert failed_metric_checks(seen, None)[:2] == [
        "rank 0's nv_gpu_* series cover exactly its pod's GPUs",
        "nv_gpu_utilization moves on every GPU of rank 0's pod"]


def test_expected_texts_skip_special_tokens_like_postprocessing() -> None:
    vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2, "<s>": 3, "lazy": 12, "dog": 13}
    assert words([3, 12, 13], vocab) == ["", "lazy", "dog"]
    assert text_of([12, 13, 3, 12], vocab) == "lazy dog lazy"


def test_figure_rows_and_checks() -> None:
    rows = figure_rows([
        {"device": "gpu", "endpoint": "generate", "concurrency": 16, "requests": 2689,
         "errors": 0, "requests_per_s": 334.5, "tokens_per_s": 5352.0, "p50_ms": 45.1,
         "p95_ms": 58.9, "ttft_p50_ms": None},
        {"device": "gpu+stream", "endpoint": "generate_stream", "concurrency": 1,
         "requests": 305, "errors": 0, "requests_per_s": 38.2, "tokens_per_s": 610.8,
         "p50_ms": 26.4, "p95_ms": 31.7, "ttft_p50_ms": 4.7},
    ])
    assert rows[0].split() == ["stand-in", "on", "endpoint", "conc", "req/s", "tok/s", "p50",
                               "ms", "p95", "ms", "ttft", "p50", "n", "err"]
    assert rows[1].split() == ["gpu", "generate", "16", "334.5", "5352.0", "45.1", "58.9", "-",
                               "2689", "0"]
    assert rows[2].split()[-4:] == ["31.7", "4.7", "305", "0"]
    check = Checks()
    assert check("a", True) and not check("b", False, "why")
    assert check.guarded("c", lambda: 1 / 0) is None
    assert check.failed == ["b", "c"]
    assert check.results[-1] == ("c", False, "ZeroDivisionError: division by zero")


def test_models_view_holds_the_required_closure_without_numpy() -> None:
    """The recipe's models see the machine's packages through this list only: a package's
    required dependencies (no extras), never NumPy (theirs is NumPy 1.26)."""
    out = subprocess.run([sys.executable, "-c", _CLOSURE, "pydantic", "tritonclient"],
                         check=True, capture_output=True, text=True).stdout.split()
    names = {Path(p).name for p in out}
    assert {"pydantic", "pydantic_core", "annotated_types", "typing_inspection"} <= names
    assert any(n.startswith("pydantic-") and n.endswith(".dist-info") for n in names)
    assert {"tritonclient", "urllib3"} <= names
    assert any(n.startswith("rapidjson") for n in names)  # python-rapidjson, a required dep
    assert not [n for n in names if n.startswith("numpy")]
    assert "grpc" not in names  # tritonclient's grpc extra is optional: not followed


# --- two pods (tests/gpu/pods.py) ----------------------------------------------------------------


def test_group_names_addresses_and_gpus_follow_leaderworkerset() -> None:
    group = pods.make_group("gpt2-medium", 2, 2, tag="7")
    leader, worker = group.pods
    assert (leader.name, leader.fqdn, leader.address, leader.visible) == (
        "gpt2-medium-0", "gpt2-medium-0.gpt2-medium-0.gpu-check", "10.213.7.2", "0,1")
    assert (worker.name, worker.fqdn, worker.address, worker.visible) == (
        "gpt2-medium-0-1", "gpt2-medium-0-1.gpt2-medium-0.gpu-check", "10.213.7.3", "2,3")
    # the leader's launch derives the worker's name from what LWS injects, as in a pod
    env = pods.pod_env({"PATH": "/bin", "LWS_NAME": "stale", "OMPI_MCA_plm": "isolated"},
                       group, worker, "/home/w")
    assert ssh.worker_hosts(env, 2) == [worker.fqdn]
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    assert "OMPI_MCA_plm" not in env and "LWS_NAME" not in env and env["PATH"] == "/bin"
    assert (env["LWS_GROUP_SIZE"], env["LWS_WORKER_INDEX"], env["HOME"]) == ("2", "1", "/home/w")
    shared = pods.make_group("m", 2, 1, wrap=1)
    assert [p.devices for p in shared.pods] == [(0,), (0,)]
    assert max(len(p.veth + "p") for p in group.pods) <= 15  # Linux interface names
    assert len(group.bridge) <= 15


def test_pod_network_commands_build_and_remove_a_bridge_with_a_veth_per_pod() -> None:
    group = pods.make_group("m", 2, 1, tag="3")
    up = [" ".join(cmd) for cmd in pods.up_commands(group)]
    assert up[:3] == ["ip link add tgc3br type bridge", "ip addr add 10.213.7.1/24 dev tgc3br",
                      "ip link set tgc3br up"]
    assert "ip link add tgc3v1 type veth peer name tgc3v1p" in up
    assert "ip -n tllm-gc3-1 link set tgc3v1p name eth0" in up
    assert "ip -n tllm-gc3-1 addr add 10.213.7.3/24 dev eth0" in up
    assert "ip -n tllm-gc3-1 route add default via 10.213.7.1" in up
    assert "ip link set tgc3v1 master tgc3br" in up
    assert up.index("ip netns add tllm-gc3-1") < up.index("ip link set tgc3v1p netns tllm-gc3-1")
    assert [" ".join(cmd) for cmd in pods.down_commands(group)] == [
        "ip netns del tllm-gc3-0", "ip netns del tllm-gc3-1", "ip link del tgc3br"]


def test_pod_files_and_argv() -> None:
    group = pods.make_group("m", 2, 1)
    hosts = pods.hosts_file(group)
    assert "10.213.7.2\tm-0.m-0.gpu-check m-0\n" in hosts
    assert "10.213.7.3\tm-0-1.m-0.gpu-check m-0-1\n" in hosts
    passwd = pods.passwd_file("root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/u:/bin/"
                              "bash\n", 1000, "/tmp/h")
    assert passwd.splitlines() == ["root:x:0:0:root:/root:/bin/bash",
                                   "triton-server:x:1000:1000::/tmp/h:/bin/sh"]
    argv = pods.pod_argv(group.leader, ["python3", "-S", "x.pyz"], mpi_workdir="/tmp/mpi")
    assert argv[:6] == ["ip", "netns", "exec", "tllm-gc0-0", "unshare", "--uts"]
    assert argv[-7:] == ["pod", "m-0", "1000", "/tmp/mpi", "python3", "-S", "x.pyz"]
    script = argv[argv.index("-c") + 1]
    assert "--reuid=\"$uid\"" in script and "--bounding-set=-all" in script
    assert "--no-new-privs" in script and "tmpfs" in script


def test_the_group_start_is_read_from_the_leaders_log() -> None:
    group = pods.make_group("m", 2, 1)
    log = "\n".join([
        "2026-11-25T08:48:07Z tritonllm launch event=waiting what=workers hosts=\"[\\\"m-0-1."
        "m-0.gpu-check\\\"]\" port=2222",
        "2026-11-25T08:48:07Z tritonllm launch event=worker-ready host=m-0-1.m-0.gpu-check "
        "address=10.213.7.3",
        "2026-11-25T08:48:07Z tritonllm launch event=hostfile path=/tmp/tritonllm-mpi/hostfile "
        "hosts=\"[\\\"m-0\\\", \\\"10.213.7.3\\\"]\" slots=1",
        " Data for node: m-0\tNum slots: 1\tMax slots: 0\tNum procs: 1",
        " \tProcess OMPI jobid: [48791,1] App: 0 Process rank: 0 Bound: N/A",
        " Data for node: 10.213.7.3\tNum slots: 1\tMax slots: 0\tNum procs: 1",
        " \tProcess OMPI jobid: [48791,1] App: 1 Process rank: 1 Bound: N/A",
    ])
    assert pods.display_map(log) == {0: "m-0", 1: "10.213.7.3"}
    assert pods.group_problems(log, group, 1) == {"login": [], "hostfile": [], "rank map": []}
    assert pods.rank_hosts(pods.make_group("m", 2, 2), 2) == {
        0: "m-0", 1: "m-0", 2: "10.213.7.3", 3: "10.213.7.3"}
    wrong = log.replace("address=10.213.7.3", "address=10.213.7.9").replace(
        "Process rank: 1", "Process rank: 2")
    problems = pods.group_problems(wrong, group, 1)
    assert problems["login"] == ["m-0-1.m-0.gpu-check: logged in at 10.213.7.9, expected "
                                 "10.213.7.3"]
    assert problems["rank map"] == ["rank map {0: 'm-0', 2: '10.213.7.3'}, expected "
                                    "{0: 'm-0', 1: '10.213.7.3'}"]
    assert pods.group_problems(log, group, 2)["hostfile"]  # slots=1 where 2 ranks per pod


def test_pod_placement_rank_on_its_pods_host_and_own_gpu() -> None:
    group = pods.make_group("m", 2, 1)
    uuids = {0: GPU0, 1: GPU1}

    def line(rank: int, host: str, uuid: str, device: str = "cuda:0") -> str:
        return (f"[1,{rank}]<stderr>:tritonllm-standin rank={rank} local_rank=0 world=2 "
                f"device={device} pid={100 + rank} host={host} uuid={uuid}")

    good = parse_standin_lines("\n".join([line(0, "m-0", GPU0), line(1, "m-0-1", GPU1)]))
    assert pods.pod_placement_problems(good, group, 1, uuids) == []
    swapped = parse_standin_lines("\n".join([line(0, "m-0-1", GPU0), line(1, "m-0-1", GPU0)]))
    assert pods.pod_placement_problems(swapped, group, 1, uuids) == [
        "rank 0 ran on host m-0-1, expected m-0",
        f"ranks 0 and 1 share GPU {GPU0}",
        f"rank 1 runs on {GPU0}, not on GPU 1 of m-0-1 ({GPU1})"]
    shared = pods.make_group("m", 2, 1, wrap=1)
    same = parse_standin_lines("\n".join([line(0, "m-0", GPU0), line(1, "m-0-1", GPU0)]))
    assert pods.pod_placement_problems(same, shared, 1, uuids, shared=True) == []
    cpu = [{"rank": "0", "local_rank": "0", "host": "m-0"}]
    assert pods.pod_placement_problems(cpu, group, 1, None) == [
        "stand-in ranks [0], expected 0..1"]
