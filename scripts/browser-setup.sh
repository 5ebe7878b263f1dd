#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser tests (tests/test_dashboard_browser.py).
#   scripts/browser-setup.sh start    install Debian chromium + chromium-driver if missing (root; idempotent)
#   scripts/browser-setup.sh status   say what is installed
# Not root and missing: say so and exit 1; the browser tests then skip locally and fail under CI.
set -euo pipefail
have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }
case "${1:-status}" in
  start)
    if have; then echo "browser-setup: chromium and chromedriver present"; exit 0; fi
    if [ "$(id -u)" != 0 ]; then
      echo "browser-setup: chromium/chromedriver missing and not root: run 'apt-get install chromium chromium-driver' as root" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
    have || { echo "browser-setup: install finished but chromium/chromedriver still not on PATH" >&2; exit 1; }
    echo "browser-setup: installed $(chromium --version 2>/dev/null | head -1)"
    ;;
  status)
    if have; then echo "chromium: $(command -v chromium); chromedriver: $(command -v chromedriver)"; else echo "browser-setup: not installed"; exit 1; fi
    ;;
  *) echo "usage: $0 start|status" >&2; exit 2 ;;
esac
