// Shared-memory numbers that host code needs too (dispatchers, reports), without the CUDA
// dialect: common/shared_memory.cuh has the device query and the opt-in.
#pragma once

#include <cstddef>

namespace wb {

/// Dynamic shared memory any launch may use without opting in: 48 KiB on every CUDA device
/// since sm_20, and in the simulator.
inline constexpr std::size_t kDefaultDynamicSharedBytes = 48 * 1024;

/// The shared memory an SM keeps back for each block it holds: 1 KiB on sm_80 and sm_90, so
/// that an SM has what one block may opt in to plus this (228 KiB on an H100: 227 + 1).
inline constexpr std::size_t kSharedReservedPerBlock = 1024;

/// Whether two blocks using `bytes` of dynamic shared memory each fit on one SM at once,
/// `max_optin` being what one block may opt in to. The row-cached kernels of chapters 03 and 07
/// (a block of 8 warps per row) keep a row in shared memory only while this holds: with a
/// single block per SM, 8 warps, too few loads are in flight to cover the memory's latency, and
/// reading the row twice through L2 is faster (measured on an H100, chapter 03's page).
inline bool two_blocks_fit(std::size_t bytes, std::size_t max_optin) {
  return 2 * (bytes + kSharedReservedPerBlock) <= max_optin + kSharedReservedPerBlock;
}

}  // namespace wb
