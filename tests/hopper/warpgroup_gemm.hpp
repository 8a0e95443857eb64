// The host's view of tests/hopper/warpgroup_gemm.cuh, the Hopper wrappers' own test kernel:
// its arguments and its launcher on each kernel backend (the kernel file defines
// warpgroup_gemm<B> once for the backend it is compiled for, as a rung file defines its record).
#pragma once

#include <cstdint>

#include "common/backend.hpp"
#include "common/dtype.hpp"

namespace wb::test {

/// C = A B^T on one warpgroup; device pointers of the backend it runs on.
struct WarpgroupGemmArgs {
  const void* a;  // (64, k), row-major, `dtype`
  const void* b;  // (n, k) row-major (K-major), or (k, n) row-major when b_mn_major, `dtype`
  float* c;       // (64, n), row-major
  int n;          // 64, 128 or 256
  int k;          // a positive multiple of 64
  Dtype dtype;    // fp16 or bf16
  bool a_from_registers;  // wgmma_rs, A's fragments loaded from its tile, instead of wgmma_ss
  bool b_mn_major;        // B's tile MN-major (imm-trans-b = 1), as attention's V is
};

/// Launches the kernel and waits for it; refuses (std::invalid_argument) what it cannot take.
template <Backend B>
void warpgroup_gemm(const WarpgroupGemmArgs& args);

/// ptx::encode_tensor_map of backend B for the fp16 tensor at `global` (sizes, strides and box
/// as it takes them), with the 128-byte swizzle or none: what it refuses, it refuses here.
template <Backend B>
void encode_fp16_tensor_map(const void* global, int rank, const std::uint64_t* sizes,
                            const std::uint64_t* strides, const std::uint32_t* box, bool swizzled);

}  // namespace wb::test
