# syntax=docker/dockerfile:1
# The rowshift image: /usr/local/bin/rowshift-coordinator, rowshift-worker and
# rowshiftctl on a CUDA runtime base (CUDA runtime, cuBLAS and NCCL from
# NVIDIA's image), running as the non-root uid 10001. The manifests and the
# Helm chart set each container's command; the image sets no entrypoint.
#
#   docker build -t ghcr.io/rowshift/rowshift:0.1.0 .
#
# NOTE: this file has not been built: the repository's development machines
# and CI have no container engine. It is written to be correct, but its first
# real build is its first test (the runtime stage fails the build if a shared
# library of the binaries is missing).
#
# Both stages are Ubuntu 24.04 so that the libraries the binaries link against
# (libwebsockets 4.3, libcurl, jansson) are the same at run time. Ubuntu
# 22.04's libwebsockets (4.0) is older than the 4.1 the code is developed
# against, so the 22.04 CUDA images are not used.
ARG CUDA_VERSION=12.6.3
ARG BASE_OS=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${BASE_OS} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      gcc make pkg-config libcurl4-openssl-dev libjansson-dev libwebsockets-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Only the three programs. `-o deps` skips scripts/deps.sh, which also wants
# the test tools (chromium, clang, node, cmocka); the libraries it checks for
# are installed above. nvcc is on the PATH here, so CUDA sources (when the
# repository has them) are built as `make` builds them anywhere.
RUN make -o deps -j"$(nproc)" build/bin/rowshift-coordinator build/bin/rowshift-worker build/bin/rowshiftctl

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${BASE_OS}
ARG DEBIAN_FRONTEND=noninteractive
# Runtime libraries (Ubuntu 24.04 names); NCCL, cuBLAS and the CUDA runtime
# come with the base image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libcurl4t64 libjansson4 libwebsockets19t64 zlib1g ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 rowshift \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin rowshift
COPY --from=build /src/build/bin/rowshift-coordinator /src/build/bin/rowshift-worker /src/build/bin/rowshiftctl /usr/local/bin/
# Fail the build here, not in the cluster, if a shared library is missing
# (the GPU driver's own libcuda/libnvidia-* are mounted into GPU pods at run time).
RUN missing=$(ldd /usr/local/bin/rowshift-coordinator /usr/local/bin/rowshift-worker /usr/local/bin/rowshiftctl \
      | grep 'not found' | grep -v -e 'libcuda\.so' -e 'libnvidia-' || true); \
    if [ -n "$missing" ]; then echo "missing libraries:$missing" >&2; exit 1; fi
# The pods mount an emptyDir at /tmp and run with a read-only root filesystem.
WORKDIR /tmp
USER 10001
