#!/usr/bin/env bash
# Mutation testing of the modules that decide things (see scripts/mutation.py --help). Not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PYTHON_DOWNLOADS=never RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
export RAY_AUTH_MODE=disabled RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false
exec uv run python scripts/mutation.py "$@"
