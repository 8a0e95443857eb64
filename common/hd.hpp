// `__host__ __device__` for headers that both CPU code and kernels include.
//
// Small per-element math (the (m, d) merge, the Welford combine) is written once and used by
// the CPU steps and the kernels alike. Under nvcc the qualifiers are CUDA's; under a host
// compiler they mean nothing, unless the simulator's dialect header already defined them.
#pragma once

#if !defined(__CUDACC__)
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#endif
