#!/usr/bin/env bash
# The GPU readiness command (scripts/gpu_check.py), with the machine's own python3 where it has jax
# (the GPU image: CUDA jax, no uv), else through uv.lock.
#   scripts/gpu_check.sh --json "$OUT/gpu_check.json"     # on a lent GPU, within 8 minutes
#   scripts/gpu_check.sh --smoke --json /tmp/gpu.json      # the same on a CPU with tiny presets
set -euo pipefail
cd "$(dirname "$0")/.."
# find_spec, not import: importing jax only to ask costs seconds of CPU
if python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('jax') is None)" 2>/dev/null; then
    exec python3 scripts/gpu_check.py "$@"
fi
exec uv run python scripts/gpu_check.py "$@"
