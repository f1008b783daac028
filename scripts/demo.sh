#!/usr/bin/env bash
# The main job, from a fresh clone: make .venv, install suitefit, then on the bundled
# example suite (examples/heavy-suite): profile it, plan, run under the plan, and write
# the reports to out/. Every figure printed comes from these runs' measurements.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
SUITE="$ROOT/examples/heavy-suite"
OUT="$ROOT/out"
mkdir -p "$OUT"
HIST="$OUT/history.sqlite"
rm -f "$HIST" "$HIST-wal" "$HIST-shm"
cd "$SUITE"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "suitefit profile (serial): per-file time and peak memory, worker start-up, fixtures"
suitefit profile --history "$HIST" -- -q -p no:randomly
step "suitefit profile -n 2: the same suite under plain xdist (--dist load)"
# Plain xdist may split the order-dependent pair (tests/test_tokens.py needs
# tests/test_settings.py to run first in its process): a failure here is the point.
suitefit profile --history "$HIST" -n 2 -- -q -p no:randomly \
  || echo "(plain xdist failed: see above; the declared group in pyproject.toml is what suitefit run keeps together)"
step "suitefit doctor -- -n 2: the traps in a plain parallel set-up"
suitefit doctor --history "$HIST" -- -n 2 || true
step "suitefit plan: workers, groups, order, predictions and why"
suitefit plan --history "$HIST"
step "suitefit run: the suite under that plan"
suitefit run --history "$HIST" -- -q -p no:randomly
if suitefit report --help >/dev/null 2>&1; then
  step "suitefit report: $OUT/report.html and $OUT/summary.md"
  suitefit report --history "$HIST" -o "$OUT/report.html"
  suitefit report --history "$HIST" --markdown > "$OUT/summary.md"
  cat "$OUT/summary.md"
fi
step "suitefit history"
suitefit history --history "$HIST"
echo
echo "history: $HIST"
