"""The shared model store: who may write where, what names a directory, and what may be deleted.

- Every writable mount of the store is a directory named by one of the deployment's own keys
  (engine key, download key) or its own repositories; user-chosen paths are only read.
- Path-bearing fields refuse '.', '..' and empty segments and a leading '-' (tests/cases.py
  INVALID has the admission side), and rendering refuses them again.
- The engine key covers every input of the build Job (environment, service account, pull
  secrets, token Secret, tokenizer, claim); the download directory is per download key.
- The engine cleanup deletes only a key that is exactly an engine key, checked by the operator
  and again by the Job's shell, and never an engine another deployment still serves.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cases import cr
from tests.fake_kube import FakeKube
from tests.helpers import container
from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, TritonLLMDeployment, parse_deployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.reconciler import Reconciler
from tritonllm.plan.deletion import FINALIZER, UNSAFE_ENGINE_KEY, engine_to_forget
from tritonllm.render import RenderOptions, naming, render_all
from tritonllm.render.engine import engine_record
from tritonllm.render.jobs import CLEANUP_SCRIPT, engine_cleanup_job
from tritonllm.render.pod import store_mounts

STORE_CLAIM = "tritonllm-model-store"


def dep(spec: dict[str, Any] | None = None, **top: Any) -> TritonLLMDeployment:
    return parse_deployment(cr(spec, **top))


def writable(job: dict[str, Any], name: str) -> set[str]:
    """The store paths a container may write: its store mounts that are not read-only."""
    return {m["mountPath"] for m in container(job, name)["volumeMounts"]
            if m["name"] == "model-store" and not m.get("readOnly")}


def read_only_root(job: dict[str, Any], name: str) -> bool:
    return {"name": "model-store", "mountPath": "/store", "readOnly": True} in container(
        job, name)["volumeMounts"]


# --- no writable path across the store --------------------------------------------------------

SOURCES = {
    "hf": {"model": {"source": "hf://meta-llama/Llama-2-7b-hf"}},
    "pvc-on-store": {"model": {"source": f"pvc://{STORE_CLAIM}/models/llama"}},
    "pvc-other-claim": {"model": {"source": "pvc://weights/llama"}},
    "hf-tokenizer": {"model": {"tokenizer": {"source": "hf://org/tok"}}},
    "pvc-tokenizer-on-store": {"model": {"tokenizer": {"source": f"pvc://{STORE_CLAIM}/tok"}}},
}
RUNTIMES = {
    "engine": {},
    "llmapi": {"runtime": "llmapi", "image": "nvcr.io/nvidia/tritonserver:25.06-trtllm-python-py3"},
}


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_writable_store_mount_is_a_directory_of_the_deployments_own_keys(
    source: str, runtime: str
) -> None:
    d = dep({**SOURCES[source], **RUNTIMES[runtime]}, metadata={"name": "a", "namespace": "t1"})
    r = render_all(d)
    key = r.engine_key
    spec = d.spec
    repo_dir = f"/store/repos/t1/_shared/{r.repository_key}"
    own = {f"/store/engines/{key}", f"/store/checkpoints/{key}", repo_dir}
    for src, rev, where in ((spec.model.source, spec.model.revision, naming.weights_dir(d)),
                            (spec.model.tokenizer.source, "main", naming.tokenizer_dir(d))):
        if src and src.startswith("hf://"):
            dkey = naming.download_key(d, src, rev)
            assert where.endswith(f"/{dkey}") and where.startswith("/store/models/hf/")
            own.add(where)
    build, repo = writable(r.build_job, "build"), writable(r.repository_job, "repository")
    assert build and build <= own, build - own
    assert repo == {repo_dir}  # its content key's directory only
    assert read_only_root(r.build_job, "build") and read_only_root(r.repository_job, "repository")
    assert writable(r.workload, "triton") == set()  # serving pods only read
    # A user-chosen pvc:// directory is never among them.
    for src in (spec.model.source, spec.model.tokenizer.source):
        if src and src.startswith(f"pvc://{STORE_CLAIM}/"):
            path = "/store/" + src.split("/", 3)[3]
            assert not any(path == w or path.startswith(w + "/") or w.startswith(path + "/")
                           for w in build | repo)


def test_an_llmapi_source_on_another_deployments_engine_is_only_read() -> None:
    """The reported hole: pvc://<store>/engines/<key of another deployment> as an llmapi model
    made the download Job mount that engine writable (its step markers went there)."""
    other = render_all(dep()).engine_key
    d = dep({**RUNTIMES["llmapi"], "model": {"source": f"pvc://{STORE_CLAIM}/engines/{other}"}})
    r = render_all(d)
    assert writable(r.build_job, "build") == {f"/store/engines/{r.engine_key}"}
    assert r.build_plan["weightsDir"] == f"/store/engines/{other}"
    assert r.build_plan["stateDir"] == f"/store/engines/{r.engine_key}/.tritonllm"


def test_a_revision_of_dot_is_refused_and_never_becomes_a_subpath() -> None:
    with pytest.raises(InvalidDeployment) as info:
        dep({"model": {"revision": "."}})
    assert [e.field for e in info.value.errors] == ["spec.model.revision"]
    # An object that skipped parsing (admitted under an older CRD and copied, say) is refused by
    # rendering, naming the field, before any mount exists.
    good = dep()
    bad = good.model_copy(update={"spec": good.spec.model_copy(update={
        "model": good.spec.model.model_copy(update={"revision": "."})})})
    with pytest.raises(InvalidDeployment) as info:
        render_all(bad)
    assert info.value.errors[0].field == "spec.model.revision"
    assert "'.'" in info.value.errors[0].message


@pytest.mark.parametrize("source", [f"pvc://{STORE_CLAIM}/a/./b", f"pvc://{STORE_CLAIM}//engines",
                                    f"pvc://{STORE_CLAIM}/-x"])
def test_rendering_refuses_a_source_path_that_skipped_parsing(source: str) -> None:
    good = dep()
    bad = good.model_copy(update={"spec": good.spec.model_copy(update={
        "model": good.spec.model.model_copy(update={"source": source})})})
    with pytest.raises(InvalidDeployment) as info:
        render_all(bad)
    assert info.value.errors[0].field == "spec.model.source"


@pytest.mark.parametrize(
    "patch",
    [
        {"model": {"revision": "refs/pr/12"}},
        {"model": {"revision": "v1.0"}},
        {"model": {"revision": "0123abcd" * 5}},
        {"model": {"revision": "..."}},
        {"model": {"revision": ".hidden"}},
        {"model": {"source": "pvc://models/llama/"}},
        {"model": {"source": "pvc://models/a.b/..c/...d"}},
        {"model": {"tokenizer": {"source": "pvc://models/tok"}}},
        {"engine": {"quantization": {"format": "int4_awq", "calibrationDataset": "cnn_dailymail"}}},
        {"engine": {"quantization": {"format": "int4_awq",
                                     "calibrationDataset": "/store/datasets/calib"}}},
    ],
)
def test_plain_paths_are_still_accepted(patch: dict[str, Any]) -> None:
    render_all(dep(patch))


@pytest.mark.parametrize("path", ["/store/models/.", "/store/a//b", "/store/-x", "/store/../x",
                                  "/elsewhere/x"])
def test_store_mounts_refuse_a_writable_path_that_is_not_plain(path: str) -> None:
    with pytest.raises(ValueError, match="not a plain directory on the store"):
        store_mounts(dep(), read_only=True, writable=[path])


# --- every build input in the key ------------------------------------------------------------

CHANGES = {
    "env HF_ENDPOINT": {"podTemplate": {"env": [{"name": "HF_ENDPOINT",
                                                 "value": "https://mirror.example"}]}},
    "env PYTHONPATH": {"podTemplate": {"env": [{"name": "PYTHONPATH", "value": "/store/x"}]}},
    "serviceAccountName": {"podTemplate": {"serviceAccountName": "builder"}},
    "imagePullSecrets": {"podTemplate": {"imagePullSecrets": ["mirror-pull"]}},
    "credentials": {"model": {"credentials": {"secretName": "other-token"}}},
    "tokenizer": {"model": {"tokenizer": {"source": "hf://org/tok"}}},
    "claim": {"storage": {"claimName": "other-store"}},
}


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_build_input_changes_the_engine_key(change: str, runtime: str) -> None:
    base = dep(RUNTIMES[runtime])
    changed = dep({**RUNTIMES[runtime], **CHANGES[change]})
    assert naming.engine_key(base) != naming.engine_key(changed)


def test_an_image_change_changes_the_llmapi_key_too() -> None:
    """The download runs in spec.image: another image is another download."""
    a = dep(RUNTIMES["llmapi"])
    b = dep({**RUNTIMES["llmapi"], "image": "nvcr.io/nvidia/tritonserver:25.07-trtllm-python-py3"})
    assert naming.engine_key(a) != naming.engine_key(b)


def test_serving_only_pod_settings_keep_the_key() -> None:
    a = naming.engine_key(dep())
    assert a == naming.engine_key(dep({"podTemplate": {"labels": {"team": "x"},
                                                       "resources": {"cpu": "4"}}}))


def test_another_claim_builds_its_own_engine_and_record() -> None:
    a, b = dep(), dep({"storage": {"claimName": "other-store"}})
    ra, rb = render_all(a), render_all(b)
    assert ra.engine_key != rb.engine_key
    rec_a, rec_b = engine_record(a, ra.engine_key), engine_record(b, rb.engine_key)
    assert (rec_a.name, rec_b.name) == (ra.engine_key, rb.engine_key)
    assert rec_a["spec"]["claimName"] == STORE_CLAIM and rec_b["spec"]["claimName"] == "other-store"
    assert ra.build_job.name != rb.build_job.name
    claims = {v["persistentVolumeClaim"]["claimName"]
              for v in rb.build_job["spec"]["template"]["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims == {"other-store"}


def test_the_download_directory_is_per_download_key() -> None:
    plain = dep()
    mirrored = dep(CHANGES["env HF_ENDPOINT"])
    assert naming.weights_dir(plain) != naming.weights_dir(mirrored)
    # Two engines from the same download (quantized differently) share its directory...
    awq = dep({"engine": {"quantization": {"format": "int4_awq"}}})
    assert naming.engine_key(awq) != naming.engine_key(plain)
    assert naming.weights_dir(awq) == naming.weights_dir(plain)
    # ...which neither's key names, and which no Job with other download inputs may write.
    assert naming.weights_dir(mirrored) not in writable(render_all(plain).build_job, "build")
    assert naming.weights_dir(plain) in writable(render_all(plain).build_job, "build")


def test_the_key_schema_is_2_so_engines_of_the_old_derivation_are_rebuilt_once() -> None:
    inputs = naming.engine_key_inputs(dep())
    assert inputs["schema"] == naming.ENGINE_KEY_SCHEMA == 2
    assert inputs["buildPod"]["claimName"] == STORE_CLAIM
    assert re.fullmatch(r"[0-9a-f]{16}", naming.engine_key(dep()))


# --- the engine cleanup deletes only an engine key ---------------------------------------------

KEY = "0123456789abcdef"
BAD_KEYS = ["", "..", "../..", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0",
            "0123456789abcdeg", "*", "-rf", "0123456789abcde/", " 123456789abcdef"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_the_cleanup_job_is_not_rendered_for_a_key_that_is_not_an_engine_key(key: str) -> None:
    with pytest.raises(ValueError, match="not an engine key"):
        engine_cleanup_job(dep(), key, RenderOptions())


def test_the_cleanup_job_may_write_only_engines_and_checkpoints() -> None:
    job = engine_cleanup_job(dep(), KEY, RenderOptions())
    assert read_only_root(job, "cleanup")
    assert writable(job, "cleanup") == {"/store/engines", "/store/checkpoints"}


def _store(tmp: Path) -> Path:
    for key in (KEY, "fedcba9876543210"):
        for d in ("engines", "checkpoints"):
            (tmp / d / key).mkdir(parents=True)
            (tmp / d / key / "rank0.engine").write_text("x")
    return tmp


def _run_cleanup(tmp: Path, key: str) -> subprocess.CompletedProcess[str]:
    script = CLEANUP_SCRIPT.replace(f"{c.STORE_MOUNT}/", f"{tmp}/")
    return subprocess.run(["sh", "-c", script, "engine-cleanup", key], capture_output=True,
                          text=True, timeout=30, check=False)


@pytest.mark.parametrize("key", BAD_KEYS)
def test_the_cleanup_shell_refuses_a_key_that_is_not_an_engine_key(
    key: str, tmp_path: Path
) -> None:
    store = _store(tmp_path)
    before = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    out = _run_cleanup(store, key)
    assert out.returncode == 2, out
    assert "refusing to delete" in out.stderr
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*")) == before


def test_the_cleanup_shell_deletes_exactly_that_engine(tmp_path: Path) -> None:
    store = _store(tmp_path)
    out = _run_cleanup(store, KEY)
    assert out.returncode == 0, out
    assert not (store / "engines" / KEY).exists() and not (store / "checkpoints" / KEY).exists()
    assert (store / "engines" / "fedcba9876543210" / "rank0.engine").is_file()
    assert (store / "checkpoints" / "fedcba9876543210" / "rank0.engine").is_file()


@pytest.mark.parametrize("key", [k for k in BAD_KEYS if k] + [None, 42])
def test_deletion_refuses_a_status_key_that_is_not_an_engine_key(key: Any) -> None:
    forget, refused = engine_to_forget({"status": {"engine": {"key": key}}})
    assert forget is None
    assert (refused is None) == (key is None)
    assert engine_to_forget({"status": {"engine": {"key": KEY}}}) == (KEY, None)


# --- the operator's deletion pass ----------------------------------------------------------------


def _deleting(name: str, status: dict[str, Any]) -> dict[str, Any]:
    body = cr({"storage": {"engineRetention": "Delete"}},
              metadata={"name": name, "namespace": "default", "finalizers": [FINALIZER],
                        "deletionTimestamp": "2026-01-01T00:00:00Z"})
    return {**body, "status": status}


def _user(name: str, status: dict[str, Any]) -> dict[str, Any]:
    return {**cr(metadata={"name": name, "namespace": "default"}), "status": status}


def _record(key: str) -> dict[str, Any]:
    return {"apiVersion": c.API_VERSION, "kind": c.ENGINE_KIND,
            "metadata": {"name": key, "namespace": "default"}, "status": {"state": "Ready"}}


def _finalize(kube: FakeKube, name: str) -> None:
    async def main() -> None:
        rec = Reconciler(kube, OperatorSettings(), kube.cache())
        await rec.reconcile("default", name)

    asyncio.run(main())


def _engine(key: str) -> dict[str, Any]:
    return {"key": key, "path": f"/store/engines/{key}"}


def test_retention_delete_removes_an_engine_nobody_else_uses() -> None:
    kube = FakeKube([_deleting("a", {"engine": _engine(KEY)}), _record(KEY)])
    _finalize(kube, "a")
    assert (c.ENGINE_KIND, "default", KEY) not in kube.objects
    job = kube.objects[("Job", "default", f"tritonllm-clean-{KEY}")]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == KEY
    assert FINALIZER not in kube.objects[(c.KIND, "default", "a")]["metadata"]["finalizers"]


def test_retention_delete_keeps_an_engine_another_deployment_serves_during_its_rebuild() -> None:
    """b is rebuilding: its new engine is K2, but its pods still serve KEY (previousEngine)."""
    kube = FakeKube([
        _deleting("a", {"engine": _engine(KEY)}),
        _user("b", {"engine": _engine("fedcba9876543210"), "previousEngine": _engine(KEY)}),
        _record(KEY),
    ])
    _finalize(kube, "a")
    assert (c.ENGINE_KIND, "default", KEY) in kube.objects
    assert not [o for (kind, _, _), o in kube.objects.items() if kind == "Job"]
    assert kube.writes("delete") == []
    assert FINALIZER not in kube.objects[(c.KIND, "default", "a")]["metadata"]["finalizers"]
    assert kube.cache().deployments_using("default", KEY) == ["a", "b"]


def test_retention_delete_with_a_forged_key_deletes_nothing_and_says_why() -> None:
    forged = "../../repos"
    kube = FakeKube([_deleting("a", {"engine": _engine(forged)}), _record(KEY)])
    _finalize(kube, "a")
    assert kube.writes("delete") == [] and kube.writes("create") == []
    (ev,) = [e for e in kube.events if e["reason"] == UNSAFE_ENGINE_KEY]
    assert ev["type"] == "Warning" and "not an engine key" in ev["message"]
    # Deletion is never blocked: the finalizer goes anyway.
    assert FINALIZER not in kube.objects[(c.KIND, "default", "a")]["metadata"]["finalizers"]
