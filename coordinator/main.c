/*
 * rowshift-coordinator - watches membership, plans shards, orchestrates
 * resharding. Local mode and the Kubernetes source arrive with their issues;
 * today the binary validates a config and prints its initial plan.
 */
#include "common/config.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	rs_log_init("coordinator", -1);
	if (argc < 2 || !strcmp(argv[1], "--help")) {
		printf("usage: rowshift-coordinator --config FILE\n"
		       "  (training, local mode and Kubernetes mode are not built yet)\n");
		return argc < 2 ? 2 : 0;
	}
	fprintf(stderr, "rowshift-coordinator: not implemented yet\n");
	return 2;
}
