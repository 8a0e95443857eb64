// nvcuda::wmma for the simulator: the warp-level matrix multiply-accumulate API of CUDA's
// mma.h, for the 16x16x16 shape with __half or __nv_bfloat16 inputs and float accumulators.
//
// A fragment is an ordinary struct holding this lane's elements in x[] (num_elements of
// them), so element-wise code (scaling an accumulator, as FlashAttention does) runs as
// written. load_matrix_sync, mma_sync and store_matrix_sync are warp-wide: all 32 lanes of
// the warp must execute the same call with the same pointer, ldm and layout (PTX's .aligned),
// or the launch faults. The last lane to arrive performs the warp's memory accesses and the
// product; the fragment data moves between lanes in wb_sim (see wmma_runtime.hpp for the
// element mapping and the order of the sums). Like the shuffles, these calls synchronize the
// warp's fragment data but give no memory ordering: a warp that stores a tile and then reads
// it back with ordinary loads needs __syncwarp() in between, on the GPU and in race mode.
//
// Not provided (a compile error): other shapes (m32n8k16, m8n32k16, ...), __half and int
// accumulators, the integer, tf32, double and sub-byte types.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/sim/half.hpp"
#include "common/sim/access_runtime.hpp"
#include "common/sim/runtime.hpp"
#include "common/sim/wmma_runtime.hpp"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename T>
struct helper_traits {
  typedef T element_type;
  typedef T storage_element_type;
  typedef T fill_argument_type;
};

/// A fragment's storage: `num_elements` values of this lane, in x[].
template <typename T, int size, int packed_size = size>
struct alignas(8) __frag_base {
  enum { num_elements = size };
  enum { num_storage_elements = packed_size };
  typedef T element_type;
  typedef typename helper_traits<T>::storage_element_type storage_element_type;
  storage_element_type x[num_storage_elements];
};

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
class fragment;

// clang-format off
template <> class fragment<matrix_a, 16, 16, 16, __half, row_major> : public __frag_base<__half, 16> {};
template <> class fragment<matrix_a, 16, 16, 16, __half, col_major> : public __frag_base<__half, 16> {};
template <> class fragment<matrix_b, 16, 16, 16, __half, row_major> : public __frag_base<__half, 16> {};
template <> class fragment<matrix_b, 16, 16, 16, __half, col_major> : public __frag_base<__half, 16> {};
template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<accumulator, 16, 16, 16, float> : public __frag_base<float, 8> {};
// clang-format on

/// Sets every element of this lane's fragment to `v` (no warp synchronization).
template <typename T, int size, int packed_size>
inline void fill_fragment(__frag_base<T, size, packed_size>& f,
                          const typename helper_traits<T>::fill_argument_type& v) {
  for (int i = 0; i < f.num_storage_elements; ++i) f.x[i] = v;
}

}  // namespace nvcuda::wmma

namespace wb::sim::detail {

template <typename Use>
constexpr WmmaUse wmma_use() {
  if constexpr (std::is_same_v<Use, nvcuda::wmma::matrix_a>) return WmmaUse::matrix_a;
  if constexpr (std::is_same_v<Use, nvcuda::wmma::matrix_b>) return WmmaUse::matrix_b;
  return WmmaUse::accumulator;
}

template <typename T>
constexpr WmmaType wmma_type() {
  if constexpr (std::is_same_v<T, __half>) return WmmaType::f16;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return WmmaType::bf16;
  return WmmaType::f32;
}

/// An element's bits, widened to 32 (fragments move between lanes as bits, so NaN payloads
/// and signed zeros survive load -> x[] -> store).
template <typename T>
std::uint32_t element_bits(const T& v) {
  if constexpr (sizeof(T) == 2) {
    std::uint16_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
  } else {
    std::uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
  }
}

template <typename T>
T element_from_bits(std::uint32_t bits) {
  T v;
  if constexpr (sizeof(T) == 2) {
    const std::uint16_t b = static_cast<std::uint16_t>(bits);
    std::memcpy(static_cast<void*>(&v), &b, sizeof v);
  } else {
    std::memcpy(static_cast<void*>(&v), &bits, sizeof v);
  }
  return v;
}

/// Offset of element (row, col) of a 16x16 tile stored with leading dimension ldm.
inline std::size_t wmma_offset(int row, int col, unsigned ldm, bool col_major) {
  return col_major ? static_cast<std::size_t>(col) * ldm + static_cast<std::size_t>(row)
                   : static_cast<std::size_t>(row) * ldm + static_cast<std::size_t>(col);
}

template <typename Frag>
void wmma_put_fragment(int slot, const Frag& f) {
  std::uint32_t bits[kWmmaMaxElements];
  for (int i = 0; i < Frag::num_elements; ++i) bits[i] = element_bits(f.x[i]);
  wmma_put(slot, bits, Frag::num_elements);
}

template <typename Frag>
void wmma_get_fragment(Frag& f) {
  using T = typename Frag::element_type;
  std::uint32_t bits[kWmmaMaxElements];
  wmma_get(kWmmaSlotOut, bits, Frag::num_elements);
  for (int i = 0; i < Frag::num_elements; ++i) f.x[i] = element_from_bits<T>(bits[i]);
}

/// load_matrix_sync's body: the last lane to arrive reads the tile for the warp.
template <typename Frag, typename T>
void wmma_load(Frag& f, WmmaUse use, const T* p, unsigned ldm, bool col_major, Site site) {
  wmma_check_memory("load_matrix_sync", p, ldm, sizeof(T), site);
  const AlignedCall call{"load_matrix_sync", p, ldm, col_major ? 1 : 0};
  if (warp_aligned(call, site)) {
    std::uint32_t tile[16 * 16];
    begin_tile_elements();  // checked one by one, counted as the warp's tile access below
    for (int r = 0; r < 16; ++r) {
      for (int c = 0; c < 16; ++c)
        tile[r * 16 + c] = element_bits(p[wmma_offset(r, c, ldm, col_major)]);
    }
    end_tile_elements();
    on_tile_access(TileAccess{p, 16 * sizeof(T), ldm * sizeof(T), false, site});
    wmma_tile_to_lanes(use, Frag::num_elements, tile);
  }
  wmma_get_fragment(f);
}

}  // namespace wb::sim::detail

namespace nvcuda::wmma {

/// Loads a 16x16 A (m, k) or B (k, n) tile: element (r, c) at p[r * ldm + c] (row_major) or
/// p[c * ldm + r] (col_major). p: 256-bit aligned; ldm: elements, a multiple of 16 bytes.
template <typename Use, typename T, typename Layout,
          typename = std::enable_if_t<!std::is_same_v<Use, accumulator>>>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& a, const T* p, unsigned ldm,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  wmma_load(a, wmma_use<Use>(), p, ldm, std::is_same_v<Layout, col_major>, Site{file, line});
}

/// Loads a 16x16 accumulator tile (m, n) stored with `layout`.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& a, const float* p,
                             unsigned ldm, layout_t layout, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  wmma_load(a, wb::sim::WmmaUse::accumulator, p, ldm, layout == mem_col_major, Site{file, line});
}

/// Stores a 16x16 accumulator tile (m, n) with `layout`; the last lane to arrive writes it.
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& a,
                              unsigned ldm, layout_t layout, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  const Site site{file, line};
  const bool col = layout == mem_col_major;
  wmma_check_memory("store_matrix_sync", p, ldm, sizeof(float), site);
  wmma_put_fragment(kWmmaSlotC, a);
  const AlignedCall call{"store_matrix_sync", p, ldm, col ? 1 : 0};
  if (warp_aligned(call, site)) {
    std::uint32_t tile[16 * 16];
    wmma_lanes_to_tile(tile);
    begin_tile_elements();
    for (int r = 0; r < 16; ++r) {
      for (int c = 0; c < 16; ++c)
        p[wmma_offset(r, c, ldm, col)] = element_from_bits<float>(tile[r * 16 + c]);
    }
    end_tile_elements();
    on_tile_access(TileAccess{p, 16 * sizeof(float), ldm * sizeof(float), true, site});
  }
}

/// d = a * b + c over the warp's 16x16x16 tiles, in float (d may be c).
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  using FragA = fragment<matrix_a, 16, 16, 16, T, LayoutA>;
  const Site site{file, line};
  wmma_put_fragment(kWmmaSlotA, a);
  wmma_put_fragment(kWmmaSlotB, b);
  wmma_put_fragment(kWmmaSlotC, c);
  const AlignedCall call{"mma_sync", nullptr, 0, -1};
  if (warp_aligned(call, site)) wmma_mma(wmma_type<T>(), FragA::num_elements, site);
  wmma_get_fragment(d);
}

}  // namespace nvcuda::wmma
