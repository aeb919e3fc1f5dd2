/*
 * scratch.c - see scratch.h.
 */
#include "tests/unit/scratch.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int rs_scratch_make(char *dir, size_t n, const char *name)
{
	int len = snprintf(dir, n, "/tmp/rs-test-%s-%d", name, (int)getpid());
	if (len < 0 || (size_t)len >= n) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return mkdir(dir, 0700);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

int rs_scratch_remove(const char *dir)
{
	/* depth first, without following symbolic links out of the folder */
	return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
