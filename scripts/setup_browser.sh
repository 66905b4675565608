#!/usr/bin/env bash
# Install Debian's chromium and chromium-driver if they are missing (the browser tests drive them).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "The browser tests need Debian's chromium and chromium-driver:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y chromium chromium-driver" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
