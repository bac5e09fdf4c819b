#!/usr/bin/env bash
# The real browsers the label page is tested in (scripts/checks.d/60-labels.sh):
# Debian's Chromium, its WebDriver (chromedriver) and Selenium's Python
# bindings; Firefox ESR, driven through its own WebDriver BiDi endpoint with
# a WebSocket client (Debian packages no geckodriver). All from Debian, so
# that they match and nothing is fetched outside the package manager
# (Selenium Manager's downloads are never used: the test names
# /usr/bin/chromium and /usr/bin/chromedriver).
set -euo pipefail
need=()
for pkg in chromium chromium-driver python3-selenium firefox-esr python3-websocket; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
/usr/bin/python3 -c "import selenium; print('selenium', selenium.__version__)"
/usr/bin/chromium --version 2>/dev/null
firefox-esr --version 2>/dev/null
