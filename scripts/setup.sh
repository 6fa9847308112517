#!/usr/bin/env bash
# Create .venv and install cuetrain with every extra. torch==2.13.0 (a CPU build) goes in first so
# that pip never resolves an unpinned torch to a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e '.[all]'
