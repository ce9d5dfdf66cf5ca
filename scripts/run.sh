#!/usr/bin/env bash
# Runs Campus Agent on its embedded defaults: SQLite, demo catalog, ASGI on 127.0.0.1:8000.
source "$(dirname "$0")/_venv.sh" requirements.txt
# The demo sub-agents (/demo/subagents/…, the A2A library agent included) that load_demo registers
# are served by this server only when DEMO_ENABLED is on; off by default elsewhere (a deployment
# does not serve them).
export DEMO_ENABLED="${DEMO_ENABLED:-true}"
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py load_demo
# The demo catalog's routing cases (admin → 路由用例; manage.py routing_check replays them).
.venv/bin/python manage.py load_demo_cases
# --insecure: serve /static/ (admin CSS/JS, the chat page's assets) with DEBUG off, as a local
# run needs; production serves collectstatic's STATIC_ROOT from nginx (docs/operations.md).
exec .venv/bin/python manage.py runserver --insecure "${HOST:-127.0.0.1}:${PORT:-8000}"
