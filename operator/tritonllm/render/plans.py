"""The plans the in-pod entry points execute, and the repository key that addresses them.

- build.json (build ConfigMap): download, convert or quantize, trtllm-build
  (tritonllm.triton.build); for llmapi the download, then ModelOpt's quantization when
  engine.quantization asks for one.
- repository.json and launch.json (plan ConfigMap, next to the repository files): the repository
  step with the engine it must match, and the serving command with the topology it runs.
- openai.json (plan ConfigMap, when the pods run the OpenAI frontend): its FrontendConfig.

The plan ConfigMap is named by the repository key, a hash of its whole content; since that content
names the repository directory, which is named by the key, the plans are rendered once with a
placeholder for the directory, hashed, and then the placeholder is filled in.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.triton.build import build_plan, download_plan, download_step
from tritonllm.triton.launch import launch_spec, mpirun_argv, rsh_agent
from tritonllm.triton.openai import FRONTEND_CONFIG_KEY

from . import naming

BUILD_PLAN_KEY = "build.json"
REPOSITORY_PLAN_KEY = "repository.json"
LAUNCH_PLAN_KEY = "launch.json"
# Stands for the repository directory until the key that names it is known.
REPOSITORY_SLOT = "<repo>"
# The build's step markers, under a directory of the engine key (tritonllm.runtime.build).
STATE_DIR = ".tritonllm"


def engine_plan(dep: TritonLLMDeployment, key: str) -> dict[str, Any]:
    """build.json: what the build (or, for llmapi, download) Job runs."""
    spec = dep.spec
    weights = naming.weights_dir(dep)
    if spec.runtime == "llmapi":
        # With engine.quantization the key's directory receives ModelOpt's checkpoint.
        quantized = naming.engine_dir(key) if naming.llmapi_quantized(dep) else None
        plan = download_plan(spec, model_key=key, weights_dir=weights,
                             state_dir=f"{naming.engine_dir(key)}/{STATE_DIR}",
                             version=dep.trtllm_version, quantized_dir=quantized)
    else:
        plan = build_plan(
            spec,
            dep.trtllm_version,
            engine_key=key,
            weights_dir=weights,
            checkpoint_dir=naming.checkpoint_dir(key),
            engine_dir=naming.engine_dir(key),
        )
    tokenizer = spec.model.tokenizer.source
    if tokenizer:
        tok = naming.tokenizer_dir(dep)
        step = download_step(
            spec, weights_dir=tok, source=tokenizer, revision="main", name="download-tokenizer"
        )
        plan["steps"].insert(1, step)
    return plan


def launch_plan(
    dep: TritonLLMDeployment, key: str, repo_dir: str, digest: EngineDigest | None = None
) -> dict[str, Any]:
    """launch.json: what `tritonllm launch` checks (the topology, the engine's digest when its
    build reported one) and the exact command."""
    spec = dep.spec
    topology = spec.topology
    launch = launch_spec(topology, runtime=spec.runtime, model_repository=repo_dir)
    ssh = launch.ssh
    return {
        "version": 1,
        "runtime": spec.runtime,
        "engineKey": key,
        "engineDir": naming.engine_dir(key),
        **({"engineDigest": digest.to_wire()} if digest and has_artifact(dep) else {}),
        # llmapi's quantized checkpoint is checked as an engine's files are (no tp/pp in it).
        **({"verifyCheckpoint": True} if naming.llmapi_quantized(dep) else {}),
        "modelRepository": repo_dir,
        "trtllmVersion": str(dep.trtllm_version),
        **topology.to_wire(),
        "ports": {
            "http": launch.http_port,
            "grpc": launch.grpc_port,
            "metrics": launch.metrics_port,
        },
        # The whole command, multi-node hosts (a hostfile) and SSH agent included.
        "argv": mpirun_argv(launch),
        "ssh": None
        if ssh is None
        else {
            "port": ssh.port,
            "keyDir": c.MPI_SSH_MOUNT,
            "workDir": ssh.workdir,
            # mpirun's own SSH command: the leader logs in with it to every worker first.
            "agent": rsh_agent(ssh),
        },
    }


def has_artifact(dep: TritonLLMDeployment) -> bool:
    """Whether the build Job leaves an artifact.json with the checksums of what it wrote (an
    engine, or llmapi's quantized checkpoint), whose digest the operator anchors."""
    return dep.spec.runtime == "engine" or naming.llmapi_quantized(dep)


def repository_plan(dep: TritonLLMDeployment, key: str, repo_dir: str) -> dict[str, Any]:
    """repository.json: copy the rendered repository onto the store, after checking the engine."""
    spec = dep.spec
    step = {
        "name": "repository",
        "from": f"{c.PLAN_MOUNT}/repo",
        "to": repo_dir,
        "engineDir": naming.engine_dir(key) if spec.runtime == "engine" else None,
        "weightsDir": naming.weights_dir(dep),
        "expect": {**spec.topology.to_wire(), "trtllmVersion": str(dep.trtllm_version)},
    }
    return {"version": 1, "engineKey": key, "steps": [step]}


@dataclasses.dataclass(frozen=True)
class EngineDigest:
    """What the build reported about the engine it wrote (tritonllm.runtime.verified)."""

    engine: str  # sha256:… of every file's name, size and sha256 (artifact.json's `files`)
    fingerprints: str | None  # sha256:… of the files' size, mtime, ctime and inode

    @staticmethod
    def of(engine: str | None, fingerprints: str | None) -> EngineDigest | None:
        return EngineDigest(engine, fingerprints) if engine else None

    def to_wire(self) -> dict[str, str]:
        out = {"engine": self.engine}
        if self.fingerprints:
            out["fingerprints"] = self.fingerprints
        return out


@dataclasses.dataclass(frozen=True)
class Keyed:
    """The plan ConfigMap's content, addressed by its hash."""

    repository_key: str
    repository_dir: str
    files: dict[str, str]  # ConfigMap content: repository files and the two plans (JSON)
    launch_plan: dict[str, Any]


def keyed_plans(
    dep: TritonLLMDeployment, key: str, repo_files: dict[str, str],
    digest: EngineDigest | None = None, frontend: tuple[str, str] | None = None,
) -> Keyed:
    """Render the plans once, hash everything, then fill in the repository directory. A new
    engine digest (an engine rebuilt under its key) is a new repository revision. `frontend`:
    the OpenAI frontend's openai.json as the ConfigMap holds it and as the key hashes it
    (tritonllm.render.frontend.config_files); without it the key is what it always was."""
    texts = {
        LAUNCH_PLAN_KEY: _json(launch_plan(dep, key, REPOSITORY_SLOT, digest)),
        REPOSITORY_PLAN_KEY: _json(repository_plan(dep, key, REPOSITORY_SLOT)),
    }
    hashed = {**repo_files, **texts}
    if frontend is not None:
        hashed[FRONTEND_CONFIG_KEY] = frontend[1]
    repo_key = naming.repository_key(hashed)
    repo_dir = naming.repository_dir(dep, repo_key)
    filled = {k: text.replace(REPOSITORY_SLOT, repo_dir) for k, text in texts.items()}
    if frontend is not None:
        filled[FRONTEND_CONFIG_KEY] = frontend[0]
    launch = json.loads(filled[LAUNCH_PLAN_KEY])
    return Keyed(repo_key, repo_dir, {**repo_files, **filled}, launch)


def _json(plan: dict[str, Any]) -> str:
    return json.dumps(plan, indent=2, sort_keys=True)
