# itest.sh - what the integration scripts share; sourced, not run.
#   BUILD, bin   the build folder and its binaries
#   tmp          a scratch folder, removed at exit with every background job
#                killed (KEEP=1 keeps the folder); when the script failed (a
#                check failed, or it exited neither 0 nor 77), its files under
#                1 MiB but checkpoints (outputs, logs, pods' logs) are kept in
#                $BUILD/test-logs/NAME.files first
#   check DESCRIPTION COMMAND...   run COMMAND; print ok/FAILED; count failures in $fails
#   nap SECONDS                    sleep, in the shell itself
#   wait_for FILE PATTERN SECONDS  until FILE has a line matching PATTERN (bounded)
#   wait_pid PID SECONDS           PID's exit status, or 124 (and PID SIGKILLed) after SECONDS
#   free_port                      a free TCP port on loopback
#   moved_is_plan_diff FILE N      FILE (a coordinator's output) shows N reshards, each moving exactly its plan diff
#   finish_checks NAME             print "NAME: N failed" and return the verdict
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
fails=0
# at_exit: every background job killed, with what it started (a job run through
# `timeout` leads a process group: that group); the scratch folder removed, its
# small files kept first when the script failed (what its processes said, to tell
# why). run.sh's timeout sends TERM, then KILL 30 s later: the files are kept
# then too, unless the command the script waits on outlasts those 30 s.
at_exit() {
	local rc=$? keep dest p
	keep="$BUILD/test-logs/$(basename "$0" .sh).files"
	{ # (without bash's word on each job it killed)
		for p in $(jobs -p); do kill -9 -- "-$p" || kill -9 "$p"; done
		wait
	} 2>/dev/null
	rm -rf "$keep"
	if [ "$fails" != 0 ] || { [ "$rc" != 0 ] && [ "$rc" != 77 ]; }; then
		mkdir -p "$keep" && dest=$(cd "$keep" && pwd) && (cd "$tmp" &&
			find . -type f -size -1024k ! -name '*.safetensors' -print0 | xargs -0 -r cp --parents -t "$dest") &&
			echo "(its scratch files: $keep)" >&2
	fi
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap at_exit EXIT
trap 'exit 143' TERM
check() {
	local what=$1; shift
	if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
# nap SECONDS: sleep without starting a process (a read that times out on a FIFO no one writes to; sleep
# where there are no FIFOs): the polls nap 20 times a second, often in three scripts at once, beside workers
# on 2 cores. Exported, with its descriptor, for the polls run through bash -c.
if mkfifo "$tmp/.nap" && exec {nap_fd}<>"$tmp/.nap"; then
	nap() { read -r -t "$1" -u "$nap_fd" _ || :; }
	export nap_fd
else
	nap() { sleep "$1"; }
fi
export -f nap
wait_for() {
	for _ in $(seq 1 $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; nap 0.05; done
	return 1
}
wait_pid() {
	local _
	for _ in $(seq 1 $(($2 * 20))); do
		kill -0 "$1" 2>/dev/null || { wait "$1"; return; }
		nap 0.05
	done
	echo "wait_pid: $1 still ran after $2 s: killed" >&2
	kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	return 124
}
# same_bits A B: the checkpoints are equal bit for bit (deterministic training, the default); the diff goes to stdout when not
same_bits() {
	local out
	out=$("$bin/rowshiftctl" checkpoint diff "$1" "$2" 2>&1)
	[ "$(printf '%s\n' "$out" | tail -n 1)" = identical ] || { printf '%s\n' "$out"; return 1; }
}
# same_values A B: every weight and optimizer value equal (max_abs 0), bits of ZCH eviction metadata aside
same_values() {
	local out
	out=$("$bin/rowshiftctl" checkpoint diff "$1" "$2" 2>&1)
	printf '%s\n' "$out" | grep -Eq '^overall +0 +0$' || { printf '%s\n' "$out"; return 1; }
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
moved_is_plan_diff() { # moved_is_plan_diff OUT N [may-be-empty]: OUT's N reshards each moved exactly its plan diff (not nothing)
	python3 - "$1" "$2" "${3:-}" <<'PY'
import re, sys
pairs = re.findall(r'staged and verified: moved .*?\((\d+) B; the plan diff: (\d+) B\)', open(sys.argv[1]).read())
print('moved and plan diff, per reshard:', pairs)
empty_ok = sys.argv[3] == "may-be-empty"
sys.exit(0 if len(pairs) == int(sys.argv[2]) and all(a == b and (empty_ok or int(a) > 0) for a, b in pairs) else 1)
PY
}
with_precopy() { # with_precopy CONFIG true|false OUT: CONFIG with "cluster": {"precopy": ...}, written to OUT
	python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.setdefault("cluster", {})["precopy"] = sys.argv[2] == "true"
json.dump(c, open(sys.argv[3], "w"))' "$1" "$2" "$3"
}
# light_config CONFIG OUT [MS]: CONFIG with a quarter of its batch (256), 2048 held-out samples and steps of at
# least MS (default 25) ms, written to OUT. For scripts that train until they stop the job: the same tables, plans and cycle at about
# the demo's pace here, for about a third of the CPU (the workers idle out each step's rest), so that the control
# plane under test is not starved on a 2-core machine.
light_config() {
	python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))
c.setdefault("train", {}).update(global_batch=256, min_step_ms=int(sys.argv[3]))
c.setdefault("data", {})["eval_samples"] = 2048
json.dump(c, open(sys.argv[2], "w"))' "$1" "$2" "${3:-25}"
}
# quarter_config CONFIG OUT: the same, as fast as it trains (min_step_ms 0): for runs of a fixed number of steps
quarter_config() { light_config "$1" "$2" 0; }
finish_checks() {
	echo "$1: $fails failed"
	[ "$fails" = 0 ]
}
