"""Triton Python model `postprocessing`: generated token ids back to text.

Written for tritonllm (rendered into every engine-runtime model repository). TOKENS_BATCH is
[batch, beams, tokens] and SEQUENCE_LENGTH [batch, beams]; OUTPUT is one string per beam. In
streaming each response carries only its new tokens, which are decoded on their own.

Before TensorRT-LLM 0.14 the model set routed log probs and logits through this model: the config
then declares optional inputs X and outputs OUT_X, which are echoed when present.

Parameters (config.pbtxt): tokenizer_dir (required), skip_special_tokens (default true),
trust_remote_code (default false).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer


def _parameter(config: dict[str, Any], key: str) -> str:
    return str(config.get("parameters", {}).get(key, {}).get("string_value", "")).strip()


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    value = _parameter(config, key).lower()
    return default if not value else value in ("true", "1", "yes")


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        tokenizer_dir = _parameter(config, "tokenizer_dir")
        if not tokenizer_dir:
            raise ValueError("postprocessing: parameter tokenizer_dir is required")
        self.skip_special_tokens = _flag(config, "skip_special_tokens", True)
        self.tokenizer = AutoTokenizer.from_pretrained(
            tokenizer_dir, legacy=False, trust_remote_code=_flag(config, "trust_remote_code", False)
        )
        # Pass-through outputs (OUT_X <- X) declared by pre-0.14 configs.
        self.echoed = [
            out["name"] for out in config["output"] if out["name"].startswith("OUT_")
        ]

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                responses.append(
                    pb_utils.InferenceResponse(output_tensors=self._process(request))
                )
            except Exception as exc:  # reported to the client as this request's error
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"postprocessing: {exc}"))
                )
        return responses

    def _process(self, request: Any) -> list[Any]:
        tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
        lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
        texts = [
            [
                self.tokenizer.decode(
                    beam[: int(length)].tolist(), skip_special_tokens=self.skip_special_tokens
                ).encode("utf-8")
                for beam, length in zip(beams, beam_lengths, strict=True)
            ]
            for beams, beam_lengths in zip(tokens, lengths, strict=True)
        ]
        out = [pb_utils.Tensor("OUTPUT", np.array(texts, dtype=object))]
        for name in self.echoed:
            given = pb_utils.get_input_tensor_by_name(request, name[len("OUT_"):])
            if given is not None:
                out.append(pb_utils.Tensor(name, given.as_numpy()))
        return out
