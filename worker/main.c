/*
 * rowshift-worker - one per pod (per GPU): holds shards, trains, moves rows.
 * Not built yet: the binary exists so the layout and build are in place.
 */
#include "common/log.h"

#include <stdio.h>

int main(void)
{
	rs_log_init("worker", -1);
	fprintf(stderr, "rowshift-worker: not implemented yet\n");
	return 2;
}
