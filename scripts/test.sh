#!/usr/bin/env bash
# Run the project's tests from a fresh clone: makes .venv, installs, lints, tests.
# Extra arguments go to pytest. pytest's exit 5 ("no tests ran") is a failure here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
cd "$ROOT"
echo "== ruff"; ruff check src tests benchmarks
echo "== mypy"; mypy
echo "== pytest, through suitefit run (the project tests itself with itself)"
set +e
suitefit run -- "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests (exit 5): treating as a failure" >&2
  exit 1
fi
exit "$rc"
