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
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req_file"
  touch "$stamp"
fi
