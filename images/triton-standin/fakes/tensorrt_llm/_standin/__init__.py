"""Internals of the SIMULATED LLM API (not part of TensorRT-LLM's surface): the checkpoint
reader, the paged KV cache, the in-flight batching scheduler and the ranks."""
