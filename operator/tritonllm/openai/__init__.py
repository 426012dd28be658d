"""The OpenAI frontend: `tritonllm openai`, the `openai` sidecar of every serving pod.

It serves OpenAI's `/v1/chat/completions`, `/v1/completions` and `/v1/models` on the pod's
port 9000 and sends each request to the tritonserver beside it over gRPC on loopback. What it
sends, to which model and tensors, comes from the FrontendConfig the operator renders
(tritonllm.triton.openai); the frontend itself knows no runtime.

Pure parts, table-tested: `protocol` (request validation, answers, errors), `chat` (the model's
chat template), `tokens` (its tokenizer), `stops` (stop strings over a stream). I/O: `triton`
(the gRPC client), `metrics`, `server` (the aiohttp app). docs/openai.md has the surface.
"""
