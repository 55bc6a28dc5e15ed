#!/usr/bin/env bash
# Create .venv (if missing) and install rolltape with its dev tools and the torch extra (the
# training monitor and harness; torch comes from PyPI, about a minute), building the codec's
# native core (Rust, from schemas/native; its crates come from crates.io). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "rolltape needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# rustup installs cargo in ~/.cargo/bin, which a non-login shell may not have on its PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "warning: no cargo (Rust) here: rolltape installs without its native core and runs the" \
    "reference implementation alone (same bytes, slower); install Rust from https://rustup.rs" >&2
fi
stamp=.venv/.rolltape-installed
native_changed() {
  [ -n "$(find schemas/native -newer "$stamp" -not -path '*/target/*' -type f -print -quit)" ]
}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || native_changed; then
  .venv/bin/python -m pip install -q --upgrade pip
  # setuptools warns on every editable install that folders named like the package could
  # shadow it; ours are named schemas/, processors/... and install as rolltape.*, so it never
  # applies, and nothing else is filtered.
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q -e ".[dev,torch]"
  touch "$stamp"
fi
