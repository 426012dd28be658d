"""Pure Triton knowledge: model-repository files (config.pbtxt, model.yaml, our Python models)
and launcher command lines, per TensorRT-LLM version. Imports only tritonllm.api and the stdlib.
"""
