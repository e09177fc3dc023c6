#!/usr/bin/env bash
# Makes sure the tools some tests drive are installed, from Debian's packages when missing:
#   chromium + chromium-driver  the console's browser tests (tests/e2e/test_console*.py)
#   prometheus (for promtool)   the alert rules and dashboard queries (tests/test_deploy_metrics.py)
# On a host where systemd runs, Debian's prometheus package also starts a Prometheus service;
# `systemctl disable --now prometheus` stops it (the tests need only promtool).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

packages=()
have chromium || packages+=(chromium)
have chromedriver || packages+=(chromium-driver)
have promtool || packages+=(prometheus)
if [ ${#packages[@]} -eq 0 ]; then
	exit 0
fi
if ! have apt-get; then
	echo "scripts/test-tools.sh: missing ${packages[*]} and there is no apt-get to install them;" >&2
	echo "install Chromium with a matching ChromeDriver (or set SOKOVAN_CHROMIUM / SOKOVAN_CHROMEDRIVER) and promtool" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if have sudo; then sudo="sudo"; else
		echo "scripts/test-tools.sh: installing ${packages[*]} needs root (or sudo)" >&2
		exit 1
	fi
fi
echo "installing ${packages[*]} (for the console's browser tests and promtool)"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null; then
	$sudo apt-get update >/dev/null
	$sudo apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null
fi
have chromium && have chromedriver && have promtool
