#!/bin/bash
# checkpoints.sh - periodic checkpoints (--checkpoint-dir, --checkpoint-every,
# --checkpoint-keep). A local job of 2 workers, rescaled to 3 at step 50,
# takes a checkpoint every 30 steps: each is complete (its index, written
# last, carries every file's CRC-32C and size), only the newest 2 are kept,
# the last equals the final --save bit for bit, and a job started from the
# one at step 90 (on 3 workers) ends where the undisturbed job did: the
# copy taken at the step boundary and written while training went on is
# that step's model. A flipped byte in a shard file is found by its
# checksum (checkpoint diff and --load refuse it, naming the file); a
# checkpoint without its index is never loaded; --load of the directory of
# periodic checkpoints takes the newest complete one that checks out. A
# checkpoint still being written when a reshard commits completes, with
# the old world's shards, and loads, a shrink's leaver's part included. An
# index left in a step's directory by an earlier run is removed before the
# first file of that step is written (the directory is not complete again
# until this run's index lands). A worker waiting for a checkpoint's write
# past the control connection's hang-up time keeps its connection.
set -u
. "$(dirname "$0")/../lib/itest.sh"

cfg=$tmp/quarter.json # dlrm-small (with its ZCH table: identities and eviction metadata are checkpointed too)
quarter_config examples/dlrm-small.json "$cfg" # at a quarter of its batch: the same tables, checkpoints and cycle
run() { # run NAME FLAGS...: a local job of dlrm-small (no ZCH) to step 120, saved to $tmp/NAME.final
	local name=$1
	shift
	timeout 180 "$bin/rowshift-coordinator" --local --config "$cfg" --steps 120 --save "$tmp/$name.final" \
		--listen 127.0.0.1:0 --admin-file "$tmp/$name.admin" --log-json "$tmp/$name.jsonl" "$@" \
		>"$tmp/$name.out" 2>"$tmp/$name.err"
}
run a --workers 2 --schedule 50:3 --checkpoint-dir "$tmp/ck" --checkpoint-every 30 --checkpoint-keep 2
rc=$?
check "a job with periodic checkpoints and a rescale finishes (exit $rc)" test "$rc" = 0
check "a checkpoint completed at steps 30, 60 (after the rescale), 90 and 120" bash -c \
	"[ \"\$(grep -o 'checkpoint of step [0-9]* complete' '$tmp/a.out' | awk '{print \$4}' | tr '\n' ' ')\" = '30 60 90 120 ' ]"
check "--log-json has one checkpoint event per checkpoint" bash -c "[ \$(grep -c '\"event\":\"checkpoint\"' '$tmp/a.jsonl') = 4 ]"
check "only the newest 2 are kept" bash -c "[ \"\$(ls '$tmp/ck' | tr '\n' ' ')\" = 'step-000000090 step-000000120 ' ]"
check "every file of a kept checkpoint has its CRC-32C and size in the index" python3 - "$tmp/ck/step-000000090" <<'PY'
import json, os, sys
d = sys.argv[1]
ix = json.load(open(os.path.join(d, "index.json")))
entries = [s for t in ix["tables"] for s in t["shards"]] + [ix["dense"]]
bad = [e["file"] for e in entries if "crc32c" not in e or e["bytes"] != os.path.getsize(os.path.join(d, e["file"]))]
print(len(entries), "files,", len(bad), "without a matching size:", bad[:3])
sys.exit(1 if bad or len(entries) < 5 else 0)
PY
check "the checkpoint of the last step equals the final --save" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/ck/step-000000120' '$tmp/a.final' --max-rel 0 >'$tmp/diff-last.out'"

# start again from step 90: the same end as the undisturbed job
run b --workers 3 --load "$tmp/ck/step-000000090"
rc=$?
check "a job loading the checkpoint of step 90 finishes (exit $rc)" bash -c "[ $rc = 0 ] && grep -q 'loaded .*step-000000090 (step 90)' '$tmp/b.err'"
"$bin/rowshiftctl" checkpoint diff "$tmp/a.final" "$tmp/b.final" >"$tmp/diff-ab.out" 2>&1
check "... and ends where the undisturbed job did, bit for bit" same_bits "$tmp/a.final" "$tmp/b.final"
tail -n 1 "$tmp/diff-ab.out"
# a checkpoint still being written when a reshard commits (its writers stall 2 s after their first file, the
# reshard comes 10 steps later): the old world's reports still count, its index describes the old world's
# shards, and a job started from it ends where the undisturbed job did; across a growth, and across a shrink,
# whose leaving worker reports its part before it exits
across_reshard() { # across_reshard NAME WORKERS TO WHAT
	ROWSHIFT_FAULT=checkpoint-stall-ms=2000@30 run "$1" --workers "$2" --schedule "40:$3" \
		--checkpoint-dir "$tmp/ck-$1" --checkpoint-every 30 --checkpoint-keep 4
	check "a checkpoint written across $4 completes after the commit" python3 - "$tmp/$1.out" <<'PY'
import sys
out = open(sys.argv[1]).read()
commit, done = out.find("generation 2 committed"), out.find("checkpoint of step 30 complete")
print("commit at", commit, "checkpoint of step 30 at", done)
sys.exit(0 if 0 <= commit < done else 1)
PY
	run "$1-loaded" --workers 2 --load "$tmp/ck-$1/step-000000030"
	check "... and a job of 2 workers loading it ends where the undisturbed job did, bit for bit" same_bits \
		"$tmp/a.final" "$tmp/$1-loaded.final"
}
# an earlier run's index of step 30 in the directory: gone before the first file is written over its checkpoint
late30=$tmp/ck-late/step-000000030
mkdir -p "$late30" && echo '{"earlier": "run"}' >"$late30/index.json"
(for _ in $(seq 1 1200); do
	if ls "$late30" | grep -qv '^index.json$'; then [ -e "$late30/index.json" ] && echo present || echo absent; exit; fi
	nap 0.05
done; echo "no file written") >"$tmp/late-index.txt" &
watcher=$!
across_reshard late 2 3 "a growth (2 -> 3)"
wait $watcher
check "an earlier run's index of the same step is gone once a rank's first file is there ($(cat "$tmp/late-index.txt"))" \
	grep -qx absent "$tmp/late-index.txt"
check "... and the index that completes the checkpoint is this run's" bash -c "! grep -q earlier '$late30/index.json'"
across_reshard shrink 3 2 "a shrink (3 -> 2; the leaver reported its part)"
# at another world size: loaded by 2 workers and saved at once, the model (ZCH identities and eviction state too) is the checkpoint's
timeout 120 "$bin/rowshift-coordinator" --local --config "$cfg" --workers 2 --steps 90 --load "$tmp/ck/step-000000090" \
	--save "$tmp/z.final" --listen 127.0.0.1:0 --admin-file "$tmp/z.admin" >"$tmp/z.out" 2>"$tmp/z.err"
check "loaded by 2 workers, the checkpoint of 3 comes back exactly, ZCH identities included" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/ck/step-000000090' '$tmp/z.final' --max-rel 0 --json >'$tmp/diff-z.json' &&
	 grep -q '\"zch_ids\"' '$tmp/diff-z.json'"

# export for PyTorch users: one file, TorchRec's names, every value the sharded checkpoint's
"$bin/rowshiftctl" checkpoint export "$tmp/ck/step-000000120" "$tmp/export.safetensors" >"$tmp/export.out" 2>&1
check "checkpoint export writes one safetensors file" grep -q "9 tables of step 120" "$tmp/export.out"
check "... that the independent reader takes, with each table's tensors in global row order, equal to the shards'" \
	python3 - "$tmp/ck/step-000000120" "$tmp/export.safetensors" <<'PY'
import json, os, sys
sys.path.insert(0, "tests/integration")
import safetensors_check as stc
d, out = sys.argv[1], sys.argv[2]
ix = json.load(open(os.path.join(d, "index.json")))
hdr, buf = stc.load(out)
def raw(h, b, name):
    t = h[name]
    return t, b[t["data_offsets"][0]:t["data_offsets"][1]]
checked = 0
for tb in ix["tables"]:
    for shard_name, export_suffix, per_row in (("weight", "weight", 0), ("momentum1", "weight.momentum1", 1),
                                               ("zch_ids", "zch_ids", 1)):
        name = f"embedding_bags.{tb['name']}.{export_suffix}"
        if name not in hdr:
            assert shard_name != "weight", f"{name} missing"
            continue
        t, data = raw(hdr, buf, name)
        want_shape = [tb["rows"]] if per_row else [tb["rows"], tb["dim"]]
        assert t["shape"] == want_shape, f"{name}: shape {t['shape']}, want {want_shape}"
        es = stc.SIZES[t["dtype"]]
        width = 1 if per_row else tb["dim"]
        for s in tb["shards"]:
            sh, sb = stc.load(os.path.join(d, s["file"]))
            st, sdata = raw(sh, sb, shard_name)
            cols = 1 if per_row else s["cols"]
            for r in range(s["rows"]):
                at = ((s["row_offset"] + r) * width + (0 if per_row else s["col_offset"])) * es
                assert data[at:at + cols * es] == sdata[r * cols * es:(r + 1) * cols * es], f"{name} row {s['row_offset'] + r}"
        checked += 1
assert checked >= 9 + 1, checked
assert hdr["__metadata__"]["step"] == "120"
print(checked, "tensors equal to the shards'; names:", sorted(k for k in hdr if k != "__metadata__")[:3], "...")
PY

# damage: a flipped byte, a missing index
cp -r "$tmp/ck/step-000000090" "$tmp/bad"
victim=$(ls "$tmp/bad" | grep '^item\.' | head -n 1)
python3 - "$tmp/bad/$victim" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x01
open(p, "wb").write(b)
PY
"$bin/rowshiftctl" checkpoint diff "$tmp/bad" "$tmp/ck/step-000000090" >"$tmp/diff-bad.out" 2>&1
rc=$?
check "checkpoint diff finds the flipped byte by its checksum, naming the file (exit $rc)" \
	bash -c "[ $rc != 0 ] && grep -q '$victim.*CRC-32C.*torn or damaged' '$tmp/diff-bad.out'"
run c --workers 2 --load "$tmp/bad"
rc=$?
check "--load of the damaged checkpoint fails the job, naming the file (exit $rc)" \
	bash -c "[ $rc != 0 ] && [ $rc != 124 ] && grep -q '$victim.*torn or damaged' '$tmp/c.err'"
# --load of the directory of periodic checkpoints: the newest complete one that checks out
mkdir "$tmp/root" && cp -r "$tmp/ck/step-000000120" "$tmp/root/" && cp -r "$tmp/bad" "$tmp/root/step-000000090"
cp -r "$tmp/ck/step-000000090" "$tmp/root/step-000000060" && sed -i 's/"step": 90/"step": 60/' "$tmp/root/step-000000060/index.json"
mkdir "$tmp/root/step-000000150" && cp "$tmp/ck/step-000000120/"*.safetensors "$tmp/root/step-000000150/"
run e --workers 2 --load "$tmp/root"
check "--load DIR of periodic checkpoints takes the newest complete one (step 120; 150 has no index)" \
	grep -q "loaded .*step-000000120 (step 120)" "$tmp/e.err"
rm -rf "$tmp/root/step-000000120"
run e2 --workers 2 --load "$tmp/root"
check "... passing over one whose file is damaged, saying why (90), for the next (60)" bash -c \
	"grep -q 'step-000000090 passed over: .*torn or damaged' '$tmp/e2.err' && grep -q 'loaded .*step-000000060 (step 60)' '$tmp/e2.err'"
mkdir "$tmp/noindex" && cp "$tmp/ck/step-000000090/"*.safetensors "$tmp/noindex/"
run d --workers 2 --load "$tmp/noindex"
rc=$?
check "a checkpoint without its index is never loaded (exit $rc)" bash -c "[ $rc != 0 ] && grep -q 'index.json' '$tmp/d.err'"

# a worker busy past the hang-up keeps its connection (worker/link.h's keeper): --ws-hangup-s 6 (a PING after 1 s
# of silence, the hang-up 5 s later; the workers get it from the coordinator), the last checkpoint's writers stall
# 12 s after their first file, and each worker waits for its writer before the final save. Without the keeper both
# workers are hung up on during the wait (they rejoin after it; before a cut-off worker rejoined to say "done", they
# exited unheard and the job rolled back to step 60 until it gave up)
ROWSHIFT_FAULT=checkpoint-stall-ms=12000@120 run k --workers 2 --checkpoint-dir "$tmp/ckk" --checkpoint-every 60 \
	--ws-hangup-s 6
rc=$?
check "workers waiting 12 s for a checkpoint's write, past a 6 s hang-up, finish the job (exit $rc)" bash -c \
	"[ $rc = 0 ] && grep -q 'checkpoint of step 120 complete' '$tmp/k.out' &&
	 [ \$(grep -c 'ws-hangup-s 6: a connection is closed 6 s after' '$tmp/k.err') = 3 ]"
check "... with no connection lost and no recovery" bash -c "! grep -E 'lost|came back|recover' '$tmp/k.err'"

# --checkpoint-interval: by time, at a step every worker agrees on (any step, not a multiple of anything)
# (paced, at least 10 ms a step: unpaced, a quarter's 400 steps may end within the first second)
light_config examples/dlrm-small.json "$tmp/paced.json" 10
cfg=$tmp/paced.json run i --workers 2 --steps 400 --checkpoint-dir "$tmp/cki" --checkpoint-interval 1 \
	--checkpoint-keep 1000
rc=$?
check "a job with --checkpoint-interval 1 (and no --checkpoint-every) finishes (exit $rc)" test "$rc" = 0
grep -o 'checkpoint of step [0-9]* complete' "$tmp/i.out" | awk '{print $4}' >"$tmp/i.steps"
check "it took checkpoints by time ($(tr '\n' ' ' <"$tmp/i.steps")), each complete" bash -c \
	"[ \$(wc -l <'$tmp/i.steps') -ge 2 ] && for s in \$(cat '$tmp/i.steps'); do
	 [ -e '$tmp/cki/'\$(printf 'step-%09d' \$s)/index.json ] || exit 1; done"
first=$(head -1 "$tmp/i.steps")
cfg=$tmp/paced.json run j --workers 2 --steps 400 --load "$tmp/cki/$(printf 'step-%09d' "$first")"
check "a job loading the first of them ends where the undisturbed one did, bit for bit" same_bits "$tmp/i.final" "$tmp/j.final"
finish_checks checkpoints
