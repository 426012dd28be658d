"""CPU stand-in for the `tensorrt_llm` model (TensorRT-LLM itself needs a GPU and its backend).

Test-only. It is deployed with the rendered tensorrt_llm config.pbtxt, only `backend` switched to
python, so it receives and returns exactly the tensors the real backend would. Its "model" is
deterministic: generated token i is prompt token (i mod prompt length), until request_output_len
tokens or end_id. It honours the parts of the contract the pipeline exercises: input_ids,
input_lengths, request_output_len, end_id, streaming, exclude_input_in_output (input, else the
config parameter); every other declared output is returned zero-filled with its declared type.
Decoupled, it sends one response per token as it is generated when asked to stream, else one
response; responses carry only the outputs the request asked for. TRITONLLM_STANDIN_TOKEN_DELAY
(seconds, default 0) slows each token down, so that tests can have requests in flight (a graceful
drain). The GPU stand-in (tensorrt_llm_gpu_standin.py) imports this module for its request
parsing and responses.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0].item()


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.outputs = {
            o["name"]: (
                pb_utils.triton_string_to_numpy(o["data_type"]), [int(d) for d in o["dims"]]
            )
            for o in config["output"]
        }
        exclude = config["parameters"]["exclude_input_in_output"]["string_value"]
        self.exclude_input = exclude.lower() == "true"
        self.token_delay = float(os.environ.get("TRITONLLM_STANDIN_TOKEN_DELAY") or 0)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            return [next(self._respond(request)) for request in requests]
        for request in requests:
            sender = request.get_response_sender()
            for response in self._respond(request):
                sender.send(response)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _parse(self, request: Any) -> tuple[np.ndarray, bool, bool]:
        """(prompt token ids, streaming, exclude_input_in_output) of one request."""
        streaming = bool(_scalar(request, "streaming"))
        if streaming and not self.decoupled:
            raise ValueError("Streaming is only supported in decoupled mode.")
        prompt = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()[0]
        prompt = prompt[: int(_scalar(request, "input_lengths"))]
        exclude = _scalar(request, "exclude_input_in_output")
        exclude = self.exclude_input if exclude is None else bool(exclude)
        return prompt, streaming, exclude

    def _respond(self, request: Any) -> Iterator[Any]:
        try:
            prompt, streaming, exclude = self._parse(request)
            if streaming:
                for token in self._generate(prompt, request):
                    yield self._response([token], request)
                return
            tokens = list(self._generate(prompt, request))
            yield self._response(tokens if exclude else [*prompt.tolist(), *tokens], request)
        except Exception as exc:
            yield pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def _generate(self, prompt: np.ndarray, request: Any) -> Iterator[int]:
        end_id = _scalar(request, "end_id")
        for i in range(int(_scalar(request, "request_output_len"))):
            token = int(prompt[i % len(prompt)])
            if token == end_id:
                return
            if self.token_delay:
                time.sleep(self.token_delay)
            yield token

    def _response(self, tokens: list[int], request: Any) -> Any:
        """Only the outputs the request asked for (all when it names none): the Python backend
        prunes the others of a decoupled response, and that pruning crashed its 3.12 stub."""
        wanted = set(request.requested_output_names()) or set(self.outputs)
        tensors = []
        for name, (dtype, dims) in self.outputs.items():
            if name not in wanted:
                continue
            if name == "output_ids":
                value = np.array([[tokens]], dtype)
            elif name == "sequence_length":
                value = np.array([[len(tokens)]], dtype)
            else:
                value = np.zeros([1, *(1 if d < 0 else d for d in dims)], dtype)
            tensors.append(pb_utils.Tensor(name, value))
        return pb_utils.InferenceResponse(output_tensors=tensors)
