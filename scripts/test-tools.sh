#!/usr/bin/env bash
# Makes sure the tools some tests drive are installed, from Debian's packages when missing:
#   chromium + chromium-driver  the console's browser tests (tests/e2e/test_console*.py)
#   prometheus (for promtool)   the alert rules and dashboard queries (tests/test_deploy_metrics.py)
#   podman + runc               the container engine of the container backend and its tests
#   docker-registry             the local registry the default images are pushed to (tests/images)
#   busybox-static, python3     what `sokovan images build` puts in the default images
#   iproute2 + nftables         the partition tests' network namespaces and drop rules (tests/partition)
#   strace                      holds a kernel between its fork and its exec (tests/agent/test_kernel_wrapper.py)
# On a host where systemd runs, Debian's prometheus package also starts a Prometheus service;
# `systemctl disable --now prometheus` stops it (the tests need only promtool). scripts/services.py
# starts the engine and the registry themselves (make services), and installs them too when it runs
# as root, since `make test` runs it before this script.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

packages=()
have chromium || packages+=(chromium)
have chromedriver || packages+=(chromium-driver)
have promtool || packages+=(prometheus)
# The engine's packages come with their recommends (catatonit, slirp4netns, fuse-overlayfs, ...).
engine_packages=()
have podman || engine_packages+=(podman)
have runc || engine_packages+=(runc) # crun, podman's other runtime, refuses cgroup v1 hosts
have docker-registry || have registry || engine_packages+=(docker-registry)
have busybox || [ -x /usr/bin/busybox ] || packages+=(busybox-static)
[ -x /usr/bin/python3 ] || packages+=(python3)
have ip || packages+=(iproute2)
have nft || packages+=(nftables)
have strace || packages+=(strace)
if [ ${#packages[@]} -eq 0 ] && [ ${#engine_packages[@]} -eq 0 ]; then
	exit 0
fi
all=("${packages[@]}" "${engine_packages[@]}")
if ! have apt-get; then
	echo "scripts/test-tools.sh: missing ${all[*]} and there is no apt-get to install them;" >&2
	echo "install Chromium with a matching ChromeDriver (or set SOKOVAN_CHROMIUM / SOKOVAN_CHROMEDRIVER), promtool," >&2
	echo "and for the container tests podman, runc, docker-registry and a static busybox; and strace" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if have sudo; then sudo="sudo"; else
		echo "scripts/test-tools.sh: installing ${all[*]} needs root (or sudo)" >&2
		exit 1
	fi
fi
echo "installing ${all[*]} (for the console's browser tests, promtool, the container and partition tests)"
export DEBIAN_FRONTEND=noninteractive
install() {
	if [ ${#packages[@]} -gt 0 ]; then
		$sudo apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null || return 1
	fi
	if [ ${#engine_packages[@]} -gt 0 ]; then
		$sudo apt-get install -y "${engine_packages[@]}" >/dev/null || return 1
	fi
}
if ! install; then
	$sudo apt-get update >/dev/null
	install
fi
have chromium && have chromedriver && have promtool && have podman && have runc &&
	{ have docker-registry || have registry; } && { have busybox || [ -x /usr/bin/busybox ]; } &&
	have ip && have nft && have strace
