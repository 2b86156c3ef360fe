#!/usr/bin/env bash
# Install the real MCP servers the integration tests talk to.
#
# - @modelcontextprotocol/server-everything (npm) into <repo>/.node (git-ignored), so the
#   tests can run `node .node/node_modules/@modelcontextprotocol/server-everything/dist/index.js`.
# - mcp-server-time (PyPI) into the Python environment running this script (the repo's .venv
#   unless PYTHON says otherwise).
#
# Idempotent: each server is installed only when it is missing. Exits non-zero with a clear
# message when something cannot be installed, so CI fails loudly instead of skipping tests.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NODE_PREFIX="$ROOT/.node"
EVERYTHING="$NODE_PREFIX/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
# The versions the tests were written against (tool names and texts are asserted).
EVERYTHING_VERSION="${EVERYTHING_VERSION:-2026.8.31}"
TIME_VERSION="${TIME_VERSION:-2026.10.19}"

fail() {
    echo "install-mcp-test-servers: $*" >&2
    exit 1
}

if [[ ! -f "$EVERYTHING" ]]; then
    command -v node >/dev/null 2>&1 || fail "node is not installed (Node >= 18 is needed for server-everything)"
    command -v npm >/dev/null 2>&1 || fail "npm is not installed (it comes with Node)"
    echo "install-mcp-test-servers: installing @modelcontextprotocol/server-everything into $NODE_PREFIX"
    mkdir -p "$NODE_PREFIX"
    npm install --prefix "$NODE_PREFIX" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
        || fail "npm install of @modelcontextprotocol/server-everything failed"
    [[ -f "$EVERYTHING" ]] || fail "server-everything installed but $EVERYTHING is missing"
fi

[[ -x "$PYTHON" ]] || fail "no Python at $PYTHON (run 'make install' first or set PYTHON)"
has_time_server() {
    "$PYTHON" -c "import importlib.util as u, sys; sys.exit(u.find_spec('mcp_server_time') is None)"
}
if ! has_time_server; then
    echo "install-mcp-test-servers: installing mcp-server-time with $PYTHON"
    "$PYTHON" -m pip install --quiet "mcp-server-time==$TIME_VERSION" \
        || fail "pip install of mcp-server-time failed"
    has_time_server || fail "mcp-server-time installed but cannot be found"
fi

echo "install-mcp-test-servers: server-everything and mcp-server-time are installed"
