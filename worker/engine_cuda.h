/*
 * engine_cuda.h - the CUDA engine (see engine.h): shards in CUDA managed
 * memory preferring one device, the kernels of kernels/cuda/ on a stream
 * of its own. Built where nvcc exists (build/lib/librowshift_cuda.a).
 *
 * Several processes may share one device, each with its own engine: that
 * is how a one-GPU machine runs a multi-worker job (TCP between workers).
 */
#ifndef RS_ENGINE_CUDA_H
#define RS_ENGINE_CUDA_H

#include "worker/engine.h"

/*
 * How many CUDA devices this process can use: 0 when there are none, no
 * driver, or the runtime fails (*why then says what it said).
 */
int rs_cuda_devices(const char **why);

/* An engine on CUDA device `device`: RS_ECUDA (err names the call) when it cannot be used. */
rs_status rs_engine_cuda_create(int device, rs_engine **out, rs_err *err);

#endif
