#!/bin/bash
# chaos.sh - a long local job under what a real cluster deals out, at random
# (seeded, so a failing run can be replayed), and the one thing that must
# come out of it: the model of an undisturbed run. Not part of make test
# (it runs for many minutes): `make soak` (SOAK_STEPS, SOAK_SEED, and
# SOAK_FLAGS for the disturbed job's coordinator, e.g. "--sharding-group 2",
# SOAK_GAP=MIN-MAX, seconds between faults, default 2-8).
#
# The job: examples/dlrm-small.json (every sharding type, a ZCH table;
# deterministic training and pre-copy, the defaults) on 3 workers, a
# checkpoint every 20 steps, its state in --state. Every 2-8 s one of:
#   scale      rowshiftctl scale --workers 1..5 (a live reshard, pre-copied)
#   kill       a worker SIGKILLed (the OOM killer, a spot reclaim)
#   kill two   two workers SIGKILLed at once (a node with two of them)
#   freeze     a worker SIGSTOPped for 1-4 s, then SIGCONT (a stalled node)
#   restart    the coordinator SIGKILLed, started again on its --state
#              after 0-3 s (the workers wait for it)
# Faults fall on whatever the job is doing: a step, a pre-copy, a pause, a
# checkpoint being written, a recovery.
#
# Must hold: the job finishes (its coordinator exits 0, no process is left)
# and its final weights equal, bit for bit, those of the same job run
# undisturbed on 3 workers; and no recovery goes back to the start once a
# checkpoint completed (the bits would still match: deterministic training
# replays the steps; the hours would be lost). The log of what was done and when is in
# $tmp/chaos.log (KEEP=1 keeps $tmp).
set -u
. "$(dirname "$0")/../lib/itest.sh"

steps=${SOAK_STEPS:-20000}
seed=${SOAK_SEED:-$RANDOM}
gap=${SOAK_GAP:-2-8}
[[ $gap =~ ^([0-9]+)-([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ] ||
	{ echo "SOAK_GAP must be MIN-MAX (seconds), not '$gap'" >&2; exit 2; }
gap_min=${BASH_REMATCH[1]} gap_span=$((BASH_REMATCH[2] - BASH_REMATCH[1] + 1))
cfg=examples/dlrm-small.json
RANDOM=$seed
echo "chaos: $steps steps, a fault every $gap s, seed $seed (SOAK_SEED=$seed replays the faults' order, not their timing)${SOAK_FLAGS:+, $SOAK_FLAGS}"

pick() { r=$((RANDOM % $1)); } # pick N: r = 0..N-1 (not in a subshell: that would not advance the seed's sequence)
log() { echo "$(date +%T) $*" | tee -a "$tmp/chaos.log"; }

# the undisturbed run
t0=$(date +%s)
timeout 3600 "$bin/rowshift-coordinator" --local --workers 3 --config $cfg --steps "$steps" --save "$tmp/base.final" \
	--admin-file "$tmp/base.admin" >"$tmp/base.out" 2>"$tmp/base.err"
check "the undisturbed run finishes" grep -q "training done: 3 workers, $steps steps" "$tmp/base.out"
log "undisturbed: $(($(date +%s) - t0)) s"

port=$(free_port)
flags=(--local --config $cfg --state "$tmp/job.state" --checkpoint-dir "$tmp/ck" --checkpoint-every 20
	--admin-file "$tmp/job.admin" --grace-ms 30000 ${SOAK_FLAGS:-})
restarts=0
start() { # the coordinator, first or again; its pid in $coord, its output in $tmp/coord-N.*
	"$bin/rowshift-coordinator" "${flags[@]}" "$@" >"$tmp/coord-$restarts.out" 2>"$tmp/coord-$restarts.err" &
	coord=$!
}
workers() { pgrep -f -- "[r]owshift-worker --coordinator ws://127.0.0.1:$port.* --name worker-" ; }
worker_pid() { # pid = a random live worker's, or false when there is none
	local p=($(workers))
	[ ${#p[@]} -gt 0 ] && pick ${#p[@]} && pid=${p[$r]}
}
phase() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["phase"])' "$tmp/job.state" 2>/dev/null; }
name_of() { tr '\0' ' ' </proc/$1/cmdline 2>/dev/null | grep -o -- '--name [^ ]*' | cut -d' ' -f2; }

t0=$(date +%s)
start --workers 3 --steps "$steps" --save "$tmp/job.final" --listen 127.0.0.1:$port
wait_for "$tmp/coord-0.out" "^step " 60
actions=0 ended=
while kill -0 $coord 2>/dev/null; do
	pick $gap_span
	sleep $((gap_min + r))
	kill -0 $coord 2>/dev/null || break
	pick 10
	case $r in
	0 | 1 | 2)
		pick 5
		n=$((1 + r))
		log "scale to $n: $("$bin/rowshiftctl" scale --workers $n --admin-file "$tmp/job.admin" 2>&1 | tail -1)"
		;;
	3 | 4)
		worker_pid && log "kill $(name_of $pid)" && kill -9 $pid
		;;
	5)
		worker_pid && p=$pid && worker_pid && [ "$p" != "$pid" ] && log "kill two: $(name_of $p) $(name_of $pid)" &&
			kill -9 $p $pid
		;;
	6 | 7)
		pick 4
		s=$((1 + r))
		worker_pid && log "freeze $(name_of $pid) for $s s" && kill -STOP $pid && sleep $s && kill -CONT $pid
		;;
	8)
		pick 4
		s=$r
		log "restart the coordinator after $s s"
		kill -9 $coord 2>/dev/null
		{ wait $coord; } 2>/dev/null
		rc=$?
		if [ "$(phase)" = done ]; then # started again, it would only say so (README, "Recovery")
			log "the job ended before the restart (its coordinator: exit $rc)"
			ended=1
			break
		fi
		sleep $s
		restarts=$((restarts + 1))
		start
		;;
	9) ;;
	esac
	actions=$((actions + 1))
	if [ $(($(date +%s) - t0)) -gt 3000 ]; then
		log "still not done after 3000 s: giving up"
		kill -9 $coord
		break
	fi
done
[ -n "$ended" ] || { wait $coord; rc=$?; }
log "chaos: $actions actions, $restarts coordinator restarts, $(($(date +%s) - t0)) s"
final=$(phase)
check "the job finishes (exit $rc; or, its coordinator killed on the way out, its state says done)" \
	bash -c "[ '$rc' = 0 ] || [ '$final' = done ]"
check "a coordinator of it said it is done" bash -c "cat '$tmp'/coord-*.out | grep -q 'training done: .* workers, $steps steps'"
check "no worker is left" bash -c "for _ in \$(seq 1 100); do [ -z \"\$(pgrep -f -- '[r]owshift-worker --coordinator ws://127.0.0.1:$port')\" ] && exit 0; sleep 0.1; done; exit 1"
check "its final weights equal the undisturbed run's, bit for bit" same_bits "$tmp/base.final" "$tmp/job.final"
check "no recovery went back to the start once a checkpoint had completed" bash -c \
	"for k in \$(seq 0 $restarts); do cat '$tmp'/coord-\$k.out; done |
	 awk '/checkpoint of step [0-9]+ complete/ { done = 1 } /rolling back to the start/ && done { print; bad = 1 } END { exit bad }'"
echo "reshards: $(cat "$tmp"/coord-*.out | grep -c 'staged and verified'); recoveries: $(cat "$tmp"/coord-*.out | grep -c '^recovered:')"
finish_checks chaos
