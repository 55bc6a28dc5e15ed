#!/usr/bin/env bash
# The test command: installs what it needs (venv, packages; the Kafka jars come from Maven Central
# on first use), lints, type-checks, then runs unit and integration tests against a real broker
# that the test session starts and stops itself.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
PY=.venv/bin/python

# Debian packages the tests use as they are: the run report is checked in a real headless
# Chromium (tests never download a browser of their own), the agents' shell tool runs in a
# bubblewrap sandbox, a cluster's nodes and workers run on test hosts made with iproute2's
# `ip netns`, and the read model's PostgreSQL store is tested against a real PostgreSQL server
# (Debian keeps its initdb and pg_ctl in /usr/lib/postgresql/<version>/bin, off the PATH).
# One apt-get update for whatever is missing.
packages=()
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
command -v bwrap >/dev/null 2>&1 || packages+=(bubblewrap)
command -v ip >/dev/null 2>&1 || packages+=(iproute2)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || packages+=(postgresql)
if [ ${#packages[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "== installing Debian's ${packages[*]} (for the report, sandbox, test-host and PostgreSQL tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  else
    echo "${packages[*]} missing and cannot be installed here (needs root and apt-get): without chromium the report test fails, without bubblewrap the sandbox tests do, without iproute2 the test-host tests are skipped, without postgresql the read model's PostgreSQL tests fail" >&2
  fi
fi

echo "== pip check (every extra installed together)"
"$PY" -m pip check

echo "== ruff"
"$PY" -m ruff check .
"$PY" -m ruff format --check .

if command -v gofmt >/dev/null 2>&1; then
  echo "== gofmt"
  unformatted=$(gofmt -l tests/conformance/go)
  if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
fi

echo "== mypy"
# mypy cannot follow setuptools' editable-install finder, so give it the installed layout:
# a tree of links rolltape/<package> -> ./<package>.
rm -rf .typecheck && mkdir -p .typecheck/rolltape
for pkg in schemas producers processors projections infra; do ln -s "../../$pkg" ".typecheck/rolltape/$pkg"; done
"$PY" -m mypy -p rolltape.schemas -p rolltape.producers -p rolltape.processors -p rolltape.projections -p rolltape.infra

echo "== pytest"
# Where Rust is installed the codec's native core must have been built (the suite holds it to
# the reference implementation); without Rust the suite runs the reference alone.
if command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; then
  export ROLLTAPE_REQUIRE_NATIVE=1
else
  echo "no cargo: testing the pure-Python codec only (the native core's tests are skipped)" >&2
fi
# Two test processes, each with a broker of its own: most integration tests wait on a broker,
# a worker or a timeout, not on the CPU. A module whose fixture is costly to build is kept in
# one process (`xdist_group`). `-n 0` after the command runs everything in this process.
"$PY" -m pytest -n 2 --dist loadgroup "$@"
