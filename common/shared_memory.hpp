// Shared-memory numbers that host code needs too (dispatchers, reports), without the CUDA
// dialect: common/shared_memory.cuh has the device query and the opt-in.
#pragma once

#include <cstddef>

namespace wb {

/// Dynamic shared memory any launch may use without opting in: 48 KiB on every CUDA device
/// since sm_20, and in the simulator.
inline constexpr std::size_t kDefaultDynamicSharedBytes = 48 * 1024;

}  // namespace wb
