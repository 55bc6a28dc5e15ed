#!/usr/bin/env bash
# The main job: install what is needed, start the broker if none runs, record and verify.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/rolltape demo "$@"
