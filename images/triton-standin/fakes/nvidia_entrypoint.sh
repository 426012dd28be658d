#!/bin/sh
# Entry point of the tritonllm CPU stand-in image, in the place NGC images keep theirs. Pods that
# set `command` (all of tritonllm's) never run it.
if [ -t 1 ]; then
  echo "== tritonllm CPU stand-in for the NGC Triton TensorRT-LLM image (Triton ${TRITON_SERVER_VERSION}, simulated TensorRT-LLM; no GPU)"
fi
if [ $# -eq 0 ]; then exec /bin/bash; fi
exec "$@"
