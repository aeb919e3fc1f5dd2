/*
 * grow.h - the one helper behind every growable array: make room for `need`
 * elements, doubling the capacity, so appends cost O(1) amortized.
 */
#ifndef RS_GROW_H
#define RS_GROW_H

#include "common/status.h"

#include <stddef.h>

/*
 * `array` is the address of the array pointer (T **), `cap` its capacity in
 * elements, `elem` sizeof(T). On RS_ENOMEM the array is unchanged.
 */
rs_status rs_grow(void *array, size_t *cap, size_t need, size_t elem);

#endif
