"""Triton Python model `tensorrt_llm_bls`: the ensemble's pipeline, run with BLS calls.

Written for tritonllm (rendered when serving.bls is on). It takes the same inputs and returns the
same outputs as `ensemble`, and runs the very same steps: the renderer passes the ensemble's
wiring as the JSON parameter ``pipeline`` (a list of ``{model, inputs: {model tensor: pipeline
tensor}, outputs: {model tensor: pipeline tensor}}``), so the two cannot drift apart.

Steps before `tensorrt_llm` run once per request; `tensorrt_llm` may answer several times (when
this model and tensorrt_llm are decoupled and the client asked to ``stream``), and the steps after
it run on each answer, each becoming one response. Not decoupled, a request gets one response.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

GENERATOR = "tensorrt_llm"

Tensors = dict[str, np.ndarray]


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        steps = json.loads(config["parameters"]["pipeline"]["string_value"])
        split = next(i for i, step in enumerate(steps) if step["model"] == GENERATOR)
        self.before, self.generator, self.after = steps[:split], steps[split], steps[split + 1:]
        self.outputs = [out["name"] for out in config["output"]]

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            return [self._respond_once(request) for request in requests]
        for request in requests:
            sender = request.get_response_sender()
            try:
                for tensors in self._run(request):
                    sender.send(self._response(tensors))
            except Exception as exc:  # reported to the client as this request's error
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _respond_once(self, request: Any) -> Any:
        try:
            results = list(self._run(request))
            if len(results) != 1:
                raise RuntimeError(f"{GENERATOR} answered {len(results)} times, expected once")
            return self._response(results[0])
        except Exception as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def _response(self, tensors: Tensors) -> Any:
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(n, tensors[n]) for n in self.outputs if n in tensors]
        )

    def _run(self, request: Any) -> Iterator[Tensors]:
        tensors: Tensors = {t.name(): t.as_numpy() for t in request.inputs()}
        for step in self.before:
            tensors.update(next(self._call(step, tensors, stream=False)))
        for answer in self._call(self.generator, tensors, stream=self.decoupled):
            produced = {**tensors, **answer}
            for step in self.after:
                produced.update(next(self._call(step, produced, stream=False)))
            yield produced

    @staticmethod
    def _call(step: dict[str, Any], tensors: Tensors, *, stream: bool) -> Iterator[Tensors]:
        """Run one step; yield its outputs, renamed to pipeline tensors, per answer."""
        inputs = [
            pb_utils.Tensor(model_name, tensors[pipeline_name])
            for model_name, pipeline_name in step["inputs"].items()
            if pipeline_name in tensors
        ]
        request = pb_utils.InferenceRequest(
            model_name=step["model"],
            inputs=inputs,
            requested_output_names=list(step["outputs"]),
        )
        answers = request.exec(decoupled=True) if stream else [request.exec()]
        for answer in answers:
            if answer.has_error():
                raise RuntimeError(f"{step['model']}: {answer.error().message()}")
            if not answer.output_tensors():  # the empty final answer of a decoupled model
                continue
            yield {
                step["outputs"][t.name()]: t.as_numpy()
                for t in answer.output_tensors()
                if t.name() in step["outputs"]
            }
