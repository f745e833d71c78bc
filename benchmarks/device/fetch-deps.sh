#!/usr/bin/env bash
# Downloads (does not install) the Debian packages deltacast builds against
# into .deps/, for a GPU machine that has CUDA, CMake and PyTorch but no
# package manager access: run.sh unpacks them into a private prefix there.
# Run on a Debian 12 machine with network access.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps
cd .deps
apt-get download libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libzstd-dev libzstd1 libxxhash-dev libxxhash0 \
  libcli11-dev nlohmann-json3-dev libgtest-dev pkgconf pkgconf-bin libpkgconf3 libssl-dev libssl3 \
  libipsec-mb-dev libipsec-mb1 >/dev/null
ls -1 *.deb | wc -l | xargs echo "fetch-deps: .deps/ holds these many packages:"
# checkpoint-engine 0.4.2 and what it imports that the GPU image lacks, as wheels for its Python
# (3.12): compat_bench.py runs the same script on it beside deltacast.
mkdir -p pypi
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d pypi checkpoint-engine==0.4.2 pyzmq==27.1.0 loguru==0.7.3 pydantic==2.12.4 \
  pydantic-core==2.41.5 annotated-types==0.7.0 typing-inspection==0.4.2 fastapi==0.121.3 starlette==0.50.0 uvicorn==0.38.0
ls -1 pypi/*.whl | wc -l | xargs echo "fetch-deps: .deps/pypi/ holds these many wheels:"

