#!/usr/bin/env bash
# Install Debian's Chromium and its driver for the browser test of asrkit serve
# (tests/serve/test_browser.py drives them with Selenium at /usr/bin/chromedriver).
# Idempotent and quiet: does nothing when both are there; installs them with apt-get when
# running as root where apt-get exists; otherwise (or when apt-get fails: no network, another
# distribution) says so and returns 0 -- the browser test then skips, giving the reason.
# tests/run.sh (the README's test command, also CI's) runs it before the suite; by hand: sudo bash tools/setup_browser.sh
if { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; } && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "[setup_browser] chromium/chromedriver missing and not root with apt-get: the browser test will skip; install them with: sudo apt-get install -y chromium chromium-driver" >&2
  exit 0
fi
echo "[setup_browser] installing chromium and chromium-driver with apt-get ..." >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; then
  apt-get update -qq >/dev/null 2>&1
  apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
    || echo "[setup_browser] warning: apt-get could not install chromium chromium-driver: the browser test will skip" >&2
fi
exit 0
