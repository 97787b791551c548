#!/usr/bin/env bash
# Creates .venv with shardgrid and its test tools installed, on a machine that may have nothing
# but a Python 3.11+ interpreter and Rust's cargo. Reinstalls only when pyproject.toml changed since
# the last run, and rebuilds the storage engine (native/engine, the extension shardgrid._engine)
# only when its sources changed since its last build.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
stamp="$venv/.installed"      # newer than pyproject.toml: the install is current
engine_stamp="$venv/.engine"  # newer than every source of the crate: the extension is current
crate=native/engine

# Whether the extension must be built again: never built, its file gone from src/shardgrid (an
# editable install builds it there), or a Cargo.toml, Cargo.lock or .rs file of the crate newer
# than the last build (an edit, a pull or a checkout of another branch).
engine_changed() {
  [ -f "$engine_stamp" ] || return 0
  compgen -G "src/shardgrid/_engine.*.so" >/dev/null || return 0
  [ -n "$(find "$crate" -path "$crate/target" -prune -o \( -name '*.rs' -o -name Cargo.toml -o -name Cargo.lock \) \
    -newer "$engine_stamp" -print -quit)" ]
}

need_cargo() {
  command -v cargo >/dev/null 2>&1 || {
    echo "shardgrid's storage engine is written in Rust: install cargo and rustc 1.85 or newer (https://rustup.rs), then run this again" >&2
    exit 1
  }
}

# The stamp takes the time before the build, so a source edited during the build is newer than it.
build_engine() {
  need_cargo
  touch "$engine_stamp.next"
  echo "building shardgrid's storage engine (native/engine) into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
  mv "$engine_stamp.next" "$engine_stamp"
}

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
  if engine_changed; then
    build_engine
  fi
  exit 0
fi
need_cargo

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

echo "installing shardgrid into $venv (this builds its storage engine with cargo)" >&2
touch "$engine_stamp.next"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test,fast,spark,docs]'
mv "$engine_stamp.next" "$engine_stamp"
touch "$stamp"
