"""Argo CD syncs the chart and TritonLLMDeployments from git, reads their health, and stays Synced.

Real: Argo CD's application controller and repo server (built from its Go module, running on the
host against the local API server), Redis, a git repository served as a file:// URL, `helm
template` by the repo server, the API server, the operator (`tritonllm run`, on the host).
Simulated: the chart's operator pod and every Job/serving pod run on kwok nodes (kwok reports
them Running/Succeeded/Failed; the failing build is a kwok pod labelled to fail), so the
reconciling operator is the host process, watching the Applications' namespace.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import ROOT
from tests.cluster.operator_harness import load_example, prepare_namespace, run_operator
from tests.gitops.make_health_testdata import EXAMPLE, FAIL_TEMPLATE
from tritonllm.cli.crd import ARGOCD_SNIPPET
from tritonllm_dev.argocd import NAMESPACE, ArgoCD, application
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.gitops]

#: Least time the test watches sync status while the operator works (builds, retries, rollouts).
WATCH_SECONDS = 100


@pytest.fixture(scope="module")
def argocd(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArgoCD]:
    snippet = yaml.safe_load((ROOT / ARGOCD_SNIPPET).read_text())
    with ArgoCD(cluster, tmp_path_factory.mktemp("argocd"), argocd_cm=snippet["data"]) as cd:
        yield cd


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@invalid", *args],
        check=True, capture_output=True,
    )


def make_repo(root: Path) -> Path:
    """A git repository a user might have: the chart, a model, a model whose build fails."""
    repo = root / "gitops.git"
    shutil.copytree(ROOT / "charts" / "tritonllm", repo / "charts" / "tritonllm")
    model = load_example(EXAMPLE, "unused")
    del model["metadata"]["namespace"]  # the Application's destination decides
    # The simulated build "runs" 25 s (kwok's delay), so Argo CD's refreshes see it Building.
    template = model["spec"].setdefault("podTemplate", {})
    template["annotations"] = {**template.get("annotations", {}),
                               "pod-complete.stage.kwok.x-k8s.io/delay": "25s"}
    # kwok's pods answer no request: the git change below rolls at once (a verified rollout's
    # smoke set runs on real pods: tests/cluster/test_real_rollout.py).
    model["spec"]["rollout"] = {"strategy": "Immediate"}
    (repo / "models").mkdir()
    (repo / "models" / f"{EXAMPLE}.yaml").write_text(yaml.safe_dump(model, sort_keys=False))
    broken = load_example(EXAMPLE, "unused")
    del broken["metadata"]["namespace"]
    broken["metadata"]["name"] = "build-fails"
    broken["spec"]["engine"] = {**broken["spec"]["engine"], "dtype": "bfloat16"}
    broken["spec"]["podTemplate"] = {**broken["spec"]["podTemplate"], **FAIL_TEMPLATE}
    (repo / "broken").mkdir()
    (repo / "broken" / "build-fails.yaml").write_text(yaml.safe_dump(broken, sort_keys=False))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def resource_health(app: dict[str, Any], kind: str) -> dict[str, Any]:
    for res in (app.get("status") or {}).get("resources") or []:
        if res.get("kind") == kind:
            return dict(res.get("health") or {})
    return {}


class Watch:
    """Sync and health of each Application over time, as Argo CD reports them."""

    def __init__(self, cd: ArgoCD, names: list[str]) -> None:
        self.cd = cd
        self.names = names
        self.start = time.monotonic()
        self.seen: dict[str, list[tuple[float, str, str, str]]] = {n: [] for n in names}
        self.apps: dict[str, dict[str, Any]] = {}

    def poll(self) -> None:
        items = self.cd.cluster.kubectl_json("get", "applications.argoproj.io", "-n", NAMESPACE)
        for app in items["items"]:
            name = app["metadata"]["name"]
            if name not in self.seen:
                continue
            self.apps[name] = app
            st = app.get("status") or {}
            sync = (st.get("sync") or {}).get("status", "")
            health = (st.get("health") or {}).get("status", "")
            message = resource_health(app, "TritonLLMDeployment").get("message", "")
            if sync == "Unknown":  # say why (a comparison error)
                message = "; ".join(c.get("message", "") for c in st.get("conditions") or [])
            entry = (round(time.monotonic() - self.start, 1), sync, health, message)
            if not self.seen[name] or self.seen[name][-1][1:] != entry[1:]:
                self.seen[name].append(entry)
                print(f"[argocd] {entry[0]:6.1f}s {name}: {sync} {health} {message[:90]}")

    def states(self, name: str) -> list[tuple[str, str]]:
        return [(s, h) for _, s, h, _ in self.seen[name]]

    def first(self, name: str, sync: str, health: str) -> float | None:
        for t, s, h, _ in self.seen[name]:
            if s == sync and h == health:
                return t
        return None

    def drift(self, changes: dict[str, float]) -> dict[str, list[tuple[float, str, str, str]]]:
        """Entries that left Synced after the first Synced, per Application, except between a
        change pushed to git (``changes``: Application -> time) and the next Synced."""
        out = {}
        for name, entries in self.seen.items():
            synced = [i for i, e in enumerate(entries) if e[1] == "Synced"]
            if not synced:
                continue
            bad = []
            expected_until = None
            for e in entries[synced[0]:]:
                if name in changes and e[0] >= changes[name] and expected_until is None:
                    expected_until = next(
                        (x[0] for x in entries if x[0] >= e[0] and x[1] == "Synced"), 1e9)
                if e[1] != "Synced" and not (expected_until and e[0] < expected_until):
                    bad.append(e)
            if bad:
                out[name] = bad
        return out


def test_argocd_syncs_the_chart_and_deployments_and_reads_their_health(
    cluster: LocalCluster, namespace: str, argocd: ArgoCD, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    url = f"file://{repo}"
    prepare_namespace(cluster, namespace)  # the model-store claim and the token Secret
    suffix = namespace[-6:]
    chart, model, broken = f"chart-{suffix}", f"model-{suffix}", f"broken-{suffix}"
    values = yaml.safe_dump({"replicaCount": 1, "settings": {"peering": "",
                                                              "namespaces": [namespace]}})
    watch = Watch(argocd, [chart, model, broken])
    try:
        with run_operator(cluster, namespace, tmp_path):
            cluster.apply([
                application(chart, url, "charts/tritonllm", namespace, helm_values=values),
                application(model, url, "models", namespace),
                application(broken, url, "broken", namespace),
            ])

            def goals() -> bool:
                watch.poll()
                return (
                    watch.first(chart, "Synced", "Healthy") is not None
                    and watch.first(model, "Synced", "Healthy") is not None
                    and watch.first(broken, "Synced", "Degraded") is not None
                    and time.monotonic() - watch.start > WATCH_SECONDS / 2
                )

            wait_for(goals, timeout=240, interval=0.5, what="Applications Healthy/Degraded")
            # a change in git (a serving setting): Argo CD syncs it, the operator rolls it out
            spec_file = repo / "models" / f"{EXAMPLE}.yaml"
            obj = yaml.safe_load(spec_file.read_text())
            obj["spec"]["serving"]["maxQueueDelayMicroseconds"] = 100
            spec_file.write_text(yaml.safe_dump(obj, sort_keys=False))
            git(repo, "commit", "-q", "-am", "queue delay 100us")
            changed = time.monotonic()
            changes = {model: round(changed - watch.start, 1)}
            cluster.kubectl("annotate", "applications.argoproj.io", model, "-n", NAMESPACE,
                            "argocd.argoproj.io/refresh=normal", "--overwrite")

            def rolled() -> bool:
                watch.poll()
                live = cluster.kubectl_json("get", "tllm", EXAMPLE, "-n", namespace)
                return (
                    live["spec"]["serving"].get("maxQueueDelayMicroseconds") == 100
                    and live["status"].get("observedGeneration") == live["metadata"]["generation"]
                    and (watch.apps[model]["status"].get("health") or {}).get("status")
                    == "Healthy"
                    and time.monotonic() - watch.start > WATCH_SECONDS
                )

            wait_for(rolled, timeout=180, interval=0.5, what="the git change synced and rolled")
            healthy_again = [t for t, s, h, _ in watch.seen[model]
                             if t >= changes[model] and (s, h) == ("Synced", "Healthy")]
            print(f"\n[measure] git commit to synced, rolled out and Healthy: "
                  f"{round(healthy_again[0] - changes[model], 1)} s")
    finally:
        watch.poll()
        for name in (chart, model, broken):
            cluster.kubectl("delete", "applications.argoproj.io", name, "-n", NAMESPACE,
                            "--wait=false", check=False)
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", "-l",
                        f"app.kubernetes.io/instance={chart}", check=False)

    for name in (chart, model, broken):
        print(f"[measure] {name}: " + " -> ".join(f"{s}/{h}@{t}s" for t, s, h, _ in
                                                  watch.seen[name]))
    # the model went through Progressing (with the operator's phase) to Healthy
    model_msgs = [m for _, _, h, m in watch.seen[model] if h == "Progressing"]
    assert model_msgs and any(
        p in m for m in model_msgs for p in ("Building", "WritingRepository", "RollingOut")
    ), watch.seen[model]
    assert watch.states(model)[-1] == ("Synced", "Healthy")
    # the failed build reads Degraded with the condition's reason and the log tail
    degraded = [m for _, _, h, m in watch.seen[broken] if h == "Degraded"]
    assert degraded and degraded[0].startswith("BuildFailed: ") and "out of GPU memory" in (
        degraded[0]), watch.seen[broken]
    assert watch.states(chart)[-1] == ("Synced", "Healthy")
    # no drift: once Synced, every Application stayed Synced while the operator worked
    assert not watch.drift(changes), watch.drift(changes)
    assert time.monotonic() - watch.start >= WATCH_SECONDS
