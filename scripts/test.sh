#!/usr/bin/env bash
# Runs the whole test suite, set-up included. SQLite by default; PostgreSQL with
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/campus_agent scripts/test.sh
# Extra arguments go to pytest (e.g. scripts/test.sh -k stream -x).
source "$(dirname "$0")/_venv.sh" requirements-dev.txt
source scripts/_browser_deps.sh  # _venv.sh made the project root the working directory
# The knowledge base's vector tests run the real pgvector on the local PostgreSQL.
case "${DATABASE_URL:-}" in
  postgres*://*@127.0.0.1[:/]*|postgres*://*@localhost[:/]*) bash scripts/_pgvector.sh ;;
esac
# Tests of several workers need a Redis (TEST_REDIS_URL, default redis://127.0.0.1:6379/15): a
# throwaway one is started when none answers there (they fail, not skip, without one).
if [ -z "${TEST_REDIS_URL:-}" ] && ! (command -v redis-cli >/dev/null && redis-cli -p 6379 ping >/dev/null 2>&1); then
  if ! command -v redis-server >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's redis-server for the tests of several workers…"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null
  fi
  if command -v redis-server >/dev/null 2>&1; then
    redis-server --port 6379 --bind 127.0.0.1 --save "" --appendonly no --daemonize yes >/dev/null
    for _ in $(seq 1 50); do redis-cli -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  else
    echo "Tests of several workers need Redis: sudo apt-get install -y redis-server" >&2
  fi
fi
exec .venv/bin/python -m pytest "$@"
