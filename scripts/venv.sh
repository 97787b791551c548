#!/usr/bin/env bash
# Creates .venv with shardgrid and its test tools installed, on a machine that may have nothing
# but a Python 3.11+ interpreter. Reinstalls only when pyproject.toml changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
stamp="$venv/.installed"

find_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
  exit 0
fi

python=$(find_python) || {
  echo "shardgrid needs Python 3.11 or newer on PATH (set PYTHON=/path/to/python3.11 to choose one)" >&2
  exit 1
}

if ! "$python" -m venv "$venv" 2>/dev/null; then
  # Debian's system Python ships venv separately.
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing python3-venv with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv"
    "$python" -m venv "$venv"
  else
    echo "'$python -m venv' failed; install your distribution's venv package (python3-venv)" >&2
    exit 1
  fi
fi

echo "installing shardgrid into $venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test,fast,spark,docs]'
touch "$stamp"
