"""The TritonLLMDeployment API: pydantic models (the CRD's single source), names and versions.

Import the submodules directly (`tritonllm.api.deployment`, `tritonllm.api.constants`, ...):
this package deliberately re-exports nothing, so that `tritonllm.api.constants` stays importable
inside Triton images that lack pydantic (the in-pod entry points use it).
"""
