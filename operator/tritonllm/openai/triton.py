"""The frontend's Triton client: one generation over gRPC on the pod's loopback.

Which model, which tensors and their types come from the FrontendConfig (`inputs`, `outputs`,
`batched`, `decoupled`). A decoupled model is called over Triton's gRPC stream (its `stream`
input decides whether it answers once per step or once), so the request can be cancelled as
soon as the client leaves or a stop string matched (cancelling the gRPC call cancels the
request in Triton; the model sees is_cancelled()). A non-decoupled model is asked once.

Triton's and gRPC's errors become OpenAI errors (`api_error`): UNAVAILABLE and a model that is
not ready 503 (retry), INVALID_ARGUMENT 400, anything else 500 with its message bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import _utils as grpc_utils
from tritonclient.utils import InferenceServerException

from tritonllm.triton.openai import FrontendConfig, TritonTensor

from .protocol import MAX_MESSAGE_BYTES, ApiError, unavailable

NUMPY = {"BOOL": np.bool_, "INT32": np.int32, "INT64": np.int64, "UINT64": np.uint64,
         "FP32": np.float32}
MAX_RESPONSE_TEXT = 1 << 20  # one response's text; Triton's answers are bounded too


@dataclasses.dataclass(frozen=True)
class Step:
    """One response of the model: the new text (or the whole text, not decoupled) and, when
    asked for, the log probabilities of its tokens."""

    text: str
    logprobs: tuple[float, ...] = ()
    # The tokens the model says it generated (num_output_tokens), when it says.
    tokens: int | None = None


def tensor(spec: TritonTensor, value: Any, batched: bool) -> grpcclient.InferInput:
    if spec.dtype == "BYTES":
        array = np.array([str(value).encode()], dtype=np.object_)
    else:
        array = np.array([value], dtype=NUMPY[spec.dtype])
    if batched:
        array = array.reshape(1, 1)
    out = grpcclient.InferInput(spec.name, list(array.shape), spec.dtype)
    out.set_data_from_numpy(array)
    return out


def build_inputs(config: FrontendConfig, values: Mapping[str, Any]) -> list[Any]:
    """The model's input tensors for `values` (frontend parameter names; the caller checked
    that each one the model lacks may be left out)."""
    return [tensor(config.inputs[name], value, config.batched)
            for name, value in values.items() if name in config.inputs]


def api_error(exc: Exception) -> ApiError:
    if isinstance(exc, grpc.aio.AioRpcError):
        status, message = str(exc.code()), exc.details() or ""
    elif isinstance(exc, InferenceServerException):
        status, message = str(exc.status() or ""), exc.message() or str(exc)
    else:
        status, message = "", str(exc)
    message = message[:MAX_MESSAGE_BYTES]
    if "UNAVAILABLE" in status or "not ready" in message or "unavailable" in message.lower():
        return unavailable(f"Triton is not available: {message}")
    if "INVALID_ARGUMENT" in status:
        return ApiError(400, f"Triton refused the request: {message}")
    return ApiError(500, f"Triton failed: {message}", type="server_error", code="server_error")


def _text(result: Any, output: str) -> str | None:
    array = result.as_numpy(output)
    if array is None:
        return None
    flat = array.reshape(-1)
    if flat.size == 0:
        return ""
    value = flat[0]
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return text[:MAX_RESPONSE_TEXT]


def _logprobs(result: Any, output: str | None) -> tuple[float, ...]:
    if output is None:
        return ()
    array = result.as_numpy(output)
    return () if array is None else tuple(float(v) for v in array.reshape(-1))


def _count(result: Any, output: str | None) -> int | None:
    array = None if output is None else result.as_numpy(output)
    if array is None or array.size == 0:
        return None
    return max(0, int(array.reshape(-1)[0]))


class TritonClient:
    def __init__(self, config: FrontendConfig) -> None:
        self.config = config
        self.client = grpcaio.InferenceServerClient(config.triton_grpc)

    async def close(self) -> None:
        await self.client.close()

    async def ready(self, timeout: float = 2.0) -> bool:
        try:
            return bool(await self.client.is_model_ready(self.config.triton_model,
                                                         client_timeout=timeout))
        except (InferenceServerException, grpc.RpcError, OSError):
            return False

    def _outputs(self, logprobs: bool) -> list[Any]:
        names = [self.config.outputs["text"]]
        if logprobs and "log_probs" in self.config.outputs:
            names.append(self.config.outputs["log_probs"])
        if "num_output_tokens" in self.config.outputs:
            names.append(self.config.outputs["num_output_tokens"])
        return [grpcclient.InferRequestedOutput(n) for n in names]

    async def generate(self, inputs: list[Any], request_id: str,
                       logprobs: bool) -> AsyncGenerator[Step, None]:
        """The model's responses, one Step each; closing the iterator early cancels the request
        in Triton."""
        if self.config.decoupled:
            async for step in self._stream(inputs, request_id, logprobs):
                yield step
            return
        try:
            result = await self.client.infer(self.config.triton_model, inputs,
                                             outputs=self._outputs(logprobs),
                                             request_id=request_id)
        except (InferenceServerException, grpc.RpcError) as exc:
            raise api_error(exc) from None
        yield self._step(result, logprobs)

    def _step(self, result: Any, logprobs: bool) -> Step:
        text = _text(result, self.config.outputs["text"])
        lp = self.config.outputs.get("log_probs") if logprobs else None
        return Step(text if text is not None else "", _logprobs(result, lp),
                    _count(result, self.config.outputs.get("num_output_tokens")))

    async def _stream(self, inputs: list[Any], request_id: str,
                      logprobs: bool) -> AsyncGenerator[Step, None]:
        request = grpc_utils._get_inference_request(
            model_name=self.config.triton_model, inputs=inputs, model_version="",
            request_id=request_id, outputs=self._outputs(logprobs), sequence_id=0,
            sequence_start=False, sequence_end=False, priority=0, timeout=None,
            parameters=None)
        # The final response then comes even when the model's last send carries no tensors.
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        done = asyncio.Event()

        async def requests() -> AsyncGenerator[Any, None]:
            yield request
            await done.wait()  # half-closing early could end the stream before its answers

        call = self.client._client_stub.ModelStreamInfer(requests())
        try:
            async for response in call:
                if response.error_message:
                    raise api_error(InferenceServerException(msg=response.error_message))
                result = grpcclient.InferResult(response.infer_response)
                params = response.infer_response.parameters
                if result.as_numpy(self.config.outputs["text"]) is not None:
                    yield self._step(result, logprobs)
                if "triton_final_response" in params and \
                        params["triton_final_response"].bool_param:
                    return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise api_error(exc) from None
        finally:
            done.set()
            call.cancel()  # no-op once finished; cancels the request in Triton otherwise
