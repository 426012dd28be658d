#!/usr/bin/python3
"""SIMULATED convert_checkpoint.py / quantize.py (tritonllm CPU stand-in image): converts nothing.

Installed at every converter path of the NGC image's examples tree (and as
quantization/quantize.py). Writes a TensorRT-LLM checkpoint directory with the shape the next
step reads: config.json (`architecture`, `dtype`, `mapping` with tp/pp fixed here, `quantization`)
and one rank<r>.safetensors marker per rank.
"""

import json
import sys
from pathlib import Path


def options(argv):
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = True
            i += 1
    return out


def main():
    tool = Path(sys.argv[0]).name
    o = options(sys.argv[1:])
    source = o.get("--model_dir")
    if not source or "--output_dir" not in o:
        print(f"{tool}: --model_dir and --output_dir are required", file=sys.stderr)
        return 2
    model = json.loads((Path(source) / "config.json").read_text())
    arch = (model.get("architectures") or ["Unknown"])[0]
    tp, pp = int(o.get("--tp_size", 1)), int(o.get("--pp_size", 1))
    out = Path(o["--output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "architecture": arch,
        "dtype": o.get("--dtype", "float16"),
        "mapping": {"world_size": tp * pp, "tp_size": tp, "pp_size": pp},
        "quantization": {"quant_algo": o.get("--qformat")},
        "simulated": f"tritonllm CPU stand-in {tool}: no weights were converted",
    }
    # A SIMULATED fault the model asks for travels on to the engine (the stand-in model reads it).
    if model.get("tritonllm_standin_fault"):
        config["tritonllm_standin_fault"] = model["tritonllm_standin_fault"]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for rank in range(tp * pp):
        (out / f"rank{rank}.safetensors").write_bytes(b"tritonllm stand-in: no weights\n")
    print(f"[TensorRT-LLM][stand-in] {tool}: {arch} tp={tp} pp={pp} -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
