#!/usr/bin/env bash
# Run the Open Responses compliance suite (17 tests, 7 WebSocket) against a running Troupe.
# Usage: benchmarks/open_responses_compliance.sh [extra suite args, e.g. --filter ID[,ID] | -v | --json]
# Env: BASE_URL (default http://127.0.0.1:8000/v1, what `make run` serves), MODEL (default sim), API_KEY (default test)
#      SUITE_DIR (default /tmp/openresponses), TOOLS_DIR (default /tmp/orc-tools),
#      SUITE_REPO (a git URL or path: the suite's repository), SUITE_COMMIT (the commit tested)
# Needs: git, node/npm (for installing bun + zod from the npm registry), and a suite checkout or
#        SUITE_REPO reachable (github.com, or a local mirror).
set -euo pipefail

BASE_URL="${BASE_URL:-http://127.0.0.1:8000/v1}"
MODEL="${MODEL:-sim}"
API_KEY="${API_KEY:-test}"
SUITE_DIR="${SUITE_DIR:-/tmp/openresponses}"
TOOLS_DIR="${TOOLS_DIR:-/tmp/orc-tools}"
SUITE_REPO="${SUITE_REPO:-https://github.com/openresponses/openresponses}"
# The commit the suite was run at (openresponses main as mirrored by a fork, 2026-07-15): 16/17,
# then 17/17 once a failed WebSocket continuation evicts what it continued.
SUITE_COMMIT="${SUITE_COMMIT:-92c12d9}"

if [ ! -f "$SUITE_DIR/bin/compliance-test.ts" ]; then
  git clone -q "$SUITE_REPO" "$SUITE_DIR"
  git -C "$SUITE_DIR" checkout -q "$SUITE_COMMIT"
fi

# Bun is required: the WebSocket tests pass an Authorization header to `new WebSocket(url, {headers})`,
# which only Bun's client supports. The npm package "bun" ships the binary.
BUN="${BUN:-}"
if [ -z "$BUN" ]; then
  if command -v bun >/dev/null 2>&1; then BUN="$(command -v bun)";
  elif [ -x /tmp/bunpkg/node_modules/.bin/bun ]; then BUN=/tmp/bunpkg/node_modules/.bin/bun;
  else
    mkdir -p "$TOOLS_DIR"
    [ -x "$TOOLS_DIR/node_modules/.bin/bun" ] || (cd "$TOOLS_DIR" && npm install --no-audit --no-fund bun@1.4.5 >/dev/null)
    BUN="$TOOLS_DIR/node_modules/.bin/bun"
  fi
fi

# The CLI only needs zod (bun.lock pins 3.25.76); avoid installing the whole Astro site.
if [ ! -d "$SUITE_DIR/node_modules/zod" ]; then
  mkdir -p "$TOOLS_DIR/deps"
  (cd "$TOOLS_DIR/deps" && npm install --no-audit --no-fund zod@3.25.76 >/dev/null)
  ln -sfn "$TOOLS_DIR/deps/node_modules" "$SUITE_DIR/node_modules"
fi

curl -sf "${BASE_URL%/v1}/health" >/dev/null || { echo "server not reachable at ${BASE_URL%/v1}/health" >&2; exit 2; }

cd "$SUITE_DIR"
exec "$BUN" run bin/compliance-test.ts --base-url "$BASE_URL" --api-key "$API_KEY" --model "$MODEL" "$@"
