#!/bin/bash
# layers.sh - the source tree keeps its shape: the layers include only what
# they stand on and their modules form no include cycle
# (scripts/checklayers.py), no .c file, the unit tests' included, outgrows
# 900 lines (common/planner.c, one algorithm documented step by step,
# excepted) and each daemon's main.c
# stays under 300. The check itself must fail on planted violations of each
# rule, so a copy of the tree gets one at a time.
set -u
. "$(dirname "$0")/../lib/itest.sh"

check "the tree keeps its layers" python3 scripts/checklayers.py

# plant VIOLATION (a line appended to FILE) in a copy of the tree; the check must fail naming WHAT
planted() {
	local file=$1 line=$2 what=$3
	rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
	cp -r common kernels worker coordinator ctl "$tmp/tree/"
	echo "$line" >>"$tmp/tree/$file"
	! python3 scripts/checklayers.py "$tmp/tree" >"$tmp/out" && grep -q "$what" "$tmp/out"
}
check "coordinator -> worker is refused" planted coordinator/job.c '#include "worker/train.h"' \
	'coordinator/job.c:.*includes worker/train.h: coordinator/ may include only common, coordinator'
check "common -> kernels is refused" planted common/plan.c '#include "kernels/zch.h"' \
	'common/plan.c:.*common/ may include only common'
check "ctl -> worker is refused" planted ctl/status.c '#include "worker/agent.h"' 'ctl/status.c:.*ctl/ may include only'
check "kernels -> worker is refused" planted kernels/zch.c '#include "worker/engine.h"' 'kernels/zch.c:.*kernels/ may include only'
check "the product including tests is refused" planted worker/dense.c '#include "tests/unit/scratch.h"' \
	'must not include test code'
check "a module cycle (plan <-> planner, as it was) is refused" planted common/plan.c '#include "common/planner.h"' \
	'modules include each other in a cycle'
# an include names what the compiler would open, however it is spelled
check "a relative path out of the layer is refused" planted coordinator/job.c '#include "../worker/train.h"' \
	'coordinator/job.c:.*includes ../worker/train.h (worker/train.h): coordinator/ may include only'
check "an angle-bracket include of a layer is refused" planted common/plan.c '#include <kernels/zch.h>' \
	'common/plan.c:.*includes <\?kernels/zch.h.*common/ may include only'
check "a path through another layer is refused" planted coordinator/job.c '#include "common/../worker/train.h"' \
	'coordinator/job.c:.*(worker/train.h): coordinator/ may include only'
check "a sibling include joins the cycle check" planted common/plan.c '#include "planner.h"' \
	'modules include each other in a cycle'
check "an include leaving the tree is refused" planted worker/dense.c '#include "../../etc/x.h"' 'outside the tree'

# sizes: .c files under 900 lines but the planner, each main.c under 300
too_long() {
	for f in common/*.c kernels/*.c worker/*.c coordinator/*.c ctl/*.c tests/unit/*.c; do
		[ "$f" = common/planner.c ] && continue
		[ "$(wc -l <"$f")" -gt 900 ] && echo "$f: $(wc -l <"$f") lines"
	done
	for f in coordinator/main.c worker/main.c; do
		[ "$(wc -l <"$f")" -ge 300 ] && echo "$f: $(wc -l <"$f") lines"
	done
	return 0
}
too_long >"$tmp/long"
cat "$tmp/long"
check "no .c file over 900 lines (but common/planner.c); each main.c under 300" test ! -s "$tmp/long"

finish_checks layers
