#!/usr/bin/env bash
# Create .venv (if missing) and install rolltape with its dev tools and every extra (torch, for
# the training monitor and harness, comes from PyPI), building the codec's native core (Rust,
# from schemas/native; its crates come from crates.io): about 3 minutes on a fresh machine, said
# on stderr when it happens. Idempotent, and silent when there is nothing to install.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "rolltape needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
stamp=.venv/.rolltape-installed
if [ ! -x .venv/bin/python ]; then
  # pip runs quietly, so say what the silent minutes are for, once.
  echo "== creating .venv and installing rolltape with its dev tools and every extra, torch among them (first run only," \
    "about 3 minutes; the Kafka jars download on the first broker start)" >&2
  "$PYTHON" -m venv .venv
elif [ ! -f "$stamp" ]; then
  echo "== installing rolltape into .venv with its dev tools and every extra (about 3 minutes)" >&2
fi
# rustup installs cargo in ~/.cargo/bin, which a non-login shell may not have on its PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "warning: no cargo (Rust) here: rolltape installs without its native core and runs the" \
    "reference implementation alone (same bytes, slower); install Rust from https://rustup.rs" >&2
fi
native_changed() {
  [ -n "$(find schemas/native -newer "$stamp" -not -path '*/target/*' -type f -print -quit)" ]
}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || native_changed; then
  if [ -f "$stamp" ]; then
    echo "== reinstalling rolltape into .venv: pyproject.toml or the native core changed" >&2
  fi
  started=$SECONDS
  .venv/bin/python -m pip install -q --upgrade pip
  # setuptools warns on every editable install that folders named like the package could
  # shadow it; ours are named schemas/, processors/... and install as rolltape.*, so it never
  # applies, and nothing else is filtered.
  # Every extra, in one resolution: they must install beside each other (the test command
  # runs `pip check` on the result).
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q -e \
    ".[dev,torch,openai,otlp,containers,env,tokenizer,atropos,report,bench,postgres,console,train]"
  touch "$stamp"
  echo "== rolltape installed in .venv ($((SECONDS - started)) s)" >&2
fi

# The tests run OpenTelemetry's current OpenAI instrumentation (genai-openai) in an environment of
# its own: it cannot share one with the deprecated openai-v2 the dev extra holds (see
# tests/support/genai-openai-requirements.txt).
genai_stamp=.venv-genai/.installed
if [ ! -f "$genai_stamp" ] || [ tests/support/genai-openai-requirements.txt -nt "$genai_stamp" ]; then
  echo "== installing the genai-openai instrumentation's test environment in .venv-genai" >&2
  "$PYTHON" -m venv .venv-genai
  .venv-genai/bin/python -m pip install -q -r tests/support/genai-openai-requirements.txt
  touch "$genai_stamp"
fi
