#!/usr/bin/python3
"""SIMULATED ModelOpt examples/llm_ptq/hf_ptq.py (tritonllm CPU stand-in image): quantizes nothing.

Parses the real script's options (those of NVIDIA/Model-Optimizer 0.37.0, commit
df0882a63c39a001a1be384b680166a41259045c, the release TensorRT-LLM 1.1/1.2 pin; an unknown option
or an unknown choice exits 2 as argparse does) and writes what its unified Hugging Face export
leaves in --export_path, so that the LLM-API stand-in loads it as a pre-quantized checkpoint:

- every file of --pyt_ckpt_path copied unchanged (tokenizer, weights: the weights are NOT
  quantized, this is a stand-in);
- hf_quant_config.json: {"producer": {"name": "modelopt", "version": ...}, "quantization":
  {"quant_algo", "kv_cache_quant_algo", "group_size"?, "has_zero_point"?, "pre_quant_scale"?,
  "exclude_modules": ["lm_head"]}} as modelopt/torch/export/quant_utils.py names them;
- config.json with `quantization_config` (quant_method "modelopt", quant_algo, kv_cache_scheme,
  ignore, producer) as modelopt/torch/export/convert_hf_quant_config.py converts it.

Also installed into tests' fake image (tests/fake_trtllm.py): when FAKE_CALLS is set it records
its argv there, and FAKE_FAIL=hf_ptq.py / FAKE_ENOSPC=hf_ptq.py make it fail as the tests ask.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

MODELOPT_VERSION = "0.37.0"
# --qformat values of the 0.37.0 script (QUANT_CFG_CHOICES) -> hf_quant_config.json quant_algo.
QUANT_ALGOS = {
    "int8": "INT8",
    "int8_sq": "W8A8_SQ_PER_CHANNEL",
    "fp8": "FP8",
    "int4_awq": "W4A16_AWQ",
    "w4a8_awq": "W4A8_AWQ",
    "nvfp4": "NVFP4",
    "nvfp4_awq": "NVFP4_AWQ",
    "fp8_pb_wo": "FP8_PB_WO",
    "fp8_pc_pt": "FP8_PER_CHANNEL_PER_TOKEN",
    "w4a8_nvfp4_fp8": "W4A8_NVFP4_FP8",
    "w4a8_mxfp4_fp8": "W4A8_MXFP4_FP8",
    "nvfp4_mlp_only": "NVFP4",
}
KV_FORMATS = {"none": None, "fp8": "FP8", "nvfp4": "NVFP4", "nvfp4_affine": "NVFP4_AFFINE"}
# --dataset names the 0.37.0 script knows (modelopt/torch/utils/dataset_utils.py
# SUPPORTED_DATASET_CONFIG); any other raises NotImplementedError there.
DATASETS = ("open_code_reasoning", "open_math_reasoning", "llama-nemotron-post-training-dataset",
            "magpie", "cnn_dailymail", "pile", "pg19", "wikipedia", "c4")


def parser():
    p = argparse.ArgumentParser(prog="hf_ptq.py")
    p.add_argument("--pyt_ckpt_path", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--qformat", default="fp8")
    p.add_argument("--batch_size", type=int, default=0)
    p.add_argument("--calib_size", type=str, default="512")
    p.add_argument("--export_path", default="exported_model")
    p.add_argument("--dataset", type=str, default=None)
    p.add_argument("--inference_tensor_parallel", type=int, default=1)
    p.add_argument("--inference_pipeline_parallel", type=int, default=1)
    p.add_argument("--awq_block_size", default=0, type=int)
    p.add_argument("--sparsity_fmt", default="dense", choices=["dense", "sparsegpt"])
    p.add_argument("--auto_quantize_bits", default=None, type=float)
    p.add_argument("--kv_cache_qformat", default="fp8", choices=list(KV_FORMATS))
    p.add_argument("--export_fmt", default="hf", choices=["tensorrt_llm", "hf"])
    p.add_argument("--trust_remote_code", default=False, action="store_true")
    p.add_argument("--gpu_max_mem_percentage", type=float, default=0.8)
    p.add_argument("--use_seq_device_map", default=False, action="store_true")
    p.add_argument("--verbose", default=True, action=argparse.BooleanOptionalAction)
    p.add_argument("--low_memory_mode", default=False, action="store_true")
    p.add_argument("--attn_implementation", default=None, type=str)
    return p


def record_and_maybe_fail():
    calls = os.environ.get("FAKE_CALLS")
    if calls:
        with open(calls, "a") as f:
            f.write(json.dumps({"tool": "hf_ptq.py", "argv": sys.argv}) + "\n")
    if os.environ.get("FAKE_ENOSPC") == "hf_ptq.py":
        print("OSError: [Errno 28] No space left on device: 'model.safetensors'", flush=True)
        sys.exit(1)
    if os.environ.get("FAKE_FAIL") == "hf_ptq.py":
        print("hf_ptq.py: simulated crash", flush=True)
        sys.exit(3)


def quantization(args):
    algo = QUANT_ALGOS[args.qformat]
    q = {"quant_algo": algo, "kv_cache_quant_algo": KV_FORMATS[args.kv_cache_qformat]}
    if "AWQ" in algo:
        q.update(group_size=args.awq_block_size or 128, has_zero_point=False,
                 pre_quant_scale=True)
    elif algo == "NVFP4":
        q["group_size"] = 16
    q["exclude_modules"] = ["lm_head"]
    return {"producer": {"name": "modelopt", "version": MODELOPT_VERSION}, "quantization": q}


def hf_quantization_config(hf_quant):
    q = hf_quant["quantization"]
    out = {"ignore": q["exclude_modules"], "quant_algo": q["quant_algo"]}
    if q["quant_algo"] in ("FP8", "NVFP4"):
        bits = 8 if q["quant_algo"] == "FP8" else 4
        group = {"dynamic": False, "num_bits": bits, "type": "float"}
        if bits == 4:
            group["group_size"] = q["group_size"]
        out["config_groups"] = {"group_0": {"input_activations": group, "weights": group,
                                            "targets": ["Linear"]}}
    if q["kv_cache_quant_algo"] == "FP8":
        out["kv_cache_scheme"] = {"dynamic": False, "num_bits": 8, "type": "float"}
    elif q["kv_cache_quant_algo"]:
        out["kv_cache_scheme"] = q["kv_cache_quant_algo"]
    out["producer"] = hf_quant["producer"]
    out["quant_method"] = "modelopt"
    return out


def main():
    args = parser().parse_args()
    record_and_maybe_fail()
    if args.qformat not in QUANT_ALGOS:
        print(f"hf_ptq.py: unknown --qformat {args.qformat}", file=sys.stderr)
        return 1
    unknown = [d for d in (args.dataset or "").split(",") if d and d not in DATASETS]
    if unknown:
        print(f"NotImplementedError: dataset {unknown[0]} is not supported. Please use one of "
              f"the following: {list(DATASETS)}.", file=sys.stderr)
        return 1
    if args.export_fmt != "hf":
        print("Deprecated. --export_fmt forced to hf.", file=sys.stderr)
    source, out = Path(args.pyt_ckpt_path), Path(args.export_path)
    if not (source / "config.json").is_file():
        print(f"hf_ptq.py: {source}/config.json not found", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name.startswith("."):
            continue  # the store's step markers, Hub caches
        target = out / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(item, target)
    hf_quant = quantization(args)
    (out / "hf_quant_config.json").write_text(json.dumps(hf_quant, indent=4))
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = hf_quantization_config(hf_quant)
    (out / "config.json").write_text(json.dumps(config, indent=4))
    print(f"SIMULATED hf_ptq.py: exported {args.qformat} (kv {args.kv_cache_qformat}) to {out}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
