# Sourced by the other scripts: create .venv once and install suitefit (editable) into it.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SUITEFIT_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.suitefit-installed"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)-${SUITEFIT_EXTRAS:-test}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[${SUITEFIT_EXTRAS:-test}]"
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
