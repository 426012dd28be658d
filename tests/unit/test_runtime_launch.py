"""`tritonllm launch` against a FAKE mpirun, FAKE sshd and FAKE nvidia-smi (tests/fake_trtllm.py):
the checks that refuse to start, waiting for the repository, signal forwarding, exit codes, and
the LeaderWorkerSet SSH bootstrap (leader host list and agent; worker sshd). One test runs the
worker's sshd for real when OpenSSH's server is installed, and logs in with the leader's agent.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fake_trtllm import GPU_NAME, FakeImage, image, relocate, write_plan
from tests.helpers import free_port, render_example
from tritonllm.render.mpi import ssh_key_pairs
from tritonllm.runtime import build as build_module
from tritonllm.runtime import engine_files, launch, probes, report, ssh, verified
from tritonllm.triton.launch import MpiSsh, rsh_agent

__all__ = ["image"]  # fixture (pyz: tests/conftest.py)

MULTI = "llama-70b-multinode"
LEADER_ADDRESS = f"{MULTI}-0.{MULTI}.default"


def launch_plan(img: FakeImage, name: str) -> dict[str, Any]:
    plan: dict[str, Any] = relocate(render_example(name).launch_plan, img.root)
    img.set_trtllm_version(plan["trtllmVersion"])
    return plan


def make_engine(plan: dict[str, Any], *, tp: int | None = None, pp: int | None = None,
                config_tp: int | None = None, version: str | None = None,
                gpu: str | None = None) -> None:
    """An engine directory as `tritonllm build` leaves it (artifact.json + config.json)."""
    engine = Path(plan["engineDir"])
    engine.mkdir(parents=True, exist_ok=True)
    tp = plan["tensorParallel"] if tp is None else tp
    pp = plan["pipelineParallel"] if pp is None else pp
    mapping = {"tp_size": tp if config_tp is None else config_tp, "pp_size": pp}
    (engine / "config.json").write_text(json.dumps({"pretrained_config": {"mapping": mapping}}))
    for r in range(tp * pp):
        (engine / f"rank{r}.engine").write_bytes(b"fake engine")
    artifact = {"engineKey": plan["engineKey"], "tensorParallel": tp, "pipelineParallel": pp,
                "trtllmVersion": version or plan["trtllmVersion"], "gpuProduct": gpu,
                "files": engine_files.engine_checksums(engine)}
    (engine / "artifact.json").write_text(json.dumps(artifact))


def ready(img: FakeImage, name: str, **engine: Any) -> tuple[dict[str, Any], Path]:
    plan = launch_plan(img, name)
    Path(plan["modelRepository"]).mkdir(parents=True)
    if plan["runtime"] == "engine":
        make_engine(plan, **engine)
    return plan, write_plan(img.root / "etc/launch.json", plan)


def run_launch(img: FakeImage, path: Path, mode: str = "single", **env: str) -> tuple[int, str]:
    out = img.tritonllm("launch", "--mode", mode, "--plan", str(path), env=img.env(**env))
    return out.returncode, out.stdout + out.stderr


def wait_for(path: Path, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


@pytest.mark.parametrize("name", ["gpt2-medium", "llama2-7b-tp4", "llama3-8b-awq"])
def test_launch_with_fake_mpirun_runs_the_plans_command(image: FakeImage, name: str) -> None:
    plan, path = ready(image, name)
    code, log = run_launch(image, path)
    assert code == 0, log
    (call,) = image.calls("mpirun")
    assert [Path(call["argv"][0]).name, *call["argv"][1:]] == plan["argv"]
    assert "event=engine" in log and "event=exit code=0" in log


def test_launch_with_fake_mpirun_propagates_a_non_zero_exit(image: FakeImage) -> None:
    _, path = ready(image, "gpt2-medium")
    code, log = run_launch(image, path, FAKE_MPIRUN_EXIT="7")
    assert code == 7, log


def test_launch_with_fake_mpirun_forwards_sigterm_for_a_graceful_drain(image: FakeImage) -> None:
    _, path = ready(image, "gpt2-medium")
    proc = image.popen("launch", "--mode", "single", "--plan", str(path),
                       env=image.env(FAKE_MPIRUN_SLEEP="60"))
    try:
        wait_for(image.marks / "mpirun.started")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert (image.marks / "mpirun.terminated").read_text() == str(int(signal.SIGTERM))
    assert f"signal={int(signal.SIGTERM)}" in out


def test_launch_refuses_an_engine_whose_world_size_differs(image: FakeImage) -> None:
    _, path = ready(image, "gpt2-medium", tp=2)
    code, log = run_launch(image, path)
    assert code == report.EXIT_MISMATCH, log
    assert "built for tp=2 x pp=1 = 2 ranks but this deployment runs world size 1" in log
    assert image.calls("mpirun") == []


def test_launch_refuses_an_engine_config_that_disagrees_with_its_artifact(
    image: FakeImage,
) -> None:
    _, path = ready(image, "llama2-7b-tp4", config_tp=2)
    code, log = run_launch(image, path)
    assert code == report.EXIT_MISMATCH, log
    assert "config.json says tp=2 pp=1 but artifact.json says tp=4 pp=1" in log


def test_launch_refuses_an_engine_built_by_another_trtllm_version(image: FakeImage) -> None:
    _, path = ready(image, "llama3-8b-awq", version="0.12.0")
    code, log = run_launch(image, path)
    assert code == report.EXIT_VERSION, log
    assert "built with TensorRT-LLM 0.12.0 but this image has 0.13.0" in log
    assert image.calls("mpirun") == []
    code, log = run_launch(image, path, TRITONLLM_SKIP_VERSION_CHECK="1")
    assert code == 0, log


def test_launch_refuses_an_engine_built_on_another_gpu_product(image: FakeImage) -> None:
    _, path = ready(image, "gpt2-medium", gpu="NVIDIA H200")  # this pod: the fake H100
    code, log = run_launch(image, path)
    assert code == report.EXIT_MISMATCH, log
    assert ("the engine was built on NVIDIA H200 but this pod runs on NVIDIA H100 80GB HBM3"
            in log)
    assert "nvidia.com/gpu.product=NVIDIA-H200" in log
    assert "set spec.gpu.product to NVIDIA-H100-80GB-HBM3" in log
    assert image.calls("mpirun") == []


@pytest.mark.parametrize("built", [probes.product_label(GPU_NAME), GPU_NAME, None])
def test_launch_accepts_an_engine_of_this_gpu_product(image: FakeImage, built: str | None) -> None:
    """nvidia-smi's name or its label form; an artifact without a product is not refused."""
    _, path = ready(image, "gpt2-medium", gpu=built)
    code, log = run_launch(image, path)
    assert code == 0, log
    assert f"event=gpu product={json.dumps(GPU_NAME)}" in log
    assert f"checked={'true' if built else 'false'}" in log


def test_launch_refuses_a_missing_engine(image: FakeImage) -> None:
    plan, path = ready(image, "gpt2-medium")
    (Path(plan["engineDir"]) / "artifact.json").unlink()
    code, log = run_launch(image, path)
    assert code == report.EXIT_NOT_FOUND, log


def test_launch_refuses_without_the_gpus_of_the_pod(image: FakeImage) -> None:
    _, path = ready(image, "llama2-7b-tp4")
    code, log = run_launch(image, path, FAKE_GPUS="2")
    assert code == report.EXIT_GPUS, log
    assert "this serving pod needs 4 visible GPU(s) but this container sees 2" in log


def test_launch_waits_for_the_model_repository(image: FakeImage) -> None:
    plan, path = ready(image, "gpt2-medium")
    repo = Path(plan["modelRepository"])
    repo.rmdir()
    proc = image.popen("launch", "--mode", "single", "--plan", str(path),
                       env=image.env(TRITONLLM_WAIT_TIMEOUT="30"))
    try:
        time.sleep(1.5)
        assert proc.poll() is None
        assert image.calls("mpirun") == []
        repo.mkdir()
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert len(image.calls("mpirun")) == 1


def test_sigterm_while_waiting_ends_launch_at_once(image: FakeImage) -> None:
    """As PID 1 of its container, launch gets no default action for SIGTERM: without its own
    handler the kubelet's stop would wait out the grace period before the serving command."""
    plan, path = ready(image, "gpt2-medium")
    Path(plan["modelRepository"]).rmdir()
    proc = image.popen("launch", "--mode", "single", "--plan", str(path),
                       env=image.env(TRITONLLM_WAIT_TIMEOUT="60"))
    try:
        time.sleep(1.5)
        assert proc.poll() is None
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert time.monotonic() - started < 5
    assert "stopped before serving" in out and "SIGTERM" in out
    assert image.calls("mpirun") == []


def test_launch_gives_up_waiting_for_the_repository(image: FakeImage) -> None:
    plan, path = ready(image, "gpt2-medium")
    Path(plan["modelRepository"]).rmdir()
    code, log = run_launch(image, path, TRITONLLM_WAIT_TIMEOUT="0.5")
    assert code == report.EXIT_TIMEOUT, log
    assert "did not appear within" in log and "model-repository Job" in log


def test_launch_llmapi_runs_one_tritonserver_without_engine_checks(image: FakeImage) -> None:
    plan = launch_plan(image, "llmapi-llama3-8b")
    Path(plan["modelRepository"]).mkdir(parents=True)
    assert Path(plan["argv"][0]).name == "tritonserver"
    plan["argv"][0] = str(image.bin / "mpirun")  # a recording stand-in for tritonserver
    path = write_plan(image.root / "etc/launch.json", plan)
    code, log = run_launch(image, path)
    assert code == 0, log
    assert image.calls("mpirun")[0]["argv"][1:] == plan["argv"][1:]


@pytest.mark.parametrize(("name", "mode"), [(MULTI, "single"), ("gpt2-medium", "leader")])
def test_launch_rejects_a_mode_that_does_not_fit_the_plan(
    image: FakeImage, name: str, mode: str
) -> None:
    _, path = ready(image, name)
    code, log = run_launch(image, path, mode=mode)
    assert code == report.EXIT_INVALID, log


# --- multi node: the SSH bootstrap -----------------------------------------------------------


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """The `<name>-mpi-ssh` Secret as mounted: keys as the operator makes them (render.mpi)."""
    d = tmp_path / "secret"
    d.mkdir()
    for name, body in ssh_key_pairs().items():
        (d / name).write_text(body)
        (d / name).chmod(0o400)
    return d


def multi_plan(img: FakeImage, secret: Path, port: int = 2222) -> tuple[dict[str, Any], Path]:
    plan, _ = ready(img, MULTI)
    plan["ssh"] = {**plan["ssh"], "port": port, "keyDir": str(secret)}
    return plan, write_plan(img.root / "etc/launch.json", plan)


def agent_for(port: int, key_dir: Path, workdir: Path) -> list[str]:
    """The rendered SSH agent command for `workdir`, with the files the leader writes there."""
    ssh.prepare_client(key_dir, workdir)
    return rsh_agent(MpiSsh(port=port, workdir=str(workdir))).split()


def use_image_env(monkeypatch: pytest.MonkeyPatch, img: FakeImage, **extra: str) -> None:
    for k, v in img.env(**extra).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.syspath_prepend(str(img.site))  # the fake image's tensorrt_llm metadata


def test_leader_with_fake_mpirun_runs_over_the_lws_group_through_ssh(
    image: FakeImage, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, _ = multi_plan(image, secret)
    use_image_env(monkeypatch, image, LWS_LEADER_ADDRESS=LEADER_ADDRESS, LWS_GROUP_SIZE="2")
    probed: list[tuple[str, int]] = []

    def fake_probe(host: str, port: int) -> str | None:
        probed.append((host, port))
        return "10.1.2.3" if len(probed) > 1 else None  # the worker's sshd answers on try 2

    logins: list[tuple[str, ...]] = []

    def fake_login(agent: list[str], address: str) -> str | None:
        logins.append((*agent[:3], address))
        return None

    monkeypatch.setattr(ssh, "probe", fake_probe)
    monkeypatch.setattr(ssh, "login", fake_login)
    assert launch.execute("leader", plan) == 0
    assert logins == [("ssh", "-p", "2222", "10.1.2.3")]  # mpirun's own agent logged in

    assert probed == [(f"{MULTI}-0-1.{MULTI}.default", 2222)] * 2
    (call,) = image.calls("mpirun")
    argv = call["argv"]
    # The pod runs the rendered command as is: hosts and agent are in it, nothing is spliced in.
    assert [Path(argv[0]).name, *argv[1:]] == plan["argv"]
    hostfile = Path(argv[argv.index("--hostfile") + 1])
    hosts = [f"{socket.gethostname()} slots=8", "10.1.2.3 slots=8"]
    assert hostfile.read_text().splitlines() == hosts
    assert argv[argv.index("plm_rsh_agent") - 1] == "--mca"
    agent = argv[argv.index("plm_rsh_agent") + 1].split()
    assert agent[:3] == ["ssh", "-p", "2222"]
    assert {"StrictHostKeyChecking=yes", "BatchMode=yes", "IdentitiesOnly=yes"} <= set(agent)
    no_tree = argv.index("plm_rsh_no_tree_spawn")
    assert argv[no_tree - 1 : no_tree + 2] == ["--mca", "plm_rsh_no_tree_spawn", "1"]
    key = Path(agent[agent.index("-i") + 1])
    assert key.read_text() == (secret / ssh.CLIENT_KEY).read_text()
    assert key.stat().st_mode & 0o777 == 0o600


def test_leader_gives_up_on_unreachable_workers(
    image: FakeImage, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, _ = multi_plan(image, secret)
    # The worker wait has its own bound (the repository's is long: a build may be running).
    use_image_env(monkeypatch, image, LWS_LEADER_ADDRESS=LEADER_ADDRESS, LWS_GROUP_SIZE="2",
                  TRITONLLM_WORKER_WAIT_TIMEOUT="0.5")
    monkeypatch.setattr(ssh, "probe", lambda host, port: None)
    with pytest.raises(report.Failure) as exc:
        launch.execute("leader", plan)
    assert exc.value.code == report.EXIT_TIMEOUT
    assert f"{MULTI}-0-1.{MULTI}.default:2222" in exc.value.message


def test_leader_refuses_a_group_of_the_wrong_size(
    image: FakeImage, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, _ = multi_plan(image, secret)
    use_image_env(monkeypatch, image, LWS_LEADER_ADDRESS=LEADER_ADDRESS, LWS_GROUP_SIZE="3")
    with pytest.raises(report.Failure) as exc:
        launch.execute("leader", plan)
    assert exc.value.code == report.EXIT_MISMATCH


def test_worker_hosts_follow_the_lws_naming() -> None:
    env = {"LWS_LEADER_ADDRESS": "big-3.big.ns", "LWS_GROUP_SIZE": "4"}
    assert ssh.worker_hosts(env, 4) == ["big-3-1.big.ns", "big-3-2.big.ns", "big-3-3.big.ns"]
    with pytest.raises(report.Failure):
        ssh.worker_hosts({}, 2)


def test_worker_with_fake_sshd_serves_ssh_until_sigterm(image: FakeImage, secret: Path) -> None:
    _, path = multi_plan(image, secret)
    env = image.env(HF_TOKEN="hf_secret", NCCL_DEBUG="INFO")
    proc = image.popen("launch", "--mode", "worker", "--plan", str(path), env=env)
    try:
        wait_for(image.marks / "sshd.started")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    (call,) = image.calls("sshd")
    assert call["argv"][1:3] == ["-D", "-e"]
    config = call["config"]
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout
    for line in ("Port 2222", f"AllowUsers {user.strip()}", "PasswordAuthentication no",
                 "PermitTTY no", "AllowTcpForwarding no"):
        assert line in config.splitlines()
    setenv = next(line for line in config.splitlines() if line.startswith("SetEnv "))
    assert 'NCCL_DEBUG="INFO"' in setenv and "PATH=" in setenv
    assert "HF_TOKEN" not in setenv and "hf_secret" not in config


def test_worker_says_when_the_image_has_no_sshd(
    image: FakeImage, monkeypatch: pytest.MonkeyPatch
) -> None:
    (image.bin / "sshd").unlink()
    monkeypatch.setenv("PATH", str(image.bin))
    monkeypatch.setattr(ssh, "SSHD_FALLBACKS", (str(image.root / "usr/sbin/sshd"),))
    with pytest.raises(report.Failure) as exc:
        ssh.find_sshd()
    assert exc.value.code == report.EXIT_NOT_FOUND
    assert "sshd not found in this image" in exc.value.message


@pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH's sshd installed")
def test_worker_runs_a_real_sshd_that_only_the_deployment_key_opens(
    image: FakeImage, secret: Path, tmp_path: Path
) -> None:
    """Real OpenSSH on both sides: the worker's generated sshd_config, the Secret's keys, the
    leader's agent command, host-key pinning, and the environment passed into sessions."""
    port = free_port()
    _, path = multi_plan(image, secret, port=port)
    (image.bin / "sshd").unlink()  # use the real one
    env = image.env(HF_TOKEN="hf_secret", TRITONLLM_PROBE_VAR="from-the-pod")
    proc = image.popen("launch", "--mode", "worker", "--plan", str(path), env=env)
    try:
        deadline = time.monotonic() + 20
        while ssh.probe("127.0.0.1", port) is None:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "sshd did not answer"
            time.sleep(0.1)
        agent = agent_for(port, secret, tmp_path / "leader")
        remote = "echo $TRITONLLM_PROBE_VAR ${HF_TOKEN:-no-token}"
        session = subprocess.run(
            [*agent, "127.0.0.1", remote], capture_output=True, text=True, timeout=30,
            env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
        )
        assert session.returncode == 0, session.stderr
        assert session.stdout.split() == ["from-the-pod", "no-token"]

        # Another deployment's client key is refused, and a server with another host key is
        # not trusted.
        other = ssh_key_pairs()
        mine = {n: (secret / n).read_text() for n in ssh.SECRET_KEYS}
        for label, client, host in (("client", other, mine), ("host", mine, other)):
            keys = tmp_path / f"wrong-{label}"
            keys.mkdir()
            for n in (ssh.CLIENT_KEY, ssh.CLIENT_PUB):
                (keys / n).write_text(client[n])
            for n in (ssh.HOST_KEY, ssh.HOST_PUB):
                (keys / n).write_text(host[n])
            wrong = agent_for(port, keys, keys / "leader")
            denied = subprocess.run([*wrong, "127.0.0.1", "true"], capture_output=True,
                                    text=True, timeout=30)
            assert denied.returncode == 255, (label, denied.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        proc.kill()
    assert proc.returncode == 0, out


def test_generated_secret_holds_ed25519_key_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setenv("PATH", "")  # the operator needs no ssh-keygen (nor any other tool)
        data = ssh_key_pairs()
    assert sorted(data) == sorted(ssh.SECRET_KEYS)
    assert data[ssh.CLIENT_KEY].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert data[ssh.HOST_PUB].startswith("ssh-ed25519 ")
    assert data != ssh_key_pairs()
    # OpenSSH reads the private keys and derives the very public keys stored beside them.
    for private, public in ((ssh.CLIENT_KEY, ssh.CLIENT_PUB), (ssh.HOST_KEY, ssh.HOST_PUB)):
        key = tmp_path / private
        key.write_text(data[private])
        key.chmod(0o600)
        derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True,
                                 text=True, check=True).stdout.split()[:2]
        assert derived == data[public].split()[:2]


def built(img: FakeImage, name: str, **env: str) -> tuple[dict[str, Any], Path]:
    """The launch plan of an example whose engine `tritonllm build` built with the fake tools
    (`env`: more of the build's environment)."""
    plan, path = ready(img, name)
    engine = Path(plan["engineDir"])
    for child in engine.iterdir():
        child.unlink()
    build: dict[str, Any] = relocate(render_example(name).build_plan, img.root)
    build["exampleRoots"] = [str(img.examples)]
    for step in build["steps"]:
        if step.get("tokenFile"):  # the Secret's token, as the build pod mounts it
            Path(step["tokenFile"]).parent.mkdir(parents=True, exist_ok=True)
            Path(step["tokenFile"]).write_text("hf_fake\n")
    code = img.tritonllm(
        "build", "--plan", str(write_plan(img.root / "etc/build.json", build)),
        env=img.env(FAKE_TRTLLM_VERSION=plan["trtllmVersion"], HF_TOKEN="hf_fake", **env),
    )
    assert code.returncode == 0, code.stdout + code.stderr
    return plan, path


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        (lambda e: (e / "rank1.engine").write_bytes(b"evil engine"),
         "rank1.engine has another sha256 than the build recorded"),
        (lambda e: (e / "rank0.engine").write_bytes(b"x"), "rank0.engine has 1 bytes, not 11"),
        (lambda e: (e / "rank3.engine").unlink(), "rank3.engine missing"),
        (lambda e: (e / "plugin.so").write_bytes(b"\x7fELF"), "plugin.so not written by the build"),
    ],
    ids=["content", "size", "missing", "added"],
)
def test_launch_refuses_a_tampered_engine(image: FakeImage, tamper: Any, says: str) -> None:
    plan, path = built(image, "llama2-7b-tp4")
    assert run_launch(image, path)[0] == 0  # as built: accepted
    tamper(Path(plan["engineDir"]))
    code, log = run_launch(image, path)
    assert code == report.EXIT_MISMATCH, log
    assert f"was changed after its build ({says}" in log, log
    assert "refusing to serve it" in log and not image.calls("mpirun")[1:]


def test_launch_refuses_an_engine_without_checksums(image: FakeImage) -> None:
    plan, path = ready(image, "gpt2-medium")
    artifact_path = Path(plan["engineDir"]) / "artifact.json"
    artifact = json.loads(artifact_path.read_text())
    del artifact["files"]
    artifact_path.write_text(json.dumps(artifact))
    code, log = run_launch(image, path)
    assert code == report.EXIT_MISMATCH, log
    assert "records no checksums of the engine files" in log and not image.calls("mpirun")


# --- sshd for real, as the rendered multi-node pods run it -------------------------------------

SSHD = Path("/usr/sbin/sshd")
POD_UID = 1000  # NGC Triton's triton-server, what spec.podTemplate.runAsUser names


@pytest.fixture
def pod_root() -> Any:
    """A directory the pod user can read (pytest's own tmp directories are root-only)."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="tritonllm-pod-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def as_pod(root: Path, argv: list[str], *, uid: int | None) -> list[str]:
    """`argv` as the rendered pod runs it: every capability dropped (bounding and inheritable
    sets), no_new_privs (allowPrivilegeEscalation: false), as `uid` (None: root) with the
    image's /etc/passwd naming that user (bind-mounted in a private mount namespace)."""
    drop = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    if uid is None:
        return ["setpriv", *drop, "--", *argv]
    passwd = root / "passwd"
    lines = [ln for ln in Path("/etc/passwd").read_text().splitlines()
             if ln.split(":")[2] != str(uid)]
    passwd.write_text("\n".join([*lines, f"triton-server:x:{uid}:{uid}::/tmp:/bin/sh"]) + "\n")
    passwd.chmod(0o644)
    user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *drop, "--"]
    script = 'mount --bind "$0" /etc/passwd && exec "$@"'
    return ["unshare", "--mount", "--", "sh", "-c", script, str(passwd), *user, *argv]


def pod_worker(img: FakeImage, root: Path, secret: Path, port: int, uid: int | None) -> Any:
    """`tritonllm launch --mode worker` as that pod, the Secret mounted as the kubelet does it
    (root-owned, mode 0400 plus group read for the pod's fsGroup)."""
    import shutil

    keys = root / "mpi-ssh"
    keys.mkdir()
    for name in ssh.SECRET_KEYS:
        shutil.copy(secret / name, keys / name)
        os.chown(keys / name, 0, uid or 0)
        (keys / name).chmod(0o440)
    pyz = root / "tritonllm.pyz"
    shutil.copy(img.pyz, pyz)
    pyz.chmod(0o644)
    plan, _ = multi_plan(img, keys, port=port)
    path = write_plan(root / "launch.json", plan)
    path.chmod(0o644)
    env = {"PATH": "/usr/sbin:/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
           "NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1"}
    argv = ["/usr/bin/python3", "-S", str(pyz), "launch", "--mode", "worker", "--plan", str(path)]
    return subprocess.Popen(as_pod(root, argv, uid=uid), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def stop(proc: Any) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    return str(out)


# The leader's side, as the leader pod runs it (same user): the client files, then the bounded
# wait for a real login to the worker, then one session reporting who runs it with what.
LEADER = """
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tritonllm.runtime import ssh
keys, workdir, port, agent = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ssh.prepare_client(keys, workdir)
check = ssh.LoginCheck(agent.split())
found = ssh.wait_for_workers(["127.0.0.1"], port, 20, check=check, interval=0.2)
remote = "id -u; grep -E '^Cap(Eff|Bnd)' /proc/self/status"
session = subprocess.run([*agent.split(), "127.0.0.1", remote], capture_output=True, text=True)
print(json.dumps({"found": found, "rc": session.returncode, "out": session.stdout,
                  "err": session.stderr}))
"""


@pytest.mark.skipif(not SSHD.exists(), reason="needs OpenSSH's sshd installed")
def test_real_sshd_runs_as_the_pods_non_root_user_with_every_capability_dropped(
    image: FakeImage, secret: Path, pod_root: Path
) -> None:
    port = free_port()
    proc = pod_worker(image, pod_root, secret, port, POD_UID)
    try:
        workdir = pod_root / "leader"
        agent = rsh_agent(MpiSsh(port=port, workdir=str(workdir)))
        argv = ["/usr/bin/python3", "-S", "-c", LEADER, str(pod_root / "tritonllm.pyz"),
                str(pod_root / "mpi-ssh"), str(workdir), str(port), agent]
        pod_root.chmod(0o777)  # the leader's working directory is made by the pod user
        leader = subprocess.run(as_pod(pod_root, argv, uid=POD_UID), capture_output=True,
                                text=True, timeout=60)
        assert leader.returncode == 0, leader.stdout + leader.stderr
        result = json.loads(leader.stdout.splitlines()[-1])
        assert result["found"] == ["127.0.0.1"] and result["rc"] == 0, result
        uid, eff, bnd = result["out"].split("\n")[:3]
        assert uid == str(POD_UID)  # a non-root sshd can only open sessions as itself
        assert eff.split()[1] == bnd.split()[1] == "0000000000000000"
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert "event=sshd" in out and "chroot" not in out


@pytest.mark.skipif(not SSHD.exists(), reason="needs OpenSSH's sshd installed")
def test_root_sshd_without_capabilities_answers_but_refuses_logins_so_the_leader_waits(
    secret: Path, pod_root: Path, tmp_path: Path
) -> None:
    """Why the pods run sshd as non-root: root sshd with the rendered pod's capabilities (none)
    prints its banner but every login dies in its privilege-separation chroot. The banner
    alone let the leader start mpirun; the login check waits and then says why."""
    port = free_port()
    workdir = pod_root / "sshd"
    workdir.mkdir(mode=0o700)
    argv = ssh.prepare_sshd(port, secret, workdir)  # as root with capabilities: no refusal
    proc = subprocess.Popen(as_pod(pod_root, argv, uid=None), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        agent = agent_for(port, secret, tmp_path / "leader")
        deadline = time.monotonic() + 20
        while ssh.probe("127.0.0.1", port) is None:
            assert time.monotonic() < deadline and proc.poll() is None, "no banner"
            time.sleep(0.1)
        check = ssh.LoginCheck(agent)
        with pytest.raises(report.Failure) as exc:
            ssh.wait_for_workers(["127.0.0.1"], port, 2, check=check, interval=0.2)
    finally:
        out = stop(proc)
    assert exc.value.code == report.EXIT_TIMEOUT
    assert "no SSH login to the workers after 2s: 127.0.0.1:" in exc.value.message
    assert "login failed: ssh exited 255" in exc.value.message
    assert "chroot" in out  # sshd's own account of it


@pytest.mark.skipif(not SSHD.exists(), reason="needs OpenSSH's sshd installed")
def test_root_worker_without_capabilities_is_refused_naming_run_as_user(
    image: FakeImage, secret: Path, pod_root: Path
) -> None:
    proc = pod_worker(image, pod_root, secret, free_port(), None)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == report.EXIT_INVALID, out
    assert "sshd cannot start as root in this pod" in out
    assert "SYS_CHROOT, SETUID, SETGID" in out and "spec.podTemplate.runAsUser: 1000" in out


def test_engine_files_hash_in_parallel_to_the_same_digests(tmp_path: Path) -> None:
    import hashlib

    from tritonllm.runtime.engine_files import files_sha256

    paths = []
    for rank in range(5):
        p = tmp_path / f"rank{rank}.engine"
        p.write_bytes(bytes([rank]) * (3 << 20 | rank))
        paths.append(p)
    assert files_sha256(paths) == [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert files_sha256(paths[:1]) == [hashlib.sha256(paths[0].read_bytes()).hexdigest()]


# --- verified once per artifact digest (tritonllm.runtime.verified) ----------------------------


def verified_line(log: str) -> str:
    (line,) = [x for x in log.splitlines() if "event=verified" in x]
    return line


def marker_of(plan: dict[str, Any]) -> Path:
    _, digest = engine_files.read_artifact(Path(plan["engineDir"]))
    return verified.marker_path(Path(plan["engineDir"]), digest)


def test_the_build_verifies_the_engine_once_and_serving_pods_skip_the_full_hash(
    image: FakeImage,
) -> None:
    plan, path = built(image, "llama2-7b-tp4")
    marker = marker_of(plan)
    assert marker.is_file()  # written by the build, next to the engine, keyed by the digest
    _, digest = engine_files.read_artifact(Path(plan["engineDir"]))
    for _ in range(2):  # every pod after it, too
        code, log = run_launch(image, path)
        assert code == 0, log
        line = verified_line(log)
        assert "hashed=false" in line and f"digest={digest}" in line, line
        assert f"engine verified earlier (digest {digest[:16]}" in line
        assert "by the build), skipped full hash of 5 files, 0.00 GiB in" in line


def test_an_engine_without_a_marker_is_hashed_in_full_and_the_time_is_logged(
    image: FakeImage,
) -> None:
    """An engine built before the marker existed: every pod hashes it, as before (a serving pod
    mounts the store read-only and writes no marker)."""
    plan, path = ready(image, "llama2-7b-tp4")
    for _ in range(2):
        code, log = run_launch(image, path)
        assert code == 0, log
        line = verified_line(log)
        assert "hashed=true" in line and "engine verified: 5 files, 0.00 GiB in " in line, line
        assert "full hash: no earlier verification of this artifact.json" in line
    assert not (Path(plan["engineDir"]) / engine_files.STATE_DIR).exists()


def test_a_file_altered_after_the_marker_is_hashed_and_refused_even_with_its_mtime_restored(
    image: FakeImage,
) -> None:
    """The marker holds each file's ctime, which no file API sets back: restoring size and mtime
    does not make an altered file look verified."""
    plan, path = built(image, "llama2-7b-tp4")
    rank1 = Path(plan["engineDir"]) / "rank1.engine"
    st = rank1.stat()
    time.sleep(0.05)
    rank1.write_bytes(b"evil engine")  # same size as the fake engine
    os.utime(rank1, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert rank1.stat().st_size == st.st_size and rank1.stat().st_mtime_ns == st.st_mtime_ns
    code, log = run_launch(image, path)
    assert code == report.EXIT_MISMATCH, log
    assert "rank1.engine has another sha256 than the build recorded" in log
    assert not image.calls("mpirun")


def test_a_rewritten_artifact_json_does_not_reuse_the_marker(image: FakeImage) -> None:
    plan, path = built(image, "llama2-7b-tp4")
    artifact_path = Path(plan["engineDir"]) / engine_files.ARTIFACT
    artifact_path.write_text(json.dumps(json.loads(artifact_path.read_text())))  # other bytes
    code, log = run_launch(image, path)
    assert code == 0, log
    assert "hashed=true" in verified_line(log)
    assert "no earlier verification of this artifact.json" in verified_line(log)


def test_a_rerun_build_over_a_complete_engine_writes_the_missing_marker(image: FakeImage) -> None:
    plan, path = built(image, "llama2-7b-tp4")
    marker = marker_of(plan)
    marker.unlink()  # as an engine built before markers existed
    build: dict[str, Any] = relocate(render_example("llama2-7b-tp4").build_plan, image.root)
    out = image.tritonllm(
        "build", "--plan", str(write_plan(image.root / "etc/build.json", build)),
        env=image.env(FAKE_TRTLLM_VERSION=plan["trtllmVersion"]),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "event=cached" in out.stdout and "engine verified: 5 files" in out.stdout
    assert marker.is_file()
    assert "hashed=false" in verified_line(run_launch(image, path)[1])


def engine_dir(tmp_path: Path) -> tuple[Path, dict[str, Any], str]:
    """An engine with artifact.json and the build's verification marker."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "config.json").write_text("{}")
    for r in range(3):
        (engine / f"rank{r}.engine").write_bytes(bytes([r]) * 1000)
    checksums = engine_files.engine_checksums(engine)
    (engine / engine_files.ARTIFACT).write_text(json.dumps({"files": checksums}))
    artifact, digest = engine_files.read_artifact(engine)
    names = engine_files.engine_file_paths(engine)
    verified.write_marker(engine, digest, verified.fingerprints(engine, names), by="build")
    return engine, artifact, digest


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    hashed: list[Path] = []
    real = engine_files.file_sha256

    def counting(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(engine_files, "file_sha256", counting)
    return hashed


def test_a_matching_marker_means_no_engine_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, artifact, digest = engine_dir(tmp_path)
    hashed = count_hashes(monkeypatch)
    result = verified.verify_engine(engine, artifact, digest)
    assert not result.hashed and hashed == []
    assert (result.files, result.bytes) == (4, 3002)
    assert result.message.startswith(f"engine verified earlier (digest {digest[:16]}, at ")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda e: (e / "rank2.engine").write_bytes(b"\x02" * 1000), "rank2.engine changed"),
        (lambda e: _replace_same(e / "rank0.engine"), "rank0.engine changed"),
        (lambda e: _forge(e, lambda m: m["files"].pop("rank1.engine")),
         "verification marker is not this artifact's"),
        (lambda e: _forge(e, lambda m: m.update(artifactDigest="0" * 64)),
         "verification marker is not this artifact's"),
        (lambda e: _forge(e, lambda m: m["files"]["rank1.engine"].__setitem__(2, 1)),
         "rank1.engine changed"),
    ],
    ids=["rewritten", "replaced", "marker-missing-a-file", "marker-of-another-digest",
         "marker-with-another-ctime"],
)
def test_any_difference_from_the_marker_means_a_full_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any, why: str
) -> None:
    engine, artifact, digest = engine_dir(tmp_path)
    time.sleep(0.02)  # past the timestamp granularity of the marker's stat
    change(engine)
    hashed = count_hashes(monkeypatch)
    result = verified.verify_engine(engine, artifact, digest)  # same content: accepted
    assert result.hashed and len(hashed) == 4 and why in result.why
    assert result.message.startswith("engine verified: 4 files, 0.00 GiB in ")


def test_a_file_added_next_to_a_marked_engine_is_refused(tmp_path: Path) -> None:
    engine, artifact, digest = engine_dir(tmp_path)
    (engine / "plugin.so").write_bytes(b"\x7fELF")
    with pytest.raises(report.Failure, match=r"plugin\.so not written by the build"):
        verified.verify_engine(engine, artifact, digest)


def test_the_build_writes_no_marker_when_a_file_changes_while_it_is_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = tmp_path / "engine"
    engine.mkdir()
    config = {"pretrained_config": {"mapping": {"tp_size": 1, "pp_size": 1}}}
    (engine / "config.json").write_text(json.dumps(config))
    (engine / "rank0.engine").write_bytes(b"engine")
    real = build_module.engine_checksums

    def racing(path: Path) -> Any:
        out = real(path)
        time.sleep(0.02)
        (engine / "rank0.engine").write_bytes(b"ENGINE")  # written while being hashed
        return out

    monkeypatch.setattr(build_module, "engine_checksums", racing)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    build = build_module.Builder({"engineKey": "k", "engineDir": str(engine), "weightsDir":
                                str(tmp_path / "w"), "tensorParallel": 1, "pipelineParallel": 1,
                                "steps": []})
    build._write_artifact(1.0)
    assert (engine / engine_files.ARTIFACT).is_file()
    assert not list((engine / engine_files.STATE_DIR).glob("verified-*.json"))
    monkeypatch.setattr(build_module, "engine_checksums", real)
    build._write_artifact(1.0)
    _, digest = engine_files.read_artifact(engine)
    assert [p.name for p in (engine / engine_files.STATE_DIR).glob("verified-*.json")] == [
        f"verified-{digest}.json"]


def _replace_same(path: Path) -> None:
    """The same bytes and mtime in a new file (another inode) renamed over the old one."""
    st = path.stat()
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(path.read_bytes())
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    tmp.replace(path)


def _forge(engine: Path, edit: Any) -> None:
    (marker,) = (engine / engine_files.STATE_DIR).glob("verified-*.json")
    data = json.loads(marker.read_text())
    edit(data)
    marker.write_text(json.dumps(data))


def test_a_group_stopped_by_a_rank_says_which_rank_and_where() -> None:
    tail = [
        "[1,0]<stderr>:I1125 server.cc:305] Waiting for in-flight requests to complete.",
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        "mpirun noticed that process rank 1 with PID 20 on node 10.88.0.35 exited on signal 9 "
        "(Killed).",
        "--------------------------------------------------------------------------",
    ]
    message = launch.serving_stopped(["mpirun", "-n", "1"], 137, tail)
    assert message == ("mpirun exited 137: mpirun noticed that process rank 1 with PID 20 on "
                       "node 10.88.0.35 exited on signal 9 (Killed).")
    assert launch.serving_stopped(["tritonserver"], 1, ["", "error: x"]) == \
        "tritonserver exited 1: error: x"


def test_the_leader_ends_its_group_once_its_own_ranks_have_drained(tmp_path: Path) -> None:
    """A stand-in mpirun with one local rank (which drains on SIGTERM) and a remote rank that
    never ends (its pod got no signal): after the local rank exits, GroupDrain sends SIGTERM to
    mpirun, instead of letting the pod wait out its grace period."""
    script = tmp_path / "mpirun.py"
    script.write_text(
        "import os, signal, subprocess, sys, time\n"
        "rank = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "                        env={**os.environ, 'OMPI_COMM_WORLD_RANK': '0'})\n"
        "signal.signal(signal.SIGTERM, lambda *_: (rank.kill(), sys.exit(1)))\n"
        "print('ready', flush=True)\n"
        "rank.wait()\n"
        "time.sleep(60)  # the remote rank: mpirun waits for it\n"
    )
    mpirun = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert mpirun.stdout is not None and mpirun.stdout.readline().strip() == "ready"
        group = launch.GroupDrain(timeout=10)
        ranks = group(mpirun.pid)
        assert len(ranks) == 1
        os.kill(ranks[0], signal.SIGTERM)  # what forward_signals does with the targets
        assert mpirun.wait(timeout=10) == 1
    finally:
        mpirun.kill()
    assert group.ended


# --- an llmapi group: every rank under trtllm-llmapi-launch --------------------------------------

LLMAPI_MULTI = "cpu-standin-llmapi-multinode"


def test_llmapi_leader_runs_its_group_as_rendered_without_an_engine(
    image: FakeImage, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader of an llmapi group: no engine on the store (none is checked), the same login
    check and hostfile as an engine group, then the rendered mpirun with trtllm-llmapi-launch."""
    plan, _ = ready(image, LLMAPI_MULTI)
    assert plan["runtime"] == "llmapi" and not Path(plan["engineDir"]).exists()
    plan["ssh"] = {**plan["ssh"], "keyDir": str(secret)}
    leader = f"{LLMAPI_MULTI}-0.{LLMAPI_MULTI}-0.default"
    use_image_env(monkeypatch, image, LWS_LEADER_ADDRESS=leader, LWS_GROUP_SIZE="2")
    monkeypatch.setattr(ssh, "probe", lambda host, port: "10.1.2.4")
    logins: list[str] = []
    monkeypatch.setattr(ssh, "login", lambda agent, address: logins.append(address))
    assert launch.execute("leader", plan) == 0
    assert logins == ["10.1.2.4"]
    (call,) = image.calls("mpirun")
    argv = call["argv"]
    assert [Path(argv[0]).name, *argv[1:]] == plan["argv"]
    assert "trtllm-llmapi-launch" in argv
    hostfile = Path(argv[argv.index("--hostfile") + 1])
    assert hostfile.read_text().splitlines() == [f"{socket.gethostname()} slots=1",
                                                 "10.1.2.4 slots=1"]


def test_an_llmapi_leader_drains_the_tritonserver_its_launcher_started(tmp_path: Path) -> None:
    """Under trtllm-llmapi-launch the leader's ranks are launcher scripts: rank 0's runs
    tritonserver in the background, rank 1's an LLM API worker. A stop goes to that tritonserver
    only (signalled, the shell would die and orphan the server; the worker ending alone would
    abort the group mid-drain); once it has drained, the group is ended through mpirun."""
    server = tmp_path / "tritonserver"  # argv[0] is what names a process
    server.write_text("")
    script = tmp_path / "mpirun.py"
    script.write_text(
        "import os, signal, subprocess, sys, time\n"
        "def rank(n, command):\n"
        "    return subprocess.Popen(['bash', '-c', command],\n"
        "                            env={**os.environ, 'OMPI_COMM_WORLD_RANK': str(n)})\n"
        f"launcher = rank(0, '(exec -a {server} sleep 60) & wait; exit $?')\n"
        "worker = rank(1, 'exec sleep 60')\n"
        "signal.signal(signal.SIGTERM, lambda *_: (worker.kill(), sys.exit(1)))\n"
        "time.sleep(0.5)\n"
        "print('ready', launcher.pid, worker.pid, flush=True)\n"
        "launcher.wait()\n"
        "time.sleep(60)  # the worker rank: mpirun waits for it\n"
    )
    mpirun = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert mpirun.stdout is not None
        word, launcher, worker = mpirun.stdout.readline().split()
        assert word == "ready"
        group = launch.GroupDrain(timeout=10)
        targets = group(mpirun.pid)
        assert len(targets) == 1 and int(launcher) not in targets and int(worker) not in targets
        cmdline = Path(f"/proc/{targets[0]}/cmdline").read_bytes().split(b"\0")[0]
        assert cmdline.decode() == str(server)
        os.kill(targets[0], signal.SIGTERM)  # what forward_signals does with the targets
        assert mpirun.wait(timeout=10) == 1
    finally:
        mpirun.kill()
    assert group.ended
