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
  libcli11-dev nlohmann-json3-dev libgtest-dev pkgconf pkgconf-bin libpkgconf3 >/dev/null
ls -1 *.deb | wc -l | xargs echo "fetch-deps: .deps/ holds these many packages:"
