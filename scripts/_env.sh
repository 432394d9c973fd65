# Sourced by scripts/*: make sure .venv exists and holds this checkout installed from
# pyproject.toml. Re-installs only when pyproject.toml changed, so it is a fast no-op otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    PY="$(command -v python3.11 || command -v python3)"
    "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "das needs Python >= 3.11")'
    echo "[das] creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.das-install-stamp"
WANT="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1) ${DAS_EXTRAS:-dev,report}"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "[das] installing das and its dependencies into .venv (once)" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[${DAS_EXTRAS:-dev,report}]" >&2
    echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
