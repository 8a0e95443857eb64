// WMMA's warp side: element mapping, per-lane fragment slots and the 16x16x16 product.
#include <cstdio>
#include <string>

#include "common/half.hpp"
#include "common/sim/access_runtime.hpp"
#include "common/sim/wmma_runtime.hpp"

namespace wb::sim {

WmmaCoord wmma_coord(WmmaUse use, unsigned lane, int i) {
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  const int j = i % 8;  // x[8 + j] of a 16-element fragment repeats x[j]
  const int low = j % 2, high = j / 2 % 2, half = j / 4 % 2;
  if (use == WmmaUse::matrix_b) return WmmaCoord{2 * t + low + 8 * high, g + 8 * half};
  return WmmaCoord{g + 8 * high, 2 * t + low + 8 * half};
}

namespace detail {

float fragment_value(WmmaType type, std::uint32_t bits) {
  switch (type) {
    case WmmaType::f16:
      return wb::half_bits_to_float(static_cast<std::uint16_t>(bits));
    case WmmaType::bf16:
      return wb::bf16_bits_to_float(static_cast<std::uint16_t>(bits));
    case WmmaType::f32:
      break;
  }
  float f;
  static_assert(sizeof f == sizeof bits, "float is 32 bits");
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint32_t float_bits(float f) {
  std::uint32_t bits;
  __builtin_memcpy(&bits, &f, sizeof f);
  return bits;
}

namespace {

constexpr int kSlots = 4;
constexpr int kLaneWords = kSlots * kWmmaMaxElements;
constexpr int kTile = 16;

constexpr std::size_t kMaxWarps = kMaxThreadsPerBlock / kWarpSize;

/// Every lane's slots, for the warps of the running block (blocks run one at a time): 256 KiB
/// of static storage, never reallocated. Only this file touches it, with plain loops (no
/// memcpy, which ThreadSanitizer intercepts), and wb_sim is never instrumented, so race mode
/// sees no exchange of fragment data between lanes.
std::uint32_t g_registers[kMaxWarps * kWarpSize * kLaneWords];

std::uint32_t* lane_slot(unsigned warp, unsigned lane, int slot) {
  return g_registers + ((static_cast<std::size_t>(warp) * kWarpSize + lane) * kSlots +
                        static_cast<std::size_t>(slot)) *
                           kWmmaMaxElements;
}

std::uint32_t* my_slot(int slot) {
  return lane_slot(wb_sim_current.warp, wb_sim_current.lane, slot);
}

const char* type_name(WmmaType type) {
  switch (type) {
    case WmmaType::f16:
      return "__half";
    case WmmaType::bf16:
      return "__nv_bfloat16";
    case WmmaType::f32:
      break;
  }
  return "float";
}

/// Gathers the warp's fragments of one use from `slot` into a 16x16 value tile, checking that
/// the two copies of an element in a 16-element fragment agree.
void gather(WmmaUse use, WmmaType type, int elements, int slot, const char* what, Site site,
            float* tile) {
  const unsigned warp = wb_sim_current.warp;
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    const std::uint32_t* x = lane_slot(warp, lane, slot);
    for (int i = 0; i < elements; ++i) {
      const WmmaCoord c = wmma_coord(use, lane, i);
      if (i >= 8 && x[i] != x[i - 8]) {
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "mma_sync at %s: lane %u's %s fragment holds %s(%d,%d) twice, as x[%d] = "
                      "%g and x[%d] = %g: the copies differ, so the product is unspecified on a "
                      "GPU (the element mapping is; change every element of a fragment alike)",
                      site_string(site).c_str(), lane, type_name(type), what, c.row, c.col, i - 8,
                      static_cast<double>(fragment_value(type, x[i - 8])), i,
                      static_cast<double>(fragment_value(type, x[i])));
        warp_fault(lane, Fault::Kind::invalid_argument, buf);
      }
      tile[c.row * kTile + c.col] = fragment_value(type, x[i]);
    }
  }
}

}  // namespace

void wmma_check_memory(const char* name, const void* ptr, unsigned ldm, std::size_t element_bytes,
                       Site site) {
  const RuntimeScope runtime;
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  char buf[512];
  if (address % 32 != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s at %s: pointer %p is not 256-bit (32-byte) aligned, as WMMA requires "
                  "(cudaMalloc and wb::DeviceBuffer give 256 bytes; a __shared__ tile needs "
                  "__align__(32), and every row offset a multiple of 32 bytes)",
                  name, site_string(site).c_str(), ptr);
    warp_fault(wb_sim_current.lane, Fault::Kind::invalid_argument, buf);
  }
  if ((static_cast<std::size_t>(ldm) * element_bytes) % 16 != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s at %s: ldm %u is not a multiple of 16 bytes (%zu elements of %zu bytes), "
                  "as WMMA requires",
                  name, site_string(site).c_str(), ldm, 16 / element_bytes, element_bytes);
    warp_fault(wb_sim_current.lane, Fault::Kind::invalid_argument, buf);
  }
}

std::uint32_t* warp_lane_slot(unsigned lane, int slot) {
  return lane_slot(wb_sim_current.warp, lane, slot);
}

// volatile keeps the compiler from turning these loops into memcpy calls.
void wmma_put(int slot, const std::uint32_t* bits, int n) {
  const RuntimeScope runtime;
  volatile std::uint32_t* x = my_slot(slot);
  for (int i = 0; i < n; ++i) x[i] = bits[i];
}

void wmma_get(int slot, std::uint32_t* bits, int n) {
  const RuntimeScope runtime;
  const volatile std::uint32_t* x = my_slot(slot);
  for (int i = 0; i < n; ++i) bits[i] = x[i];
}

void wmma_tile_to_lanes(WmmaUse use, int elements, const std::uint32_t* tile) {
  const RuntimeScope runtime;
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    std::uint32_t* x = lane_slot(wb_sim_current.warp, lane, kWmmaSlotOut);
    for (int i = 0; i < elements; ++i) {
      const WmmaCoord c = wmma_coord(use, lane, i);
      x[i] = tile[c.row * kTile + c.col];
    }
  }
}

void wmma_lanes_to_tile(std::uint32_t* tile) {
  const RuntimeScope runtime;
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    const std::uint32_t* x = lane_slot(wb_sim_current.warp, lane, kWmmaSlotC);
    for (int i = 0; i < 8; ++i) {
      const WmmaCoord c = wmma_coord(WmmaUse::accumulator, lane, i);
      tile[c.row * kTile + c.col] = x[i];
    }
  }
}

void wmma_mma(WmmaType ab, int elements, Site site) {
  const RuntimeScope runtime;
  float a[kTile * kTile], b[kTile * kTile], c[kTile * kTile];
  gather(WmmaUse::matrix_a, ab, elements, kWmmaSlotA, "A", site, a);
  gather(WmmaUse::matrix_b, ab, elements, kWmmaSlotB, "B", site, b);
  gather(WmmaUse::accumulator, WmmaType::f32, 8, kWmmaSlotC, "C", site, c);
  on_mma(kTile, kTile, kTile);
  std::uint32_t d[kTile * kTile];
  for (int m = 0; m < kTile; ++m) {
    for (int n = 0; n < kTile; ++n) {
      float acc = c[m * kTile + n];
      // a * b is exact in float (11 + 11 or 8 + 8 significand bits), so a fused multiply-add
      // would give the same sum: only the k-order additions round.
      for (int k = 0; k < kTile; ++k) acc += a[m * kTile + k] * b[k * kTile + n];
      d[m * kTile + n] = float_bits(acc);
    }
  }
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    std::uint32_t* x = lane_slot(wb_sim_current.warp, lane, kWmmaSlotOut);
    for (int i = 0; i < 8; ++i) {
      const WmmaCoord co = wmma_coord(WmmaUse::accumulator, lane, i);
      x[i] = d[co.row * kTile + co.col];
    }
  }
}

}  // namespace detail
}  // namespace wb::sim
