/* cub/device/device_select.cuh - the CUDA simulator's cub: see cub/cudasim_cub.cuh. */
#include "../cudasim_cub.cuh"
