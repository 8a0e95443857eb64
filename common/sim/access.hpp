// Per-access instrumentation of the simulator: memcheck, initcheck and the profile counters.
//
// A kernel library compiled for an *instrumented twin* (wb_sim_instrumented_variant() in
// common/sim/WbSimTwins.cmake) has every load and store of its kernels reported to the
// simulator, through the calls GCC's -fsanitize=thread inserts (common/sim/access_hooks.cpp
// answers them instead of ThreadSanitizer's runtime). Each access is classified as the
// running thread's own stack (registers and local memory: ignored), shared memory (the
// launch's dynamic bytes or a kernel's static __shared__ array), a device buffer, or the
// program's static data (constants); then
//   - memcheck: an access outside all of them, or past the end of the buffer or shared array it
//     starts in, is a Fault naming the kernel, block, thread, address, the buffer it missed and
//     the source line;
//   - initcheck: a read of device-buffer or shared-memory bytes that nothing wrote (no upload,
//     no kernel store, not since the block started for shared memory) is a Fault too;
//   - profile mode (start_profile / stop_profile): bytes, warp-wide requests, 32-byte sectors
//     of global accesses and bank-conflict wavefronts of shared accesses, per launch, per
//     buffer and per source line.
// Ordinary sim builds and race mode have no instrumentation and pay nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/sim/types.hpp"

namespace wb::sim {

/// True in a binary whose kernels are instrumented (an instrumented twin).
bool instrumented();

/// True in a race-mode binary: linked with ThreadSanitizer, which watches the simulator's
/// fibers (the race twins of the test binaries).
bool race_mode();

/// Names a device buffer in memcheck messages and profiles ("x", "q", ...). No-op for memory
/// the simulator does not know.
void label_device_buffer(const void* ptr, const char* name);

/// Accesses of one kind (global or shared, loads or stores), summed over a launch or a line.
struct AccessCounts {
  std::uint64_t bytes = 0;     ///< bytes the lanes asked for
  std::uint64_t requests = 0;  ///< warp-wide requests: the k-th execution of one instruction
                               ///< by the lanes of a warp
  /// Global: distinct 32-byte sectors each request touched. Shared: wavefronts, the passes the
  /// banks need (a request's 32 lanes in phases of 128 bytes; in each phase, the most distinct
  /// 4-byte words any one bank holds).
  std::uint64_t units = 0;
  /// Shared only: wavefronts without bank conflicts (one per phase that has an access).
  std::uint64_t ideal_units = 0;

  AccessCounts& operator+=(const AccessCounts& o);
};

/// The four kinds of access of a launch or of a source line.
struct TrafficCounts {
  AccessCounts global_load, global_store, shared_load, shared_store;
  TrafficCounts& operator+=(const TrafficCounts& o);
};

/// Global bytes moved to and from one device buffer by a launch.
struct BufferTraffic {
  std::string name;          ///< its label, or "buffer #n"
  std::size_t size = 0;      ///< bytes
  std::uint64_t loaded = 0;  ///< bytes read by the kernel
  std::uint64_t stored = 0;  ///< bytes written by the kernel
};

/// What one source line of a kernel moved (all instructions compiled from it).
struct LineTraffic {
  std::string where;  ///< file:line, relative to the project root
  TrafficCounts counts;
};

/// One global-memory access of one thread, in the order the simulator ran them (blocks one
/// after another; a block's threads interleaved as its fibers ran): what the pages' tile-order
/// figures are drawn from.
struct GlobalAccess {
  std::uint32_t block = 0;   ///< linear block index: x fastest, then y, then z
  std::uint32_t thread = 0;  ///< linear thread index in the block
  int buffer = 0;            ///< index into LaunchProfile::buffers
  std::uint64_t offset = 0;  ///< bytes from the start of the buffer
  std::uint32_t bytes = 0;
  bool store = false;
};

/// One lane's part of a shared-memory request, in a traced launch: what the pages' bank maps
/// are drawn from.
struct SharedAccess {
  std::uint32_t request = 0;  ///< the launch's shared requests, numbered as they completed
  std::uint32_t block = 0;    ///< linear block index
  std::uint32_t warp = 0;     ///< warp of the block
  std::uint32_t lane = 0;
  std::uint32_t phase = 0;   ///< the 128-byte pass of the banks that serves this lane's part
  std::uint64_t offset = 0;  ///< bytes from the start of the __shared__ array or dynamic memory
  std::uint32_t bytes = 0;
  bool store = false;
  bool ldmatrix = false;  ///< the 16-byte row this lane gave an ldmatrix, not a load of its own
};

/// What profile mode recorded for one launch.
struct LaunchProfile {
  std::string kernel;
  dim3 grid, block;
  std::size_t dynamic_shared_bytes = 0;
  TrafficCounts counts;
  std::vector<BufferTraffic> buffers;  ///< in the order the launch first touched them
  std::vector<LineTraffic> lines;      ///< sorted by global bytes, most first
  std::uint64_t barriers = 0;          ///< __syncthreads passed, summed over blocks
  std::uint64_t mma_flops = 0;         ///< 2 m n k per warp-wide WMMA mma_sync
  std::vector<GlobalAccess> trace;     ///< every global access, when start_profile was asked
  std::vector<SharedAccess> shared_trace;  ///< every shared request's lanes, likewise
};

/// Starts recording every launch (needs an instrumented binary; throws std::logic_error
/// otherwise). Recording also groups accesses into requests, which costs time. With
/// `trace_global`, every global access and every lane of every shared request (warp-wide ones:
/// not WMMA tile operations) is kept too (LaunchProfile::trace, shared_trace): for tiny launches.
void start_profile(bool trace_global = false);
/// Stops recording and returns what the launches since start_profile() moved.
std::vector<LaunchProfile> stop_profile();

}  // namespace wb::sim
