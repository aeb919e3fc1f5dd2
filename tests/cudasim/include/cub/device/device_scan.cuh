/* cub/device/device_scan.cuh - the CUDA simulator's cub: see cub/cudasim_cub.cuh. */
#include "../cudasim_cub.cuh"
