#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, pinned below) against the
# project's MCP client: every client scenario, driven through scripts/mcp-conformance-client
# (the pool, the breaker, McpTool.run: testkit/mcp/conformance_client.py). Set-up included:
# a Node ≥ 22 (scripts/node.sh) and the pinned suite are fetched into .cache/ on the first run.
#
#   scripts/mcp-conformance.sh                 # the three legs below
#   scripts/mcp-conformance.sh 2026-07-28      # only the legs named
#   MCP_CONFORMANCE_PKG_VERSION=0.2.0-alpha.12 scripts/mcp-conformance.sh   # try another release
#
# Legs (as the mcp SDK's own CI runs them):
#   all         --suite all: every scenario at the suite's default wire for it; the only leg that
#               reaches the extension scenarios (auth/client-credentials-*, auth/dpop* …)
#   2025-11-25  --suite all --spec-version 2025-11-25: every scenario of that revision, over the
#               initialize handshake
#   2026-07-28  --suite all --spec-version 2026-07-28: every scenario of that revision, stateless
#               with per-request _meta
# Each leg reads scripts/mcp-conformance/expected-failures.<leg>.yml: only what is out of scope
# now, each entry with its reason. Exit status 1 when any leg has an unexpected failure or an
# expected failure that passes (a stale entry: remove it); the pass counts per leg and per
# requirement set are printed at the end. Results: test-artifacts/mcp-conformance/<leg>/.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

SUITE_VERSION="${MCP_CONFORMANCE_PKG_VERSION:-0.2.0-alpha.11}"
# The suite starts every scenario of a leg at once, one client process each. The clients take
# turns, MCP_CONFORMANCE_SLOTS at a time (conformance_client._slot_take), and a scenario's clock
# runs while its client waits: hence a timeout far above the suite's 30 s default.
TIMEOUT_MS="${MCP_CONFORMANCE_TIMEOUT_MS:-600000}"
export MCP_CONFORMANCE_SLOTS="${MCP_CONFORMANCE_SLOTS:-2}"
MCP_CONFORMANCE_SLOTS_DIR="$(mktemp -d)"
export MCP_CONFORMANCE_SLOTS_DIR
legs=("$@")
[ "${#legs[@]}" -gt 0 ] || legs=(all 2025-11-25 2026-07-28)

if [ ! -x .venv/bin/python ]; then  # a fresh clone: the virtualenv scripts/run.sh uses
  bash scripts/_venv.sh requirements.txt
fi
source scripts/node.sh
suite_dir="$root/.cache/conformance/$SUITE_VERSION"
if [ ! -x "$suite_dir/node_modules/.bin/conformance" ]; then
  echo "Installing @modelcontextprotocol/conformance@$SUITE_VERSION into .cache/conformance/…" >&2
  npm install --prefix "$suite_dir" --no-audit --no-fund --no-save --loglevel=error \
    "@modelcontextprotocol/conformance@$SUITE_VERSION" >&2
fi
conformance="$suite_dir/node_modules/.bin/conformance"
requirements="$suite_dir/node_modules/@modelcontextprotocol/conformance/requirements"
out="$root/test-artifacts/mcp-conformance"

# One warm client process (Django, the project and the SDK imported once) forks a child for each
# client the suite spawns (conformance_client.zygote_serve): the three legs take about 75 s on a
# shared 2-core machine. MCP_CONFORMANCE_WARM=0 starts every client cold instead (16 min there).
zygote_pid=""
cleanup() {
  [ -z "$zygote_pid" ] || kill "$zygote_pid" 2>/dev/null || true
  rm -rf "$MCP_CONFORMANCE_SLOTS_DIR"
}
trap cleanup EXIT
if [ "${MCP_CONFORMANCE_WARM:-1}" != 0 ]; then
  export MCP_CONFORMANCE_ZYGOTE="$MCP_CONFORMANCE_SLOTS_DIR/client.sock"
  .venv/bin/python -m testkit.mcp.conformance_client --serve "$MCP_CONFORMANCE_ZYGOTE" \
    2>"$MCP_CONFORMANCE_SLOTS_DIR/client.log" &
  zygote_pid=$!
  for _ in $(seq 1 600); do [ -S "$MCP_CONFORMANCE_ZYGOTE" ] && break; sleep 0.1; done
  if [ ! -S "$MCP_CONFORMANCE_ZYGOTE" ]; then
    cat "$MCP_CONFORMANCE_SLOTS_DIR/client.log" >&2
    echo "the warm conformance client did not start" >&2
    exit 1
  fi
fi

status=0
summary_args=()
started=$SECONDS
for leg in "${legs[@]}"; do
  case "$leg" in
    all) selection=(--suite all) ;;
    2025-11-25 | 2026-07-28) selection=(--suite all --spec-version "$leg") ;;
    *) echo "unknown leg: $leg (all, 2025-11-25, 2026-07-28)" >&2; exit 2 ;;
  esac
  rm -rf "${out:?}/$leg" && mkdir -p "$out/$leg"
  echo "== MCP conformance $SUITE_VERSION, leg $leg =="
  leg_started=$SECONDS
  # The suite writes its default results/ into the working directory: run it from the leg's own.
  rc=0
  (cd "$out/$leg" && "$conformance" client --command "$root/scripts/mcp-conformance-client" \
      "${selection[@]}" --timeout "$TIMEOUT_MS" \
      --expected-failures "$root/scripts/mcp-conformance/expected-failures.$leg.yml" \
      --output-dir "$out/$leg") >"$out/$leg.log" 2>&1 || rc=$?
  # The suite's summary (the per-check lines of every scenario are in the log).
  sed 's/\x1b\[[0-9;]*m//g' "$out/$leg.log" | sed -n '/^=== SUITE SUMMARY ===/,$p' | grep -v '^\s*$' || true
  if [ "$rc" -eq 0 ]; then
    echo "leg $leg: as expected ($((SECONDS - leg_started)) s)"
  else
    echo "leg $leg: UNEXPECTED results (exit $rc), see test-artifacts/mcp-conformance/$leg.log ($((SECONDS - leg_started)) s)"
    status=1
  fi
  summary_args+=("$leg=$out/$leg")
done

echo "== pass counts (suite $SUITE_VERSION, $((SECONDS - started)) s) =="
.venv/bin/python -m testkit.mcp.conformance_summary "$requirements" "${summary_args[@]}"
exit "$status"
