#!/usr/bin/env bash
# Create .venv and install cuetrain with every extra. torch==2.13.0 (a CPU build) goes in first so
# that pip never resolves an unpinned torch to a multi-GB CUDA build.
# Then .venv-cuegui: CueGUI in its own environment, as studios install it (its PySide6==6.5.3 pin needs
# NumPy 1.x; .venv keeps NumPy 2 and a current PySide6). It gets cuetrain without dependencies, so the
# Training Runs plugin imports gui/ there and never torch, grpc aside (CueGUI's own pycue).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
# Older .venvs held CueGUI and its PySide6 6.5.3 here; a current PySide6-Essentials must not sit beside them.
if .venv/bin/python -m pip show -q opencue-cuegui >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -y -q opencue-cuegui NodeGraphQt PySide6 PySide6-Addons PySide6-Essentials shiboken6
fi
.venv/bin/python -m pip install -q -e '.[all]'
[ -x .venv-cuegui/bin/python ] || "$PY" -m venv .venv-cuegui
.venv-cuegui/bin/python -m pip install -q --upgrade pip
.venv-cuegui/bin/python -m pip install -q "opencue-cuegui==1.37.0" "pyqtgraph>=0.13" "numpy>=1.24,<2"
.venv-cuegui/bin/python -m pip install -q --no-deps -e .
