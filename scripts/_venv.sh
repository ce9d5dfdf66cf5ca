# Sourced by run.sh and test.sh: a virtualenv in .venv with the given requirements installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
req_file="$1"
stamp=".venv/.installed-$(basename "$req_file")"
# Reinstall only when a requirements file changed since the last install.
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ "$req_file" -nt "$stamp" ]; then
  # uv installs the same pinned requirements as pip in a fraction of the time (11–24 s against
  # 43 s for requirements-dev.txt on a fresh machine: it downloads, unpacks and compiles in
  # parallel), so it is fetched first, with pip, into the virtualenv. The bytecode is compiled at
  # install, as pip does: left to the first import, it is compiled again by every process where
  # PYTHONDONTWRITEBYTECODE is set (as on CI's machine), ≈ 1 CPU-s more for each uvicorn worker
  # or manage.py command a test starts. uv reads no pip.conf: a package index set there or in
  # PIP_INDEX_URL (a campus mirror, say) is handed to it. Where uv cannot be had, pip does the
  # whole install as before.
  if .venv/bin/python -m pip install --quiet --disable-pip-version-check uv==0.13.9 2>/dev/null; then
    pip_index="${PIP_INDEX_URL:-$(.venv/bin/python -m pip config get global.index-url 2>/dev/null || true)}"
    if [ -n "$pip_index" ] && [ -z "${UV_DEFAULT_INDEX:-}" ]; then
      export UV_DEFAULT_INDEX="$pip_index"
    fi
    .venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python -r "$req_file"
  else
    echo "uv could not be installed: installing the requirements with pip (slower)…" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req_file"
  fi
  touch "$stamp"
fi
