#!/usr/bin/env bash
# Makes sure Debian's chromium and chromedriver are installed: the console's browser tests
# (tests/e2e/test_console.py) drive them. Installs them with apt when they are missing.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
	exit 0
fi
if ! have apt-get; then
	echo "scripts/browser.sh: chromium and chromedriver are missing and there is no apt-get;" >&2
	echo "install Chromium and a matching ChromeDriver, or set SOKOVAN_CHROMIUM / SOKOVAN_CHROMEDRIVER" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if have sudo; then sudo="sudo"; else
		echo "scripts/browser.sh: installing chromium needs root (or sudo)" >&2
		exit 1
	fi
fi
echo "installing chromium and chromium-driver (for the console's browser tests)"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null; then
	$sudo apt-get update >/dev/null
	$sudo apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null
fi
have chromium && have chromedriver
