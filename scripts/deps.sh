#!/bin/sh
# deps.sh - make sure the libraries and tools the build needs are here.
# Installs what is missing with apt-get when run as root; otherwise prints the
# command to run and fails. Called by `make` before anything is compiled.
set -eu

pkgs=""
need() { pkgs="$pkgs $1"; }

for mod in libcurl:libcurl4-openssl-dev jansson:libjansson-dev \
           libwebsockets:libwebsockets-dev cmocka:libcmocka-dev libcrypto:libssl-dev zlib:zlib1g-dev; do
	pc=${mod%%:*}; deb=${mod#*:}
	pkg-config --exists "$pc" 2>/dev/null || need "$deb"
done
command -v pkg-config >/dev/null 2>&1 || need pkg-config
# the dashboard test: Debian's chromium, driven by playwright-core from npm (scripts/tools.sh)
command -v chromium >/dev/null 2>&1 || need chromium
command -v node >/dev/null 2>&1 || need nodejs
command -v npm >/dev/null 2>&1 || need npm
# the Kubernetes API simulator makes its TLS certificates with openssl; tests talk to it with curl
command -v openssl >/dev/null 2>&1 || need openssl
command -v curl >/dev/null 2>&1 || need curl
command -v clang >/dev/null 2>&1 || need clang
# the CUDA simulator (tests/cudasim) is C++; the test fixtures are Python 3 (standard library only)
command -v g++ >/dev/null 2>&1 || need g++
command -v python3 >/dev/null 2>&1 || need python3
# libFuzzer and the sanitizer runtimes for clang (make fuzz).
if command -v clang >/dev/null 2>&1; then
	rt=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
	[ -f "$rt" ] || need libclang-rt-14-dev
fi

[ -z "$pkgs" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "deps: installing$pkgs"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
	exit 0
fi
echo "deps: missing packages; run as root:" >&2
echo "  apt-get install$pkgs" >&2
exit 1
