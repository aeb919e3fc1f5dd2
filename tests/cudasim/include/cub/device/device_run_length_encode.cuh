/* cub/device/device_run_length_encode.cuh - the CUDA simulator's cub: see cub/cudasim_cub.cuh. */
#include "../cudasim_cub.cuh"
