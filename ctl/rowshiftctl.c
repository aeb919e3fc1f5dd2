/*
 * rowshiftctl - the command-line tool: plan, (later) scale, status, checkpoint.
 */
#include <stdio.h>

int main(void)
{
	fprintf(stderr, "rowshiftctl: not implemented yet\n");
	return 2;
}
