# syntax=docker/dockerfile:1
#
# One image for every plnt service: `plnt serve <service>` (watcher, puller, installer,
# smoke, promoter, router, runner, local-backend). The installer's Kubernetes backend drives
# the `helm` CLI, so the image carries a pinned, checksum-verified helm and the plnt-runner
# chart it installs (/opt/plnt/charts/plnt-runner).
#
#   docker build -t plnt:dev .
#   docker run --rm plnt:dev serve router
#
# Helm pin: v3.21.0, checksums as published with the release
# (https://github.com/helm/helm/releases/tag/v3.21.0, and
# https://get.helm.sh/helm-v3.21.0-linux-<arch>.tar.gz.sha256sum). To move the pin, change
# HELM_VERSION and both HELM_SHA256_* together, taking the values from those .sha256sum files:
#   docker build --build-arg HELM_VERSION=vX.Y.Z \
#     --build-arg HELM_SHA256_AMD64=<sha256> --build-arg HELM_SHA256_ARM64=<sha256> .

ARG PYTHON_IMAGE=python:3.11-slim

# ---- helm: download and verify ----------------------------------------------------------
FROM ${PYTHON_IMAGE} AS helm
ARG HELM_VERSION=v3.21.0
ARG HELM_SHA256_AMD64=0093eb572e3d2380f094df162ddb525e219249de88957afe24cfbb19632acd36
ARG HELM_SHA256_ARM64=8de5a0c9a47431e59fd560e91e0779c8cf9316c383da7efb84128a4c339ecb2d
ARG TARGETARCH
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
RUN set -eux; \
    arch="${TARGETARCH:-$(dpkg --print-architecture)}"; \
    case "${arch}" in \
      amd64) sha256="${HELM_SHA256_AMD64}" ;; \
      arm64) sha256="${HELM_SHA256_ARM64}" ;; \
      *) echo "no pinned helm checksum for architecture ${arch}" >&2; exit 1 ;; \
    esac; \
    curl -fsSL -o /tmp/helm.tar.gz "https://get.helm.sh/helm-${HELM_VERSION}-linux-${arch}.tar.gz"; \
    echo "${sha256}  /tmp/helm.tar.gz" | sha256sum -c -; \
    tar -xzf /tmp/helm.tar.gz -C /tmp "linux-${arch}/helm"; \
    install -m 0755 "/tmp/linux-${arch}/helm" /usr/local/bin/helm; \
    rm -rf /tmp/helm.tar.gz "/tmp/linux-${arch}"; \
    helm version --short

# ---- build: install the project into a virtualenv ---------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/plnt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
RUN /opt/plnt/bin/pip install . \
    && /opt/plnt/bin/plnt --help > /dev/null

# ---- runtime -----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="plnt" \
      org.opencontainers.image.description="plnt services: plnt serve <service>" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 plnt \
    && useradd --system --uid 10001 --gid plnt --home-dir /home/plnt --create-home \
       --shell /usr/sbin/nologin plnt \
    && install -d -o plnt -g plnt /var/lib/plnt /var/lib/plnt/local-backend
COPY --from=helm /usr/local/bin/helm /usr/local/bin/helm
COPY --from=build /opt/plnt /opt/plnt
COPY charts/plnt-runner /opt/plnt/charts/plnt-runner
ENV PATH=/opt/plnt/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/plnt
WORKDIR /home/plnt
USER 10001:10001
# The router's port; runners started by the local-backend pick free ports.
EXPOSE 8080
ENTRYPOINT ["plnt"]
CMD ["serve", "router"]
