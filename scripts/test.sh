#!/usr/bin/env bash
# Runs the whole test suite, set-up included. SQLite by default; PostgreSQL with
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/campus_agent scripts/test.sh
# Extra arguments go to pytest (e.g. scripts/test.sh -k stream -x).
source "$(dirname "$0")/_venv.sh" requirements-dev.txt
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's chromium for the browser tests…"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
  else
    echo "Browser tests need Debian's chromium: sudo apt-get install -y chromium" >&2
  fi
fi
exec .venv/bin/python -m pytest "$@"
