#!/usr/bin/env bash
# The network-namespace tests (tests/netns) cut members off with nftables drops between namespaces,
# as a Jepsen run does: they need iproute2 and nftables. As root with apt-get, installs what is
# missing; otherwise says so (those tests are then skipped, each with the reason).
set -euo pipefail

if command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing iproute2 and nftables for the network-namespace tests with apt-get" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 nftables >/dev/null
  exit 0
fi
echo "the network-namespace tests need root, iproute2 and nftables: they will be skipped" >&2
