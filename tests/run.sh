#!/bin/bash
# run.sh - the test runner behind `make test`.
#
#   run.sh KIND PROGRAM...   run each program with a timeout and record the result
#   run.sh --summary         print "N passed, N failed, N skipped" and fail if any failed
#
# KIND is static, unit, gpu, cudasim, fuzz or integration. A program exiting 0 passed, 77
# skipped (it prints why), anything else failed. Results (passed and failed ones
# with the program's wall and CPU seconds) accumulate in $BUILD/test-results
# until the summary, which prints the failed and skipped ones;
# each program's output goes to $BUILD/test-logs/KIND-NAME.log, and to the
# terminal as it runs (or whole once it ends, for programs run side by side).
#   RS_TEST_TIMEOUT  seconds per program (default 300)
#   FUZZ_SECONDS     fuzz: seconds of exploration per target after its corpus
#   RS_UNIT_JOBS     unit: test programs run at once (default 2)
#   RS_FUZZ_JOBS     fuzz: targets run at once (default 2)
#   RS_CUDASIM_JOBS  cudasim: programs run at once under the CUDA simulator (default 2)
#   RS_TEST_JOBS     integration: scripts run at once (default 3; the scripts that
#                    start the API simulator always run one after another)
#   RS_REQUIRE_GPU=1 gpu: a skip (no device) counts as a failure
set -u
BUILD=${BUILD:-build}
export BUILD # the programs' too
results="$BUILD/test-results"
logs="$BUILD/test-logs"
mkdir -p "$logs"

if [ "${1:-}" = "--summary" ]; then
	[ -f "$results" ] || { echo "no tests were run"; exit 1; }
	p=$(grep -c '^PASS ' "$results"); f=$(grep -c '^FAIL ' "$results"); s=$(grep -c '^SKIP ' "$results")
	echo "----------------------------------------------------------------"
	grep -E '^(FAIL|SKIP) ' "$results" | sed 's/^/  /'
	echo "tests: $p passed, $f failed, $s skipped"
	[ "$f" = 0 ]
	exit
fi

kind=$1; shift
[ $# -gt 0 ] || exit 0
. "$(dirname "$0")/lib/direct_python.sh"
direct_python3 "$BUILD/pybin"
timeout_s=${RS_TEST_TIMEOUT:-300}

# children_cpu: $cpu, the CPU ticks this shell's reaped children have used (user
# and system, theirs and those of the children they reaped): at least what a
# program used, less what it left running or killed without waiting for
children_cpu() {
	local st
	read -r -a st <"/proc/$BASHPID/stat" # one word per field: this shell's name has no space
	cpu=$((st[15] + st[16]))
}
hz=$(getconf CLK_TCK)

# run_timed GRACE CMD...: CMD under the timeout (KILL GRACE s after TERM), its
# output to $log and the terminal (whole, once it ends, when side by side); $rc
run_timed() {
	if [ "$jobs_max" -gt 1 ]; then
		timeout -k "$1" "$timeout_s" "${@:2}" >"$log" 2>&1
		rc=$?
		{ echo "== $kind $name"; cat "$log"; } | flock "$logs/.print.lock" cat
	else
		echo "== $kind $name"
		timeout -k "$1" "$timeout_s" "${@:2}" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
	fi
}

# run_one PROG: run it, record its result line (wall and CPU seconds)
run_one() {
	local prog=$1 name log start rc elapsed cpu cpu0 took
	name=$(basename "$prog" .sh)
	log="$logs/$kind-$name.log"
	start=$(date +%s)
	children_cpu
	cpu0=$cpu
	case $kind in
	fuzz)
		local fname=${name#fuzz_}
		local corpus="tests/fuzz/corpus/$fname"
		local work="$BUILD/fuzz/work/$fname" art="$BUILD/fuzz/artifacts/$fname/"
		mkdir -p "$work" "$art" "$corpus"
		timeout -k 10 $((${FUZZ_SECONDS:-8} + 120)) "$prog" \
			-max_total_time="${FUZZ_SECONDS:-8}" -print_final_stats=1 \
			-artifact_prefix="$art" -timeout=10 -rss_limit_mb=2048 -error_exitcode=99 \
			"$work" "$corpus" >"$log" 2>&1
		rc=$?
		{ echo "== $kind $name"; tail -n 4 "$log"; } | flock "$logs/.print.lock" cat
		;;
	integration|static) run_timed 30 bash "$prog" ;; # a script is given 30 s after TERM to keep its files
	*) run_timed 10 "$prog" ;;
	esac
	elapsed=$(( $(date +%s) - start ))
	children_cpu
	took="${elapsed}s, $(((cpu - cpu0) / hz))s CPU"
	case $rc in
	0) echo "PASS $kind $name ($took)" >>"$results" ;;
	77)
		if [ "$kind" = gpu ] && [ "${RS_REQUIRE_GPU:-0}" = 1 ]; then
			echo "FAIL $kind $name: skipped but a GPU is required" >>"$results"
		else
			echo "SKIP $kind $name: $(tail -n 1 "$log")" >>"$results"
		fi ;;
	124|137) echo "FAIL $kind $name ($took): timed out after ${timeout_s}s" >>"$results" ;;
	*) echo "FAIL $kind $name ($took): exit $rc (log: $log)" >>"$results" ;;
	esac
}

# Unit tests (RS_UNIT_JOBS), fuzz targets (RS_FUZZ_JOBS) and the CUDA simulator's
# programs (RS_CUDASIM_JOBS) run two at a time by default, integration scripts
# (RS_TEST_JOBS) three, their lines recorded in the order given; everything else
# one by one. On 2 cores, the integration scripts took about 10 minutes one by
# one, 7 two at a time (6m17 after they were lightened); three at a time was
# slower while their polls started processes (sleep, pyenv's python3 shim),
# 4m41 against 5m27 since they don't: much of a script's time is waiting.
jobs_max=1 jobs_var=
case $kind in
unit) jobs_var=RS_UNIT_JOBS jobs_max=${RS_UNIT_JOBS:-2} ;;
fuzz) jobs_var=RS_FUZZ_JOBS jobs_max=${RS_FUZZ_JOBS:-2} ;;
cudasim) jobs_var=RS_CUDASIM_JOBS jobs_max=${RS_CUDASIM_JOBS:-2} ;;
integration) jobs_var=RS_TEST_JOBS jobs_max=${RS_TEST_JOBS:-3} ;;
esac
case $jobs_max in
'' | *[!0-9]*) echo "run.sh: $jobs_var must be a number, got '$jobs_max'" >&2; exit 2 ;;
esac
if [ "$jobs_max" -le 1 ]; then
	for prog in "$@"; do run_one "$prog"; done
	exit 0
fi
parts=$(mktemp -d)
# Interrupted: no job starts another program; each job's timeout is told (it
# passes TERM on to its program, whose own exit cleans up), then the jobs
# themselves; the results of the programs that ended are kept.
stop_jobs() {
	local jp
	[ -d "$parts" ] || return 0
	touch "$parts/stop"
	jp=$(jobs -p | paste -sd, -)
	[ -z "$jp" ] || { pkill -TERM -P "$jp"; kill ${jp//,/ }; } 2>/dev/null
	cat "$parts"/[0-9]* >>"$results" 2>/dev/null
	rm -rf "$parts"
}
trap stop_jobs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Integration scripts that start the Kubernetes API simulator make one job, run
# one after another: their pods share this machine's loopback addresses and
# ports (the coordinator listens on 0.0.0.0:7070). Every other program is a job
# of its own. A job is the indexes of its programs in the order given.
progs=("$@")
sim_job= job_list=()
for i in "${!progs[@]}"; do
	if [ "$kind" = integration ] && grep -q apisim "${progs[$i]}"; then
		sim_job="$sim_job $i"
	else
		job_list+=("$i")
	fi
done
[ -z "$sim_job" ] || job_list=("$sim_job" "${job_list[@]}")
run_job() { # run_job INDEX...: those programs, one after another
	local i
	for i in "$@"; do
		[ ! -e "$parts/stop" ] || return 0
		results="$parts/$(printf %04d "$i")" run_one "${progs[$i]}"
	done
}
for job in "${job_list[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
	# shellcheck disable=SC2086 # a job is a list of indexes
	run_job $job &
done
wait
cat "$parts"/* >>"$results"
rm -rf "$parts"
exit 0
