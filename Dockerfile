# The tritonllm operator image. It also carries the in-pod entry points (`tritonllm build`,
# `tritonllm launch`) as a stdlib-only zipapp, which an init container copies into Triton pods:
# the Triton TensorRT-LLM image runs it with its own python3, so nothing is installed into it.
#
#   docker build -t ghcr.io/tritonllm/tritonllm:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
 && PYTHONPATH=operator python -m tritonllm.runtime.pyz --out /tritonllm.pyz

FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin tritonllm
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY --from=build /tritonllm.pyz /usr/local/share/tritonllm/tritonllm.pyz
USER 65532
ENTRYPOINT ["tritonllm"]
CMD ["run"]
