#!/usr/bin/env bash
# Install what the dashboard's browser test needs on a Debian/Ubuntu host, only what is missing:
#   chromium (the headless browser) and chromium-driver (chromedriver, which Selenium drives).
# Nothing is downloaded outside apt: Selenium is pointed at these binaries and never fetches a driver.
# Idempotent; needs root for apt-get. Usage: deploy/browser-setup.sh
set -euo pipefail

need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "browser-setup: missing ${need[*]}; run this script as root (it calls apt-get install)" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null; then
    echo "browser-setup: missing ${need[*]} and this host has no apt-get; install Chromium and its chromedriver by hand" >&2
    exit 1
  fi
  echo "browser-setup: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "browser-setup: $(chromium --version 2>/dev/null | head -1), $(chromedriver --version 2>/dev/null | head -1) ready" >&2
