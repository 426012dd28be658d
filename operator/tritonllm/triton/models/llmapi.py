"""Triton Python model `tensorrt_llm` for runtime llmapi: text in, text out, via tensorrt_llm.LLM.

Written for tritonllm. It loads ``model.yaml`` next to this file (or the file named by the
LLM_CONFIG_PATH environment variable): every key but ``triton_config`` is passed to
``tensorrt_llm.LLM()``, which downloads nothing (the model is on the store) and builds nothing
(the PyTorch backend loads the checkpoint). One request carries one prompt (max_batch_size 0);
the LLM batches requests in flight itself.

Inputs: text_input, optional streaming and sampling_param_* (temperature, top_k, top_p,
frequency_penalty, presence_penalty, max_tokens, stop, seed, exclude_input_from_output) and
return_finish_reason / return_stop_reason / return_cumulative_logprob. Outputs: text_output,
finish_reason, stop_reason, cumulative_logprob. Streaming needs the model to be decoupled; each
response then carries the new text only.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml
from tensorrt_llm import LLM, SamplingParams

# sampling_param_<name> inputs -> SamplingParams keyword.
SAMPLING = (
    "temperature", "top_k", "top_p", "frequency_penalty", "presence_penalty", "max_tokens",
    "seed", "exclude_input_from_output",
)


def _value(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    return value[0].item() if value.dtype != object else value[0]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        default = Path(args["model_repository"]) / args["model_version"] / "model.yaml"
        path = Path(os.environ.get("LLM_CONFIG_PATH", default))
        llm_args = yaml.safe_load(path.read_text())
        llm_args.pop("triton_config", None)
        self.llm = LLM(**llm_args)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            return [self._complete(request) for request in requests]
        for request in requests:
            threading.Thread(target=self._stream, args=(request,), daemon=True).start()
        return None

    def finalize(self) -> None:
        self.llm.shutdown()

    def _prompt(self, request: Any) -> tuple[str, SamplingParams]:
        prompt = _text(pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
                       .reshape(-1)[0])
        kwargs = {
            k: v for k in SAMPLING if (v := _value(request, f"sampling_param_{k}")) is not None
        }
        stop = pb_utils.get_input_tensor_by_name(request, "sampling_param_stop")
        if stop is not None:
            kwargs["stop"] = [_text(s) for s in stop.as_numpy().reshape(-1) if _text(s)]
        return prompt, SamplingParams(**kwargs)

    def _response(self, request: Any, output: Any, text: str) -> Any:
        tensors = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=object))]
        if _value(request, "return_finish_reason"):
            reason = str(output.finish_reason or "")
            tensors.append(pb_utils.Tensor("finish_reason", np.array([reason.encode()], object)))
        if _value(request, "return_stop_reason"):
            reason = str(output.stop_reason or "")
            tensors.append(pb_utils.Tensor("stop_reason", np.array([reason.encode()], object)))
        if _value(request, "return_cumulative_logprob"):
            logprob = output.cumulative_logprob or 0.0
            tensors.append(pb_utils.Tensor("cumulative_logprob", np.array([logprob], np.float32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _complete(self, request: Any) -> Any:
        try:
            if _value(request, "streaming"):
                raise ValueError("streaming needs the model to be deployed decoupled")
            prompt, params = self._prompt(request)
            output = self.llm.generate(prompt, params).outputs[0]
            return self._response(request, output, output.text)
        except Exception as exc:  # reported to the client as this request's error
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def _stream(self, request: Any) -> None:
        sender = request.get_response_sender()
        try:
            prompt, params = self._prompt(request)
            if _value(request, "streaming"):
                for partial in self.llm.generate_async(prompt, params, streaming=True):
                    output = partial.outputs[0]
                    sender.send(self._response(request, output, output.text_diff))
            else:
                output = self.llm.generate(prompt, params).outputs[0]
                sender.send(self._response(request, output, output.text))
        except Exception as exc:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
