# itest.sh - what the integration scripts share; sourced, not run.
#   BUILD, bin   the build folder and its binaries
#   tmp          a scratch folder, removed at exit with every background job
#                killed (KEEP=1 keeps the folder)
#   check DESCRIPTION COMMAND...   run COMMAND; print ok/FAILED; count failures in $fails
#   wait_for FILE PATTERN SECONDS  until FILE has a line matching PATTERN (bounded)
#   free_port                      a free TCP port on loopback
#   finish_checks NAME             print "NAME: N failed" and return the verdict
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
check() {
	local what=$1; shift
	if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
wait_for() {
	for _ in $(seq 1 $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	return 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
finish_checks() {
	echo "$1: $fails failed"
	[ "$fails" = 0 ]
}
