#!/bin/bash
# swarm.sh - a coordinator with 80 members over the real control channel
# (tests/swarm/member.c: each a process that joins with the token
# handshake and answers as a worker does, training nothing): 80 join and
# start (more than the 64 the server once let wait for their join); `rowshiftctl
# scale` to 90 pauses, stages and commits; to 75 drains the last 15
# (SIGTERM: they ask to leave and hand their rows over) and commits; the
# job ends. Every member joins once (none is turned away while the others
# are in their handshakes), every reshard's checksums
# match, every member exits cleanly. make bench runs the same at 1,024
# (tests/bench/bench_swarm.sh).
set -u
. "$(dirname "$0")/../lib/itest.sh"

BUILD=$BUILD bash tests/swarm/run.sh 80 90 75 "$tmp/s" 240
rc=$?
out=$tmp/s/out err=$tmp/s/err
check "the job ends well (exit $rc)" test "$rc" = 0
check "80 -> 90: committed" grep -q "^generation 2 committed: 80 -> 90 workers" "$out"
check "90 -> 75: committed" grep -q "^generation 3 committed: 90 -> 75 workers" "$out"
check "both reshards verified: every table's checksum matches" \
	test "$(grep -c "staged and verified: .*every table's checksum matches" "$out")" = 2
check "the job ends on 75 workers at step 3" grep -q "^training done: 75 workers, 3 steps, 3 generation(s), 2 reshard(s)" "$out"
check "the 15 drained asked to leave" test "$(grep -c "worker-[0-9]* asks to leave" "$err")" = 15
check "90 members joined, each once ($(grep -c " joined (transport at" "$err") joins)" \
	test "$(grep -c " joined (transport at" "$err")" = 90
check "none was turned away during the handshakes" bash -c "! grep -q 'closed the oldest' '$err'"
check "no member failed" bash -c "! grep -E 'ERROR worker-|worker-[0-9]+ (exited with status [1-9]|killed)' '$err'"
check "the coordinator reports what it used" grep -q "the coordinator used [0-9.]* s of CPU .* and at most [0-9.]* MiB of memory" "$err"
[ "$fails" = 0 ] || { tail -5 "$out"; grep -v " INFO " "$err" | tail -10; }
finish_checks swarm
