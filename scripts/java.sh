#!/usr/bin/env bash
# Spark 4 runs on Java 17 or newer. On a machine without it, installs Debian's headless JRE (as
# root, with apt-get); otherwise says what to install. Quiet when a suitable java is on PATH.
set -euo pipefail

java_major() {
  # "17.0.15" -> 17; "1.8.0_402" -> 8
  local version
  version=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
  case "$version" in
    1.*) echo "${version#1.}" | cut -d. -f1 ;;
    *) echo "$version" | cut -d. -f1 ;;
  esac
}

if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing a Java runtime for Spark (openjdk-17-jre-headless) with apt-get" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  exit 0
fi
echo "Spark needs Java 17 or newer on PATH; install a JRE (Debian: openjdk-17-jre-headless)" >&2
exit 1
