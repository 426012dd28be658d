"""Triton Python model `tensorrt_llm_bls`: the ensemble's pipeline, run with BLS calls.

Written for tritonllm (rendered when serving.bls is on). It takes the same inputs and returns the
same outputs as `ensemble`, and runs the very same steps: the renderer passes the ensemble's
wiring as the JSON parameter ``pipeline`` (a list of ``{model, inputs: {model tensor: pipeline
tensor}, outputs: {model tensor: pipeline tensor}}``), so the two cannot drift apart.

Steps before `tensorrt_llm` run once per request; `tensorrt_llm` may answer several times (when
this model and tensorrt_llm are decoupled and the client asked to ``stream``), and the steps after
it run on each answer, each becoming one response. Not decoupled, a request gets one response.

Two workarounds for the Python backend of Triton 2.51, whose stub frees Python objects without
holding the GIL, which Python 3.12's allocator does not survive (SIGSEGV, "Stub process ... is not
healthy"; fixed upstream in December 2024, "Hold GIL when deleting numpy array"):

- a response carries only the outputs the request asked for: the stub would prune the others in
  a decoupled ``send()`` with the GIL released;
- the response iterator of a streamed call to `tensorrt_llm` is kept for a while after its last
  answer (``RETIRE_SECONDS``): it holds every answer's tensors, and if the stub's cleanup thread
  dropped the last reference to it, that thread would free them. Kept here, the last reference
  goes away in ``execute`` (with the GIL), long after the cleanup thread is done with it.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

GENERATOR = "tensorrt_llm"
# How long a finished response iterator of `tensorrt_llm` is kept (see the module's docstring).
RETIRE_SECONDS = 10.0

Tensors = dict[str, np.ndarray]


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        steps = json.loads(config["parameters"]["pipeline"]["string_value"])
        split = next(i for i, step in enumerate(steps) if step["model"] == GENERATOR)
        self.before, self.generator, self.after = steps[:split], steps[split], steps[split + 1:]
        self.outputs = [out["name"] for out in config["output"]]
        self.retired: deque[tuple[float, Any]] = deque()  # (when it finished, iterator)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        self._release_retired(time.monotonic() - RETIRE_SECONDS)
        if not self.decoupled:
            return [self._respond_once(request) for request in requests]
        for request in requests:
            sender = request.get_response_sender()
            try:
                for tensors in self._run(request):
                    sender.send(self._response(tensors, request))
            except Exception as exc:  # reported to the client as this request's error
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _respond_once(self, request: Any) -> Any:
        try:
            results = list(self._run(request))
            if len(results) != 1:
                raise RuntimeError(f"{GENERATOR} answered {len(results)} times, expected once")
            return self._response(results[0], request)
        except Exception as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def finalize(self) -> None:
        self._release_retired(float("inf"))

    def _release_retired(self, before: float) -> None:
        while self.retired and self.retired[0][0] <= before:
            self.retired.popleft()

    def _response(self, tensors: Tensors, request: Any) -> Any:
        """Only the outputs the request asked for (all of them when it names none)."""
        wanted = set(request.requested_output_names()) or set(self.outputs)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor(n, tensors[n]) for n in self.outputs if n in wanted and n in tensors
        ])

    def _run(self, request: Any) -> Iterator[Tensors]:
        tensors: Tensors = {t.name(): t.as_numpy() for t in request.inputs()}
        for step in self.before:
            tensors.update(next(self._call(step, tensors, stream=False)))
        for answer in self._call(self.generator, tensors, stream=self.decoupled):
            produced = {**tensors, **answer}
            for step in self.after:
                produced.update(next(self._call(step, produced, stream=False)))
            yield produced

    def _call(self, step: dict[str, Any], tensors: Tensors, *, stream: bool) -> Iterator[Tensors]:
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
        try:
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
        finally:
            if stream:  # freed later by execute, not by the stub's cleanup thread
                self.retired.append((time.monotonic(), answers))
