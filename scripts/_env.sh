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
EXTRAS="${DAS_EXTRAS:-dev,report,dask,mbi}"  # dask: tests/test_dask.py runs a local cluster; mbi: the mst/aim tests
STAMP="$VENV/.das-installed-${EXTRAS//,/-}"
WANT="$(sha256sum < "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "[das] installing das and its dependencies into .venv (once)" >&2
    LOG="$VENV/install.log"
    if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip \
           && "$VENV/bin/python" -m pip install --disable-pip-version-check -e "$ROOT[$EXTRAS]"; } \
         > "$LOG" 2>&1; then
        tail -n 40 "$LOG" >&2
        echo "[das] installing into .venv failed; the whole log is $LOG" >&2
        exit 1
    fi
    echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
