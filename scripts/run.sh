#!/usr/bin/env bash
# Runs Campus Agent on its embedded defaults: SQLite, demo catalog, ASGI on 127.0.0.1:8000.
HOST="${HOST:-127.0.0.1}"
# PORT from the environment, else from the project's .env (where the settings read it too: the
# demo sub-agents' address is built from it), else 8000.
if [ -z "${PORT:-}" ] && [ -f "$(dirname "$0")/../.env" ]; then
  PORT="$(sed -n -E 's/^[[:space:]]*(export[[:space:]]+)?PORT[[:space:]]*=[[:space:]]*["'"'"']?([0-9]+)["'"'"']?[[:space:]]*(#.*)?$/\2/p' \
    "$(dirname "$0")/../.env" | tail -n 1)"
fi
PORT="${PORT:-8000}"
export PORT
# Fail before any set-up when the port is taken: the server would log "Address already in use"
# and keep running, and a browser on that port would reach someone else's server.
if ! python3 - "$HOST" "$PORT" <<'PY'
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a TIME_WAIT port is free
try:
    s.bind((host, port))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
then
  echo "scripts/run.sh: port $PORT on $HOST is already in use (another server is running there)." >&2
  echo "Stop that server, or pick another port: PORT=8001 scripts/run.sh" >&2
  exit 1
fi
source "$(dirname "$0")/_venv.sh" requirements.txt
# The demo sub-agents (/demo/subagents/…, the A2A library agent included) that load_demo registers
# are served by this server only when DEMO_ENABLED is on; off by default elsewhere (a deployment
# does not serve them).
export DEMO_ENABLED="${DEMO_ENABLED:-true}"
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py load_demo
# The demo catalog's routing cases (admin → 路由用例; manage.py routing_check replays them).
.venv/bin/python manage.py load_demo_cases
# The demo's knowledge base (a synthetic student handbook), indexed: asked 「转专业需要满足什么条件？」
# with no model, keyword routing answers from it with its source (docs/demo.md).
.venv/bin/python manage.py load_demo_handbook
# --insecure: serve /static/ (admin CSS/JS, the chat page's assets) with DEBUG off, as a local
# run needs; production serves collectstatic's STATIC_ROOT from nginx (docs/operations.md).
exec .venv/bin/python manage.py runserver --insecure "$HOST:$PORT"
