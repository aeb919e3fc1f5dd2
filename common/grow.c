/*
 * grow.c - see grow.h.
 */
#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

rs_status rs_grow(void *array, size_t *cap, size_t need, size_t elem)
{
	void *old, *p;
	size_t n = *cap ? *cap : 16;
	if (need <= *cap)
		return RS_OK;
	while (n < need) {
		if (n > SIZE_MAX / 2 / elem)
			return RS_ENOMEM;
		n *= 2;
	}
	memcpy(&old, array, sizeof(old)); /* the caller's T *, whatever T is */
	p = realloc(old, n * elem);
	if (!p)
		return RS_ENOMEM;
	memcpy(array, &p, sizeof(p));
	*cap = n;
	return RS_OK;
}
