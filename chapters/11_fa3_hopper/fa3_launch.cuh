// Chapter 11's launches: every Hopper rung runs one block per (Q tile of kBr rows, head), with
// chapter 08's checks before it (with_tile_shape: fp16 or bf16, d = 64 or 128, 16-byte rows)
// and, on the GPU, a device of compute capability 9.0 (the kernels are sm_90a code). The TMA
// rungs take Q, K and V as tensor maps (eq. 3 of fa3_hopper.md). Host code (this file compiles
// to nothing by itself).
// Test: ctest --test-dir build -R 11_fa3_hopper --output-on-failure
#pragma once

#include "common/hopper.cuh"  // first: common/kernel.cuh

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "chapters/08_fa2_at_speed/fast_launch.cuh"
#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "common/backend.hpp"
#include "common/rung_args.hpp"
#include "common/shared_memory.cuh"

namespace wb::ch11 {
namespace {

/// On the GPU, one line naming `rung` unless the device runs sm_90a code (an H100 or H200).
inline void require_hopper(const char* rung) {
  if constexpr (kThisBackend == Backend::cuda) {
    const std::string why = why_no_sm90a();
    if (!why.empty()) throw std::invalid_argument(std::string(rung) + ": needs sm_90a: " + why);
  }
}

/// Launches Kernel (chapter 08's arguments: q, k, v, o, lse, ...) over `warps` warps, after
/// require_hopper.
template <auto Kernel>
void launch_pointers(const char* rung, const AttentionArgs& a, int warps, std::size_t bytes) {
  require_hopper(rung);
  ch08::launch_fast<Kernel>(a, kBr, warps, bytes);
}

/// Q, K and V as TMA sees them: each (bh, l, d) tensor a 3-D tensor (d, l, bh) (sizes innermost
/// first), boxes of 64 columns (128 bytes, the 128-byte swizzle's row) by `rows` rows of one
/// head. A box past a head's last row reads zeros there: never the next head's rows.
struct TensorMaps {
  ptx::TensorMap q, k, v;
};

template <typename T, int D>
TensorMaps encode_tensor_maps(const AttentionArgs& a) {
  const auto map = [&](ptx::TensorMap& m, const void* x, int l, int rows) {
    const std::uint64_t sizes[] = {D, std::uint64_t(l), std::uint64_t(a.shape.bh)};
    const std::uint64_t strides[] = {D * sizeof(T), std::uint64_t(l) * D * sizeof(T)};
    const std::uint32_t box[] = {64, std::uint32_t(rows), 1};
    ptx::encode_tensor_map(m, static_cast<const T*>(x), 3, sizes, strides, box,
                           ptx::Swizzle::b128);
  };
  TensorMaps maps{};
  map(maps.q, a.q, a.shape.lq, kBr);
  map(maps.k, a.k, a.shape.lk, kBc);
  map(maps.v, a.v, a.shape.lk, kBc);
  return maps;
}

/// The element type T of a TMA kernel of this chapter, from its o parameter.
template <typename T, typename... Params>
T output_of(void (*)(ptx::TensorMap, ptx::TensorMap, ptx::TensorMap, T*, Params...));

/// Launches a TMA Kernel (q_map, k_map, v_map, o, lse, shape, scale, causal, tiles_visited)
/// over `warps` warps, after require_hopper.
template <auto Kernel, int D>
void launch_maps(const char* rung, const AttentionArgs& a, int warps, std::size_t bytes) {
  using T = decltype(output_of(Kernel));
  require_hopper(rung);
  const TensorMaps maps = encode_tensor_maps<T, D>(a);
  launch_opted_in<Kernel>(dim3(ceil_div(a.shape.lq, kBr), a.shape.bh), dim3(kWarpSize, warps),
                          bytes, maps.q, maps.k, maps.v, static_cast<T*>(a.o), a.lse, a.shape,
                          a.scale, a.causal, a.tiles_visited);
}

}  // namespace
}  // namespace wb::ch11
