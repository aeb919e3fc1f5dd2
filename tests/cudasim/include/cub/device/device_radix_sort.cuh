/* cub/device/device_radix_sort.cuh - the CUDA simulator's cub: see cub/cudasim_cub.cuh. */
#include "../cudasim_cub.cuh"
