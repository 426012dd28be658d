"""The local images (tritonllm_dev.images): built by buildah from our Dockerfiles on
mmdebstrap bases, pushed to a real registry on 127.0.0.1, cached by content; what is inside them;
and the pods tritonllm renders run from them unchanged but for spec.image.

Containers run with `buildah run --isolation chroot` from the images pulled back from the
registry (no OCI runtime, no Kubernetes): the real node's tests (tests/cluster) run them as pods.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import cmdline, descendants, example_body, free_ports
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.render import Rendered, RenderOptions, render_all
from tritonllm_dev import images, oci

from .conftest import REPORT, Runner, kill_tree, run_tree

pytestmark = pytest.mark.images

ROOT = Path(__file__).resolve().parents[2]
STORE_CLAIM = "tritonllm-model-store"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


# --- registry and content cache ---------------------------------------------------------------


def test_every_image_is_pushed_under_its_content_and_stable_tags(
    registry: str, pushed: dict[str, images.ImageResult]
) -> None:
    for image in images.IMAGES:
        r = pushed[image.name]
        name, digest = r.reference.split("@")
        assert name == f"{registry}/{image.repository}:{image.tag}"
        tags = _get(f"http://{registry}/v2/{image.repository}/tags/list")["tags"]
        assert {r.key, image.tag} <= set(tags), tags
        assert oci.manifest_digest(registry, image.repository, r.key) == digest
        assert oci.manifest_digest(registry, image.repository, image.tag) == digest
    # skopeo, an independent client, sees the same manifest.
    out = subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                          f"docker://{registry}/tritonllm/operator:dev"],
                         capture_output=True, text=True, check=True)
    info = json.loads(out.stdout)
    assert info["Digest"] == pushed["operator"].reference.split("@")[1]
    assert info["Architecture"] == "amd64"


def test_a_second_call_builds_and_pushes_nothing(
    registry: str, pushed: dict[str, images.ImageResult]
) -> None:
    lines: list[str] = []
    t0 = time.monotonic()
    again = images.ensure_images_report(registry, lines.append)
    seconds = time.monotonic() - t0
    REPORT["cached"] = (seconds, again)
    assert [r.state for r in again] == ["cached"] * len(images.IMAGES)
    assert {r.name: r.reference for r in again} == {n: r.reference for n, r in pushed.items()}
    busy = [m for m in lines if re.search(r"building|pushing|mmdebstrap|pip download", m)]
    assert not busy, busy
    # Its time is a figure (the session summary prints it), not asserted: under `pytest -n` it
    # shares the 2 cores with the other lanes.
    assert images.ensure_images(registry, lines.append, names=["busybox"]) == {
        "busybox": pushed["busybox"].reference}


def test_builds_take_packages_from_the_host_only() -> None:
    """No step of our Dockerfiles reached a package index: pip ran with --no-index, apt not."""
    logs = images.cache_root() / "images" / "logs"
    for name in ("operator", "triton-standin"):
        log = logs / f"build-{name}.log"
        if not log.exists():  # built by an earlier session: its log was kept there
            continue
        text = log.read_text()
        assert "--build-arg PIP_OFFLINE=1" in text
        # apt-get update/install output, pip reaching an index or downloading a file.
        fetched = re.findall(r"^(?:(?:Get|Hit|Ign|Err):\d+ .*|Looking in indexes.*|"
                             r"\s*Downloading https?://.*)$", text, re.M)
        assert not fetched, fetched


# --- the operator image -------------------------------------------------------------------------


def test_operator_image_config(buildah: oci.Buildah, pushed: dict[str, images.ImageResult]) -> None:
    config = buildah.inspect(pushed["operator"].local)["OCIv1"]["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["tritonllm"] and config["Cmd"] == ["run"]


def test_operator_image_is_non_root_with_the_zipapp_and_no_cluster_tooling(
    runner: Runner, pushed: dict[str, images.ImageResult]
) -> None:
    script = (
        "id -u; id -g; "
        "test -r /usr/local/share/tritonllm/tritonllm.pyz && echo pyz-readable; "
        "command -v cp; command -v ssh-keygen; command -v tritonllm; "
        "python3 -c 'import tritonllm_dev' 2>&1 | tail -1; "
        "find / -xdev -path '*tritonllm_dev*' 2>/dev/null | head -3; echo end"
    )
    out = runner.sh(pushed["operator"].reference, script)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ["65532", "65532", "pyz-readable"], lines
    assert lines[3:6] == ["/usr/bin/cp", "/usr/bin/ssh-keygen", "/opt/venv/bin/tritonllm"], lines
    assert "No module named 'tritonllm_dev'" in lines[6], lines
    assert lines[7:] == ["end"], lines


def test_operator_image_runs_every_verb_but_the_dev_ones(
    runner: Runner, pushed: dict[str, images.ImageResult]
) -> None:
    with runner.container(pushed["operator"].reference) as c:
        top = runner.run(c, ["tritonllm", "--help"])
        assert top.returncode == 0, top.stderr
        assert not re.search(r"^\s+cluster\s", top.stdout, re.M), top.stdout
        for verb in ("run", "build", "launch", "render", "crd"):
            assert runner.run(c, ["tritonllm", verb, "--help"]).returncode == 0, verb
        rendered = runner.run(c, ["tritonllm", "render", "-f", "/examples/gpt2-medium.yaml"],
                              volumes=[f"{ROOT / 'examples'}:/examples:ro"])
        assert rendered.returncode == 0, rendered.stderr
        kinds = {d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d}
        assert {"Deployment", "Job", "Service", "ConfigMap"} <= kinds
        crd = runner.run(c, ["tritonllm", "crd", "--stdout"])
        assert crd.returncode == 0 and "kind: CustomResourceDefinition" in crd.stdout
        for dev in (["cluster", "up"], ["demo"]):
            out = runner.run(c, ["tritonllm", *dev])
            assert out.returncode == 2 and "source checkout" in out.stderr, out
            assert "Traceback" not in out.stderr
        pyz = runner.run(c, ["python3", "-S", "/usr/local/share/tritonllm/tritonllm.pyz",
                             "launch", "--help"])
        assert pyz.returncode == 0 and "usage: tritonllm" in pyz.stdout, pyz.stderr


# --- pause and busybox --------------------------------------------------------------------------


def test_pause_image(buildah: oci.Buildah, runner: Runner,
                     pushed: dict[str, images.ImageResult]) -> None:
    info = buildah.inspect(pushed["pause"].local)
    config = info["OCIv1"]["config"]
    assert config["Entrypoint"] == ["/pause"] and config["User"] == "65535:65535"
    assert len(json.loads(info["Manifest"])["layers"]) == 1
    with runner.container(pushed["pause"].reference) as c:
        out = runner.run(c, ["/pause", "-v"])
    assert out.returncode == 0 and "pause" in out.stdout, out


def test_busybox_image_does_what_local_path_helpers_do(
    runner: Runner, pushed: dict[str, images.ImageResult]
) -> None:
    script = ("set -e; VOL_DIR=/tmp/pvc-1; mkdir -m 0777 -p \"$VOL_DIR\"; test -d \"$VOL_DIR\"; "
              "rm -rf \"$VOL_DIR\"; test ! -e \"$VOL_DIR\"; echo ok; busybox | head -1")
    out = runner.sh(pushed["busybox"].reference, script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "ok" and "BusyBox v1.35" in out.stdout


# --- the Triton stand-in ------------------------------------------------------------------------

NGC_PATHS = (
    "/opt/tritonserver/bin/tritonserver",
    "/opt/tritonserver/lib/libtritonserver.so",
    "/opt/tritonserver/backends/python/libtriton_python.so",
    "/opt/tritonserver/backends/python/triton_python_backend_stub",
    "/opt/tritonserver/backends/python/triton_python_backend_utils.py",
    "/opt/tritonserver/backends/tensorrtllm/model.py",
    "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
    "/opt/tritonserver/caches/local/libtritoncache_local.so",
    "/app/tensorrt_llm/examples/quantization/quantize.py",
    "/app/tensorrt_llm/examples/models/core/gpt/convert_checkpoint.py",
    "/app/tensorrt_llm/examples/models/core/llama/convert_checkpoint.py",
    "/usr/local/bin/trtllm-build",
    "/usr/local/bin/nvidia-smi",
    "/usr/sbin/sshd",
    "/usr/bin/mpirun",
    "/usr/bin/python3",
    "/opt/nvidia/nvidia_entrypoint.sh",
)


def test_standin_has_the_ngc_layout(runner: Runner, pushed: dict[str, images.ImageResult]) -> None:
    libs = ("/opt/tritonserver/bin/tritonserver /opt/tritonserver/backends/python/*.so "
            "/opt/tritonserver/backends/python/triton_python_backend_stub")
    script = (
        f"for p in {' '.join(NGC_PATHS)}; do test -e $p || echo MISSING $p; done; "
        f"for f in {libs}; do ldd $f | grep 'not found' && echo UNRESOLVED $f; done; "
        "python3 -c 'from importlib import metadata; print(metadata.version(\"tensorrt_llm\"))'; "
        "python3 -c 'import numpy, tokenizers, transformers, yaml, huggingface_hub; "
        "print(numpy.__version__)' 2>/dev/null; "
        "nvidia-smi --query-gpu=name --format=csv,noheader | head -1; "
        "TRITONLLM_STANDIN_GPUS=2 nvidia-smi -L | wc -l; "
        "id -u triton-server; echo $TRITON_SERVER_VERSION $NVIDIA_TRITON_SERVER_VERSION"
    )
    out = runner.sh(pushed["triton-standin"].reference, script)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("MISSING", "UNRESOLVED"))], lines
    assert lines[0] == images.STANDIN_TRTLLM
    assert lines[1].startswith("1."), lines  # numpy < 2, as nvidia-pytriton pins it
    assert lines[2:] == ["NVIDIA CPU STANDIN", "2", "1000",
                         f"2.51.0 {images.STANDIN_RELEASE}"], lines


# --- rendered pods, run from the images -----------------------------------------------------------


class Pod:
    """One rendered pod's volumes laid out on the host, and its containers run from the images
    (pulled from the registry) with those volumes, env and user: only what a chroot cannot
    share is left out (the memory emptyDir at /dev/shm is the host's tmpfs)."""

    def __init__(self, runner: Runner, rendered: Rendered, spec: dict[str, Any],
                 root: Path, store: Path) -> None:
        self.runner, self.spec = runner, spec
        self.volumes: dict[str, Path] = {}
        cms = {o["metadata"]["name"]: o for o in rendered.by_kind("ConfigMap")}
        for vol in spec["volumes"]:
            path = root / vol["name"]
            if "persistentVolumeClaim" in vol:
                path = store
            elif "configMap" in vol:
                data = cms[vol["configMap"]["name"]]["data"]
                items = vol["configMap"].get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    (path / item["path"]).parent.mkdir(parents=True, exist_ok=True)
                    (path / item["path"]).write_text(data[item["key"]])
            elif vol.get("emptyDir", {}).get("medium") == "Memory":
                continue
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            self.volumes[vol["name"]] = path

    def source(self, mount: dict[str, Any]) -> Path:
        """The host directory of a volumeMount; a missing subPath is created as the kubelet
        does, with the volume root's mode (so a mount over a read-only parent has its place)."""
        path = self.volumes[mount["name"]]
        if not mount.get("subPath"):
            return path
        mode = path.stat().st_mode & 0o7777
        for part in Path(mount["subPath"]).parts:
            path = path / part
            if not path.exists():
                path.mkdir()
                path.chmod(mode)
        return path

    def argv(self, container: dict[str, Any], name: str) -> list[str]:
        mounts = [f"{self.source(m)}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"
                  for m in container.get("volumeMounts", []) if m["name"] in self.volumes]
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        uid = (container.get("securityContext") or {}).get("runAsUser")
        return self.runner.argv(name, container["command"], volumes=mounts, env=env,
                                user=None if uid is None else str(uid))

    def init(self) -> None:
        for container in self.spec.get("initContainers", []):
            with self.runner.container(container["image"]) as name:
                out = run_tree(self.argv(container, name), 120)
            assert out.returncode == 0, (container["name"], out.stdout, out.stderr)

    def run(self, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        self.init()
        (container,) = self.spec["containers"]
        with self.runner.container(container["image"]) as name:
            return run_tree(self.argv(container, name), timeout)

    @contextlib.contextmanager
    def start(self, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
        """The serving pod's tritonserver container (its OpenAI frontend beside it runs from
        the operator image on the real node: tests/cluster/test_real_openai.py)."""
        self.init()
        (container,) = [k for k in self.spec["containers"] if k["name"] == "triton"]
        with self.runner.container(container["image"]) as name, open(log, "wb") as out:
            proc = subprocess.Popen(self.argv(container, name), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                yield proc, name
            finally:
                if proc.poll() is None:
                    kill_tree(proc.pid)
                proc.wait(timeout=30)


def _loopback_ports(plan: dict[str, Any], ports: list[int]) -> dict[str, Any]:
    """The launch plan with only its ports moved and its servers bound to 127.0.0.1: a chroot
    shares the host's network, where a pod has its own (the one change this test makes)."""
    moved = {"--http-port=8000": f"--http-port={ports[0]}",
             "--grpc-port=8001": f"--grpc-port={ports[1]}",
             "--metrics-port=8002": f"--metrics-port={ports[2]}"}
    argv: list[str] = []
    for arg in plan["argv"]:
        argv.append(moved.get(arg, arg))
        if arg.endswith("/bin/tritonserver"):
            argv += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                     "--metrics-address=127.0.0.1"]
    return {**plan, "argv": argv}


def _deployment(pushed: dict[str, images.ImageResult]) -> Rendered:
    body = example_body("gpt2-medium")
    body["spec"]["image"] = pushed["triton-standin"].reference
    body["spec"]["model"]["source"] = f"pvc://{STORE_CLAIM}/models/gpt2-medium"
    body["spec"]["gpu"]["product"] = "NVIDIA-CPU-STANDIN"
    dep = parse_deployment(body)
    assert dep.spec.storage.claimName == STORE_CLAIM
    settings = OperatorSettings(tools_image=pushed["operator"].reference)
    return render_all(dep, RenderOptions(settings))


def _post(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _launch_pid(run: int) -> int | None:
    """The `python3 tritonllm.pyz launch` process under a `buildah run`."""
    for pid in descendants(run):
        cmd = cmdline(pid)  # not buildah-chroot-exec, whose argv holds the command it runs
        if cmd[:1] and "python" in cmd[0] and "launch" in cmd and any(
                c.endswith("tritonllm.pyz") for c in cmd):
            return pid
    return None


def test_standin_runs_the_rendered_pods_unchanged(
    runner: Runner, pushed: dict[str, images.ImageResult], tmp_path: Path
) -> None:
    """Engine build Job, model-repository Job and the serving pod of examples/gpt2-medium.yaml,
    rendered with spec.image = the stand-in and the tools image = the operator image, run from
    the images as rendered (commands, env, mounts, users), version and GPU checks on."""
    rendered = _deployment(pushed)
    store = tmp_path / "pvc" / STORE_CLAIM
    model = store / "models" / "gpt2-medium"
    model.mkdir(parents=True)
    store.chmod(0o777)
    (model / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    tok = runner.sh(pushed["triton-standin"].reference,
                    "python3 /src/make_tokenizer.py /model",
                    volumes=[f"{ROOT / 'tests' / 'triton'}:/src:ro", f"{model}:/model"])
    assert tok.returncode == 0, tok.stderr

    build = Pod(runner, rendered, rendered.build_job["spec"]["template"]["spec"],
                tmp_path / "build", store).run()
    assert build.returncode == 0, build.stdout + build.stderr
    artifact = json.loads((store / rendered.engine_dir.removeprefix("/store/") /
                           "artifact.json").read_text())
    assert artifact["trtllmVersion"] == images.STANDIN_TRTLLM
    assert artifact["gpuProduct"] == "NVIDIA CPU STANDIN"

    repo = Pod(runner, rendered, rendered.repository_job["spec"]["template"]["spec"],
               tmp_path / "repository", store).run()
    assert repo.returncode == 0, repo.stdout + repo.stderr
    assert (store / rendered.repository_dir.removeprefix("/store/") / "ensemble").is_dir()

    ports = free_ports(3)
    plan_cm = next(o for o in rendered.by_kind("ConfigMap") if "launch.json" in o["data"])
    plan_cm["data"]["launch.json"] = json.dumps(
        _loopback_ports(json.loads(plan_cm["data"]["launch.json"]), ports))
    serving = Pod(runner, rendered, rendered.one("Deployment")["spec"]["template"]["spec"],
                  tmp_path / "serving", store)
    log = tmp_path / "serving.log"
    with serving.start(log) as (proc, _):
        deadline = time.monotonic() + 240
        while not _ready(ports[0]):
            assert proc.poll() is None, log.read_text()[-5000:]
            assert time.monotonic() < deadline, log.read_text()[-5000:]
            time.sleep(0.5)
        out = _post(ports[0], "/v2/models/ensemble/generate",
                    {"text_input": "hello world", "max_tokens": 4})
        assert out["model_name"] == "ensemble" and out["text_output"], out
        pid = _launch_pid(proc.pid)
        assert pid is not None
        os.kill(pid, signal.SIGTERM)  # as the kubelet stops the pod: a graceful drain
        assert proc.wait(timeout=90) == 0, log.read_text()[-5000:]
    text = log.read_text()
    assert "event=engine" in text and "checked=true" in text, text[-3000:]
