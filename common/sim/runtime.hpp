// The simulator's runtime interface: launching a grid, faults, and the calls that the
// dialect (sim.hpp) makes for barriers and warp collectives.
//
// A launch runs every block of the grid, one after another, on the calling OS thread. The
// threads of a block are fibers (own stacks, cooperative switches) so that a kernel can
// stop at __syncthreads() in the middle of its body; a deterministic round-robin scheduler
// runs each runnable thread until it blocks or exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/sim/types.hpp"
#include "common/warp.hpp"

/// What the simulator is running right now; one instance, readable from gdb:
///   (gdb) break softmax.cuh:42 if wb_sim_current.thread.x == 3 && wb_sim_current.block.x == 2
/// `active` is 0 outside a kernel (then the other fields are stale).
extern "C" struct WbSimCurrent {
  uint3 thread;      ///< threadIdx of the running CUDA thread
  uint3 block;       ///< blockIdx of the running block
  dim3 block_dim;    ///< blockDim of the launch
  dim3 grid_dim;     ///< gridDim of the launch
  unsigned linear;   ///< linear thread id in the block (x fastest)
  unsigned warp;     ///< linear / 32
  unsigned lane;     ///< linear % 32
  int active;        ///< 1 while a kernel thread runs, else 0
  const char* kernel;  ///< the running kernel's name
} wb_sim_current;

namespace wb::sim {

/// CUDA's hardware limits for an sm_90-class device (H100), which the simulator enforces.
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDimX = 1024;
inline constexpr unsigned kMaxBlockDimY = 1024;
inline constexpr unsigned kMaxBlockDimZ = 64;
inline constexpr unsigned kMaxGridDimX = 2147483647u;  // 2^31 - 1
inline constexpr unsigned kMaxGridDimYZ = 65535;
/// Dynamic shared memory a launch may use without opting in (cudaFuncSetAttribute).
inline constexpr std::size_t kDefaultMaxDynamicSharedBytes = 48 * 1024;
/// The most a kernel may opt in to on sm_90 (cudaDevAttrMaxSharedMemoryPerBlockOptin).
inline constexpr std::size_t kMaxDynamicSharedBytesOptIn = 227 * 1024;

/// A kernel broke a CUDA rule (or a launch was invalid). what() is one line that names the
/// kernel, and for faults inside a kernel the block, the thread and the source location.
class Fault : public std::runtime_error {
 public:
  enum class Kind {
    launch_configuration,  ///< block/grid shape out of range: "invalid configuration argument"
    shared_memory,         ///< more dynamic shared memory than the kernel may use
    barrier_divergence,    ///< __syncthreads reached by only part of the block
    warp_collective,       ///< a warp collective that cannot complete or has no defined result
    kernel_exception,      ///< a C++ exception escaped a kernel thread
    invalid_argument,      ///< a bad argument to a simulator call (like cudaErrorInvalidValue)
    memory_access,         ///< memcheck: an access outside device buffers and shared memory
    uninitialized_read,    ///< initcheck: a read of device or shared memory nothing wrote
  };
  Fault(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

/// The running CUDA thread (block, thread, kernel), or nullptr outside a kernel.
const WbSimCurrent* current();

/// The current block's dynamic shared memory: exactly the launch's `shared_bytes`, heap
/// allocated (so AddressSanitizer sees overruns) and 1024-byte aligned. Its contents at block
/// start are 0xff bytes (NaN as float), not zeros, as real shared memory is uninitialized.
unsigned char* dynamic_shared_bytes();

/// The order in which launches run their blocks. CUDA promises none; the simulator runs them
/// one after another, by default in blockIdx order (x fastest). `reverse` runs the last block
/// first: a kernel whose result depends on the order (float atomics summed across blocks, a
/// block reading what another block of the launch wrote) shows it when run both ways. Applies
/// to later launches.
enum class BlockOrder { forward, reverse };
void set_block_order(BlockOrder order);
BlockOrder block_order();

namespace detail {
using KernelKey = void (*)();
void set_max_dynamic_shared_bytes(KernelKey kernel, const char* name, std::size_t bytes);
}  // namespace detail

/// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): lets
/// later launches of `kernel` use up to `bytes` of dynamic shared memory (at most 227 KiB).
template <typename... P>
void set_max_dynamic_shared_bytes(void (*kernel)(P...), std::size_t bytes,
                                  const char* name = "kernel") {
  detail::set_max_dynamic_shared_bytes(reinterpret_cast<detail::KernelKey>(kernel), name, bytes);
}

namespace detail {
std::string pretty_kernel_name(const char* pretty_function);
}  // namespace detail

/// A readable name for a kernel given as a template argument, e.g.
/// "wb::ch01::softmax_block_kernel<256>" (anonymous namespaces left out).
template <auto Kernel>
const char* kernel_name() {
  static const std::string name = detail::pretty_kernel_name(__PRETTY_FUNCTION__);
  return name.c_str();
}

namespace detail {
/// Runs the grid; `invoke(ctx)` runs the kernel body for the current thread.
/// `ctx` (`ctx_bytes` long) holds the kernel's arguments, which every thread reads.
void launch(const char* name, KernelKey key, dim3 grid, dim3 block, std::size_t shared_bytes,
            void (*invoke)(void*), void* ctx, std::size_t ctx_bytes);
}  // namespace detail

/// Runs `fn<<<grid, block, shared_bytes>>>(args...)` on the CPU and returns when the whole
/// grid has finished. Throws Fault on an invalid launch or when a thread breaks a rule; the
/// simulator stays usable afterwards.
namespace detail {
template <typename Call, std::size_t... I>
void invoke_kernel(void* ctx, std::index_sequence<I...>) {
  auto* call = static_cast<Call*>(ctx);
  // Every CUDA thread gets its own copy of the parameters (they are by-value parameters of
  // the kernel), as every GPU thread reads them from the launch.
  call->fn(std::get<I>(call->args)...);
}
}  // namespace detail

/// Runs `fn<<<grid, block, shared_bytes>>>(args...)` on the CPU and returns when the whole
/// grid has finished. Throws Fault on an invalid launch or when a thread breaks a rule; the
/// simulator stays usable afterwards.
template <typename... P, typename... A>
void launch(const char* name, void (*fn)(P...), dim3 grid, dim3 block, std::size_t shared_bytes,
            A... args) {
  static_assert(sizeof...(P) == sizeof...(A), "wrong number of kernel arguments");
  struct Call {
    void (*fn)(P...);
    std::tuple<std::decay_t<P>...> args;
  };
  Call call{fn, std::tuple<std::decay_t<P>...>(static_cast<std::decay_t<P>>(args)...)};
  detail::launch(
      name, reinterpret_cast<detail::KernelKey>(fn), grid, block, shared_bytes,
      [](void* ctx) { detail::invoke_kernel<Call>(ctx, std::index_sequence_for<P...>{}); },
      &call, sizeof call);
}

namespace detail {

/// Where a barrier or collective was called from (file:line of the kernel source).
struct Site {
  const char* file;
  int line;
};

enum class BarrierOp { sync, count, all, any };
enum class ShuffleMode { idx, up, down, bfly };
enum class VoteOp { ballot, any, all };

/// __syncthreads and its reducing variants; returns the reduction (count / and / or).
int block_barrier(BarrierOp op, int predicate, Site site);
/// __syncwarp(mask).
void warp_barrier(unsigned mask, Site site);
/// A 32- or 64-bit shuffle of `bits` (the value's object representation).
std::uint64_t warp_shuffle(ShuffleMode mode, unsigned mask, std::uint64_t bits, int lane_or_delta,
                           int width, const char* name, Site site);
/// __ballot_sync / __any_sync / __all_sync.
unsigned warp_vote(VoteOp op, unsigned mask, int predicate, Site site);

/// One lane's arguments to a warp-wide WMMA operation; every lane must pass the same ones.
struct AlignedCall {
  const char* name;  ///< "load_matrix_sync", "mma_sync", "store_matrix_sync"
  const void* ptr;   ///< the memory operand, or nullptr
  unsigned ldm;      ///< its leading dimension, in elements
  int layout;        ///< 0 row-major, 1 column-major, -1 none
};

/// A warp-wide `.aligned` operation (WMMA): all 32 lanes of the warp must execute this same
/// call (same source line, same arguments), or the launch faults naming the lane that is
/// missing, has exited, diverged or passed different arguments. Creates no happens-before
/// edge in race mode, like the shuffles. Returns true in exactly one lane, the last to arrive:
/// that lane performs the operation for the warp before any other lane runs on.
bool warp_aligned(const AlignedCall& call, Site site);

/// Named barriers per block (bar.sync / bar.arrive ids 1-15; 0 is __syncthreads'), and the
/// threads of a warpgroup (warps 4k to 4k + 3), Hopper's unit of wgmma and setmaxnreg.
inline constexpr unsigned kNamedBarriers = 16;
inline constexpr unsigned kWarpgroupThreads = 128;

/// bar.sync (`wait`) or bar.arrive on named barrier `id` over `threads` threads: completes when
/// that many have arrived (whole warps, .aligned); bar.sync waits for it. In race mode every
/// arrival releases what the thread wrote and bar.sync acquires it all.
void named_barrier(unsigned id, unsigned threads, bool wait, Site site);

/// A warpgroup-wide .sync.aligned operation (wgmma.*, setmaxnreg): all 128 threads of the
/// calling thread's warpgroup must execute this same call (same name and line) or the launch
/// faults naming the warp that does not. Returns true in the last thread to arrive, which
/// performs the operation for the warpgroup before any other thread of it runs on.
bool warpgroup_aligned(const char* name, Site site);

/// The running thread polled mbarrier `object` for the phase of parity `parity` at `site`
/// (operation `op`) and it has not completed: it yields until the next sweep. When a sweep
/// finds every thread polling again with nothing changed, the block is deadlocked, and the
/// fault says why the phase cannot complete (describe_mbarrier_wait, hopper_runtime.hpp).
void poll_yield(const char* op, const void* object, unsigned parity, Site site);

/// The running launch's dynamic shared memory size in bytes (dynamic_shared_bytes() is its start).
std::size_t dynamic_shared_size();

/// Something a polling thread may be waiting for changed (an mbarrier arrival, a transaction).
void note_event();

/// Ends the launch with a fault attributed to lane `lane` of the running thread's warp (the
/// message is prefixed with the kernel, block and that lane's thread); does not return.
[[noreturn]] void warp_fault(unsigned lane, Fault::Kind kind, const char* what);

/// file:line of a call site, relative to the project root (for fault messages).
std::string site_string(Site site);

}  // namespace detail
}  // namespace wb::sim
