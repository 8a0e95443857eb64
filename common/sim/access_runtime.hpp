// The simulator's side of the per-access instrumentation (common/sim/access.hpp): what the
// scheduler, the device buffers, WMMA and the instrumentation hooks call. Internal to wb_sim
// and common/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/sim/runtime.hpp"

namespace wb::sim::detail {

/// printf into a string (at most 1023 characters): the simulator's fault messages.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Set by the instrumentation's module constructors (__tsan_init) before main().
void set_instrumented();

// ---- Device memory (common/buffer.cpp) --------------------------------------------------

/// A device buffer of `bytes` at `ptr` came into being; its bytes are unwritten.
void note_device_alloc(const void* ptr, std::size_t bytes);
void note_device_free(const void* ptr);
/// The host wrote [ptr, ptr + bytes) of a device buffer (an upload or a fill).
void note_device_write(const void* ptr, std::size_t bytes);

// ---- The scheduler (runtime.cpp) -----------------------------------------------------------

struct LaunchInfo {
  const char* kernel;
  dim3 grid, block;
  unsigned char* dynamic_shared;
  std::size_t dynamic_shared_bytes;
  const void* params;  ///< the launch's copy of the kernel arguments, which every thread reads
  std::size_t params_bytes;
};
void access_launch_begin(const LaunchInfo& launch);
/// A block starts: its shared memory is unwritten again.
void access_block_begin();
/// The running thread's stack (for telling local memory from the rest).
void access_thread_stack(const void* lo, const void* hi);
/// A __syncthreads completed (counted in profiles).
void access_barrier();
/// The block ended (also after a fault): requests still open are closed.
void access_block_end();
/// The launch ended; `faulted` drops what a profile recorded of it.
void access_launch_end(bool faulted);
/// Marks the simulator's own code running on a kernel thread (a barrier, a shuffle, WMMA, a
/// fault message). Inline and template functions are shared between the kernels' instrumented
/// translation units and wb_sim (the linker keeps one copy of each std::string member, say),
/// so instrumented code also runs on the simulator's behalf: its accesses are not the kernel's.
struct RuntimeScope {
  RuntimeScope();
  ~RuntimeScope();
  RuntimeScope(const RuntimeScope&) = delete;
  RuntimeScope& operator=(const RuntimeScope&) = delete;
};
/// Race mode: the running thread's memory accesses are not checked while it lives (its
/// synchronization still is): the simulator's own bookkeeping in uninstrumented code, whose
/// library calls (memcpy, malloc) ThreadSanitizer would otherwise see. A fault closes it.
class IgnoreAccesses {
 public:
  IgnoreAccesses();
  ~IgnoreAccesses();
  IgnoreAccesses(const IgnoreAccesses&) = delete;
  IgnoreAccesses& operator=(const IgnoreAccesses&) = delete;

 private:
  bool active_ = false;
};
/// True inside a RuntimeScope of the running thread.
bool in_runtime();
/// Lanes of warp `warp` of the running block that exist and have not exited.
unsigned live_lanes(unsigned warp);

// ---- Accesses ------------------------------------------------------------------------------

/// One lane's access, reported by an instrumentation hook: `pc` is the return address into
/// the instrumented code, from which the source line is found.
void on_access(const void* address, std::size_t bytes, bool store, const void* pc);

/// A warp-wide 16x16 tile access of WMMA (load_matrix_sync, store_matrix_sync), made for the
/// warp by one lane: checked and counted as the hardware issues it, 16-byte rows of 8 at a
/// time (what ldmatrix does), rows `ld_bytes` apart.
struct TileAccess {
  const void* base;
  std::size_t row_bytes;  ///< 16 elements
  std::size_t ld_bytes;   ///< leading dimension in bytes
  bool store;
  Site site;
};
void on_tile_access(const TileAccess& tile);
/// The instrumented element accesses between begin and end are the tile's own (checked, not
/// counted again).
void begin_tile_elements();
void end_tile_elements();
/// A warp-wide ldmatrix .x4 made for the warp by one lane: 32 rows of 16 bytes, lane l's row
/// address in rows[l]; counted as the hardware serves it, one phase per 8x8 matrix.
void on_ldmatrix(const void* const (&rows)[32], Site site);
/// A warp-wide mma_sync of m n k (counted in profiles).
void on_mma(int m, int n, int k);

/// An access of the async proxy (a TMA box's global rows or shared bytes, wgmma's operand
/// reads), for the instruction `what` issued at `site`: its parts (address, bytes) grouped in
/// the phases the hardware serves (wgmma: one core matrix of 8 rows of 16 bytes each).
/// Instrumented builds check every part (memcheck: inside the dynamic shared memory or one
/// device buffer; initcheck: reads of written bytes only; stores mark their bytes written) and
/// count them as one request at `site` in profiles. Other builds: nothing.
void on_async_access(const std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>>& phases,
                     bool store, Site site, const char* what);
/// The async proxy wrote [p, p + bytes) of shared memory (a TMA box landed): initcheck's flags.
void note_async_write(const void* p, std::size_t bytes);

/// Where `address` lies in the running launch of an instrumented build: shared memory (the
/// dynamic shared memory or a __shared__ array), global memory (a device buffer), or unknown
/// (not instrumented, not in a launch, local memory, a constant). Memory a kernel may not
/// touch at all is a memcheck fault here.
enum class AddressSpace { unknown, global, shared };
AddressSpace address_space(const void* address);

}  // namespace wb::sim::detail
