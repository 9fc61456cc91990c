#!/usr/bin/env bash
# Install the SMG gateway (PyPI `smg`, a Rust binary in a wheel) into its own virtual
# environment under benchmarks/scratch/peers/smg (ignored by git).
#
#   bash benchmarks/peers/setup_smg.sh        # exit 0: installed; else the reason on stderr
#
# The runner (python -m benchmarks.run) calls this and reports the peer as SKIPPED with
# the last line of stderr when it fails. Re-running is cheap: an existing install is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${TROUPE_PEERS_DIR:-$root/benchmarks/scratch/peers}/smg"
python="${PYTHON:-python3}"

if [ -x "$dest/venv/bin/smg" ] && "$dest/venv/bin/smg" --help >/dev/null 2>&1; then
    echo "$dest/venv/bin/smg"
    exit 0
fi
mkdir -p "$dest"
"$python" -m venv --clear "$dest/venv" >&2
"$dest/venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip >&2
if ! "$dest/venv/bin/pip" install --quiet --disable-pip-version-check smg >&2; then
    echo "pip could not install smg from PyPI for $("$python" --version 2>&1)" >&2
    exit 1
fi
if [ ! -x "$dest/venv/bin/smg" ]; then
    echo "the smg package installed no 'smg' command" >&2
    exit 1
fi
"$dest/venv/bin/smg" --help >/dev/null
echo "$dest/venv/bin/smg"
