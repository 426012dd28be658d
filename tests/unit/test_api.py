"""The API models: defaults, every invalid-input case, rules, and the version table."""

from __future__ import annotations

import pytest
import yaml

from tests.cases import BASE, EXAMPLES, INVALID, Invalid, cr
from tritonllm.api.deployment import InvalidDeployment, gpu_architecture, parse_deployment
from tritonllm.api.spec import RULE_SITES, quantity_bytes
from tritonllm.api.versions import (
    NEWER_THAN_ENGINE_PATH_RE,
    NGC_TAG_AFTER_ENGINE_PATH_RE,
    NGC_TRTLLM,
    TrtllmVersion,
    default_runtime,
    has_engine_path,
    image_tag,
    version_for_image,
)


def test_minimal_cr_gets_every_default() -> None:
    dep = parse_deployment(BASE)
    s = dep.spec
    assert s.runtime == "engine"  # 24.09 has the engine path
    assert s.engine.parallelism.tensor == 1 and s.engine.parallelism.pipeline == 1
    assert s.engine.limits.maxBatchSize == 64
    assert s.serving.batching == "inflight_fused_batching"
    assert s.serving.kvCache.freeGpuMemFraction == 0.9
    assert s.storage.claimName == "tritonllm-model-store"
    assert s.model.revision == "main"
    assert dep.trtllm_version == TrtllmVersion("0.13.0")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_is_valid(path) -> None:
    dep = parse_deployment(yaml.safe_load(path.read_text()))
    assert dep.name == path.stem


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_cr_names_the_field(case: Invalid) -> None:
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(case.obj)
    fields = [e.field for e in info.value.errors]
    assert any(case.field in f for f in fields), fields
    if case.says:
        assert any(case.says in e.message for e in info.value.errors), info.value.errors


def test_at_least_fifteen_invalid_cases() -> None:
    assert len(INVALID) >= 15


def test_every_rule_is_exercised_by_an_invalid_case() -> None:
    """Each cross-field rule has a case in the shared table (and so a cluster test too)."""
    reported = set()
    for case in INVALID:
        try:
            parse_deployment(case.obj)
        except InvalidDeployment as exc:
            reported |= {e.field for e in exc.errors}
    for site, model in RULE_SITES.items():
        for rule in model.rules:
            if rule.transition:
                continue
            path = f"{site}.{rule.field}".rstrip(".")
            assert path in reported, f"no invalid case triggers the rule on {path}"


def test_all_problems_are_reported_at_once() -> None:
    obj = cr(
        {
            "serving": {"streaming": True, "batching": "V1"},
            "engine": {"limits": {"maxInputLen": 4096, "maxSeqLen": 100}},
        }
    )
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(obj)
    fields = {e.field for e in info.value.errors}
    assert {"spec.serving.streaming", "spec.engine.limits.maxSeqLen"} <= fields


def test_error_messages_do_not_leak_regexes() -> None:
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(cr({"model": {"source": "llama"}}))
    assert "^" not in str(info.value)
    assert "hf://<org>/<name>" in str(info.value)


def test_quantities_accept_integers_from_yaml() -> None:
    dep = parse_deployment(cr({"podTemplate": {"resources": {"cpu": 8}}}))
    assert dep.spec.podTemplate.resources.cpu == "8"
    assert quantity_bytes("8Gi") == 8 * 2**30
    assert quantity_bytes("500M") == 500e6


def test_wrong_kind_and_api_version_are_named() -> None:
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(cr(kind="Deployment", apiVersion="apps/v1"))
    assert {"kind", "apiVersion"} <= {e.field for e in info.value.errors}


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("nvcr.io/nvidia/tritonserver:24.04-trtllm-python-py3", "0.9.0"),
        ("nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3", "0.13.0"),
        ("nvcr.io/nvidia/tritonserver:25.05-trtllm-python-py3", "0.19.0"),
        ("nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3", "1.2.1"),
        ("registry:5000/mirror/tritonserver:24.09-trtllm-python-py3@sha256:" + "a" * 64, "0.13.0"),
        ("nvcr.io/nvidia/tritonserver:24.09-py3", None),
        ("nvcr.io/nvidia/tritonserver@sha256:" + "b" * 64, None),
    ],
)
def test_version_for_image(image: str, version: str | None) -> None:
    got = version_for_image(image)
    assert (str(got) if got else None) == version


def test_image_tag_ignores_registry_port() -> None:
    assert image_tag("registry:5000/triton") is None
    assert image_tag("registry:5000/triton:1.0") == "1.0"


def test_trtllm_version_override_wins() -> None:
    dep = parse_deployment(cr({"image": "registry.local/triton:custom", "trtllmVersion": "0.19.0"}))
    assert dep.trtllm_version == TrtllmVersion("0.19.0")


def test_version_ordering() -> None:
    assert TrtllmVersion("0.9.0") < TrtllmVersion("0.13.0") < TrtllmVersion("1.2.1")
    assert TrtllmVersion("0.17.0.post1").at_least("0.17")
    assert not TrtllmVersion("0.10.0").at_least("0.11")


@pytest.mark.parametrize(
    ("product", "arch"),
    [
        ("NVIDIA-H100-80GB-HBM3", "hopper"),
        ("NVIDIA-A100-SXM4-80GB", "ampere"),
        ("NVIDIA-L40S", "ada"),
        ("NVIDIA-B200", "blackwell"),
        ("Tesla-V100-SXM2-16GB", "volta"),
        ("Some-Future-GPU", None),
    ],
)
def test_gpu_architecture(product: str, arch: str | None) -> None:
    assert gpu_architecture(product) == arch


NGC = "nvcr.io/nvidia/tritonserver"


@pytest.mark.parametrize(
    ("spec", "runtime"),
    [
        ({"image": f"{NGC}:24.09-trtllm-python-py3"}, "engine"),  # what it always was
        ({"image": f"{NGC}:26.07-trtllm-python-py3"}, "engine"),  # the last with the engine path
        ({"image": f"{NGC}:26.08-trtllm-python-py3", "trtllmVersion": "1.3.0"}, "llmapi"),
        ({"image": "registry.local/triton:next", "trtllmVersion": "1.3.0"}, "llmapi"),
        ({"image": "registry.local/triton:next", "trtllmVersion": "1.2.1"}, "engine"),
        ({"image": f"{NGC}:26.08-trtllm-python-py3", "runtime": "engine",
          "trtllmVersion": "1.2.1"}, "engine"),  # an explicit choice the version allows
        ({"image": f"{NGC}:25.10-trtllm-python-py3", "runtime": "llmapi"}, "llmapi"),
    ],
)
def test_an_empty_runtime_resolves_by_the_images_version(spec: dict, runtime: str) -> None:
    obj = cr(spec)
    if "runtime" not in spec:
        obj["spec"].pop("runtime", None)
    dep = parse_deployment(obj)
    assert dep.spec.runtime == runtime


def test_an_upgrade_resolves_every_engine_deployment_of_today_to_the_engine_runtime() -> None:
    """Every image tag we know with the engine path, with runtime left out, resolves to engine:
    what the CRD's old default stored, so an operator upgrade changes no running deployment."""
    for release, version in NGC_TRTLLM.items():
        image = f"{NGC}:{release}-trtllm-python-py3"
        assert default_runtime(image, None) == "engine", release
        assert default_runtime("registry.local/t:x", version) == "engine", version


def test_the_cel_patterns_agree_with_the_python_version_test() -> None:
    """The admission rule (CEL regexes) and the operator (version comparison) refuse the same
    engine deployments."""
    import re

    versions = [f"{a}.{b}.{c}" for a in (0, 1, 2, 10) for b in (0, 2, 3, 13) for c in (0, 1, 2, 10)]
    versions += ["1.2.1.post1", "1.2.1.2510", "1.3", "1.2", "0.19.0", "1.10.0rc1", "2.0"]
    for v in versions:
        newer = re.search(NEWER_THAN_ENGINE_PATH_RE, v) is not None
        assert newer == (has_engine_path("x", v) is False), v
    for yy in range(24, 31):
        for mm in range(1, 13):
            image = f"{NGC}:{yy}.{mm:02d}-trtllm-python-py3"
            for ref in (image, image + "@sha256:" + "a" * 64):
                after = re.search(NGC_TAG_AFTER_ENGINE_PATH_RE, ref) is not None
                assert after == (has_engine_path(ref, None) is False), ref
    local = "127.0.0.1:5000/t:26.07-trtllm-python-py3"
    assert re.search(NGC_TAG_AFTER_ENGINE_PATH_RE, local) is None


@pytest.mark.parametrize(("runtime", "metric"), [("engine", "queueComputeRatio"),
                                                  ("llmapi", "backendWaitingRequests")])
def test_the_autoscaling_metric_defaults_by_runtime(runtime: str, metric: str) -> None:
    dep = parse_deployment(cr({"runtime": runtime, "autoscaling": {"maxReplicas": 2},
                               "image": f"{NGC}:25.10-trtllm-python-py3"}))
    assert dep.spec.autoscaling is not None and dep.spec.autoscaling.metric == metric
