"""tritonllm: a Kubernetes operator that turns a TritonLLMDeployment into a Triton endpoint."""

__version__ = "0.1.0"
