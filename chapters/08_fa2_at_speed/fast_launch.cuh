// Chapter 08's launch of a rung's kernel: every rung's kernel takes the same arguments (q, k, v,
// o, lse, shape, scale, causal, tiles_visited) and runs one block per (Q tile, head); each
// rung's launcher (rungs/N_name.cuh) names its kernel, Br, warps and shared memory. Host code
// (this file compiles to nothing by itself).
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstddef>

#include "common/rung_args.hpp"
#include "common/shared_memory.cuh"

namespace wb::ch08 {

/// The element type T of a kernel of this chapter, from its first parameter (const T* q).
template <typename T, typename... Params>
T element_of(void (*)(const T*, Params...));

/// Launches Kernel over the 16-bit T of `a`: grid (ceil(lq / br), bh), blocks of `warps` warps,
/// `bytes` of dynamic shared memory (launch_opted_in: above 48 KiB it opts in first).
template <auto Kernel>
void launch_fast(const AttentionArgs& a, int br, int warps, std::size_t bytes) {
  using T = decltype(element_of(Kernel));
  launch_opted_in<Kernel>(dim3(ceil_div(a.shape.lq, br), a.shape.bh), dim3(kWarpSize, warps), bytes,
                          static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                          static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse, a.shape, a.scale,
                          a.causal, a.tiles_visited);
}

}  // namespace wb::ch08
