# The tritonllm operator image. It also carries the in-pod entry points (`tritonllm build`,
# `tritonllm launch`) as a stdlib-only zipapp, which an init container copies into Triton pods:
# the Triton TensorRT-LLM image runs it with its own python3, so nothing is installed into it.
#
#   docker build -t ghcr.io/tritonllm/tritonllm:0.1.0 .
#
# BASE is any Debian-like image with python3 >= 3.11 and its venv module (python:3.11-slim for
# users; the local cluster passes a Debian bookworm base bootstrapped with mmdebstrap). With
# PIP_OFFLINE=1, pip reads only the wheels staged in images/wheels/ (no index): that is how the
# local build runs without network access to anything but the host's own caches.
# The build copies only the operator's package: the repository's dev tooling (devcluster/) is not
# part of its wheel and never enters the image.
# The package is installed with its `openai` extra: the serving pods' `openai` sidecar runs the
# OpenAI frontend (`tritonllm openai`) from this image.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG PIP_OFFLINE=
COPY images/wheels/ /wheels/
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN set -eu; \
    python3 -m venv /opt/build; \
    /opt/build/bin/pip wheel --no-cache-dir --disable-pip-version-check --wheel-dir /dist \
      ${PIP_OFFLINE:+--no-index --find-links /wheels} ".[openai]"; \
    python3 -m venv --without-pip /opt/venv; \
    /opt/build/bin/pip --python /opt/venv/bin/python install --no-cache-dir \
      --disable-pip-version-check --no-index /dist/*.whl; \
    PYTHONPATH=operator python3 -m tritonllm.runtime.pyz --out /tritonllm.pyz

FROM ${BASE}
# No package is installed: the operator needs only its venv (the multi-node MPI key pairs are
# made in Python, with the cryptography package), so this build needs no package index.
RUN set -eu; \
    groupadd --gid 65532 tritonllm; \
    useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin tritonllm
COPY --from=build /opt/venv /opt/venv
COPY --from=build /tritonllm.pyz /usr/local/share/tritonllm/tritonllm.pyz
# The Debian package list, a package-level SBOM (docs/hardening.md); the local build labels the base.
RUN mkdir -p /usr/share/tritonllm \
    && dpkg-query -W -f '${Package}=${Version} ${Architecture}\n' | sort > /usr/share/tritonllm/packages.txt
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
ENTRYPOINT ["tritonllm"]
CMD ["run"]
