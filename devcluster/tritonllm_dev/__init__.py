"""The repository's dev tooling: a local Kubernetes control plane for tests and the demo.

There is no Docker engine and no way to download release binaries on the build machine, so the
control plane is built from Go modules through the module proxy (:mod:`tritonllm_dev.build`),
cached per version under ``~/.cache/tritonllm/``, and run as plain processes bound to 127.0.0.1
(:mod:`tritonllm_dev.local`): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok (simulated GPU nodes and pod lifecycles) and the LeaderWorkerSet controller.

This is tooling beside the operator, outside its wheel and image (``devcluster/pyproject.toml``,
entry point ``tritonllm-dev``): it may run subprocesses and talk to the API server, but nothing
in the operator imports it.
"""
