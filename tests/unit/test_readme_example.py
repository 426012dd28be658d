"""The README's opening example is a valid deployment on the runtime it recommends."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tritonllm.api.deployment import parse_deployment
from tritonllm.render import render_all

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_opening_example_parses_and_renders_on_llmapi() -> None:
    text = README.read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    obj = yaml.safe_load(block.group(1))
    dep = parse_deployment(obj)
    assert dep.spec.runtime == "llmapi" and str(dep.trtllm_version) == "1.2.1"
    rendered = render_all(dep)
    llm = yaml.safe_load(rendered.repository["tensorrt_llm/1/model.yaml"])
    assert llm["tensor_parallel_size"] == 2 and llm["backend"] == "pytorch"
    assert rendered.build_job.body["metadata"]["name"].startswith("tritonllm-quantize-")
