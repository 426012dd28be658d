"""In-pod entry points: `tritonllm build` (engine-build, download and model-repository Jobs) and
`tritonllm launch` (the serving containers).

This package runs inside the Triton TensorRT-LLM image, whose python3 (3.10 in 24.x images, 3.12
later) has the standard library, TensorRT-LLM and huggingface_hub, but not pydantic, kopf,
kubernetes or PyYAML. So: standard library only, Python 3.10 syntax and APIs, and of tritonllm only
`tritonllm.api.constants` and `tritonllm.api.topology` (both stdlib-only). The operator renders
everything these entry points need into JSON plans, the topology and the complete mpirun command
included; they execute plans, they decide nothing about the CR. `tritonllm.runtime.pyz` packs
exactly these modules into the zipapp the pods run.

Modules: `report` (exit codes, progress lines, the termination message), `files` (plans, JSON,
free space), `children` (child processes and their signals), `probes` (the image's TensorRT-LLM
version, the GPUs), `engine_files` (an engine directory: mapping, artifact.json, checksums, the one
engine check), `verified` (the marker that spares a re-hash), `build` (the build plan steps), `hub`
(Hugging Face downloads), `repository` (the model-repository step), `launch` (the serving process),
`ssh` (the multi-node bootstrap without `pods/exec`), `pyz` (builds the zipapp).
"""
