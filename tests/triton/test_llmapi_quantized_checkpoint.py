"""What llmapi's quantization Job leaves is what the LLM API loads: the SIMULATED ModelOpt
hf_ptq.py of the stand-in image exports a checkpoint (hf_quant_config.json, config.json with
quantization_config), and the SIMULATED LLM-API package of the same image (tensorrt_llm, engineer
C's stand-in) loads it and answers as from the unquantized checkpoint (the stand-in quantizes
nothing). Both run in the triton tier's Python, as in the image."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.triton.stack import TritonInstall
from tests.triton.test_llmapi_standin import FAKES, checkpoint, run

__all__ = ["checkpoint"]  # fixture

HF_PTQ = FAKES / "hf_ptq.py"


def quantize(install: TritonInstall, source: Path, out: Path, *args: str) -> None:
    argv = [str(install.python), str(HF_PTQ), "--pyt_ckpt_path", str(source), "--export_path",
            str(out), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_llm_api_stand_in_loads_and_serves_the_exported_checkpoint(
        triton_install: TritonInstall, checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "quantized"
    quantize(triton_install, checkpoint, out, "--qformat", "int4_awq", "--awq_block_size", "128",
             "--kv_cache_qformat", "none", "--calib_size", "16", "--export_fmt", "hf")
    assert json.loads((out / "hf_quant_config.json").read_text())["quantization"][
        "quant_algo"] == "W4A16_AWQ"
    answers = run(triton_install, f"""
    outs = {{}}
    for name, path in (("plain", {str(checkpoint)!r}), ("quantized", {str(out)!r})):
        llm = LLM(model=path, tokenizer=path, max_batch_size=2)
        outs[name] = llm.generate("hello world", SamplingParams(max_tokens=4)).outputs[0].text
        llm.shutdown()
    result(**outs)
    """)
    assert answers["quantized"] == answers["plain"] != ""


def test_the_simulated_hf_ptq_refuses_what_the_real_one_refuses(
        triton_install: TritonInstall, checkpoint: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(triton_install.python), str(HF_PTQ), "--pyt_ckpt_path", str(checkpoint),
         "--kv_cache_qformat", "int8"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "argument --kv_cache_qformat: invalid choice: 'int8'" in proc.stderr
