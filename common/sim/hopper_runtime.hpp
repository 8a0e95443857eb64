// The simulator's side of the Hopper wrappers (common/sim/hopper.hpp): mbarrier state, TMA
// copies and tensor maps, wgmma's asynchronous groups, setmaxnreg and the async proxy. Compiled
// into wb_sim, which race mode does not instrument: the async proxy's accesses are announced to
// ThreadSanitizer explicitly, as a fiber of their own (hopper.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/sim/runtime.hpp"
#include "common/sim/wmma_runtime.hpp"

namespace wb::sim::detail {

// ---- mbarrier ---------------------------------------------------------------------------------

void mbarrier_init(std::uint64_t* bar, unsigned arrivals, Site site);
/// One arrival (after adding `tx_bytes` to the transaction count, arrive.expect_tx); returns
/// the state token (the phase it arrived on).
std::uint64_t mbarrier_arrive(std::uint64_t* bar, unsigned tx_bytes, Site site);
/// test_wait / try_wait .parity: true when the phase of parity `parity` has completed (the
/// barrier's current phase has the other parity). When it has not, the thread yields first
/// (poll_yield), so that a spinning loop lets the others run and a wait that can never complete
/// is reported as a deadlock.
bool mbarrier_wait(std::uint64_t* bar, unsigned parity, const char* op, Site site);
/// Why a thread polling `bar` for parity `parity` can never pass: for the deadlock report.
std::string describe_mbarrier_wait(const void* bar, unsigned parity);

// ---- TMA --------------------------------------------------------------------------------------

/// The simulator's tensor map: what cuTensorMapEncodeTiled records, in the 128 bytes of a
/// TensorMap. Dimension 0 is the innermost (contiguous) one.
struct SimTensorMap {
  std::uint32_t magic;  ///< kTensorMapMagic once encoded
  std::uint32_t rank;
  std::uint32_t element_bytes;
  std::uint32_t swizzle_bytes;  ///< 0 (none), 32, 64 or 128
  const unsigned char* global;
  std::uint64_t sizes[3];    ///< elements per dimension
  std::uint64_t strides[3];  ///< bytes between consecutive indices (strides[0]: element_bytes)
  std::uint32_t box[3];      ///< elements per dimension of the box
};
inline constexpr std::uint32_t kTensorMapMagic = 0x544d4150u;  // "TMAP"

/// Checks the arguments as cuTensorMapEncodeTiled does and fills `out` (throws
/// std::invalid_argument naming the limit).
void encode_sim_tensor_map(SimTensorMap& out, const void* global, std::uint32_t element_bytes,
                           int rank, const std::uint64_t* sizes, const std::uint64_t* strides,
                           const std::uint32_t* box, unsigned swizzle_bytes);
/// cp.async.bulk.tensor load: the box at `coords` into `dst`, completing on `bar`.
void tma_load(void* dst, const void* map, const int* coords, int rank, std::uint64_t* bar,
              Site site);
/// cp.async.bulk.tensor store: the box in `src` to the tensor at `coords`, in the thread's
/// open bulk group.
void tma_store(const void* map, const int* coords, int rank, const void* src, Site site);
void tma_store_commit();
/// cp.async.bulk.wait_group.read N.
void tma_store_wait(int keep, Site site);
/// fence.proxy.async: this thread's ordinary shared-memory stores so far are visible to the
/// async proxy (race mode: released to it).
void fence_proxy_async();

// ---- setmaxnreg and wgmma ----------------------------------------------------------------------

void setmaxnreg(bool inc, int registers, Site site);

/// The matrix descriptor of `tile` (in the block's dynamic shared memory: the simulator's shared
/// window, whose addresses are offsets from its start).
std::uint64_t make_smem_descriptor(const void* tile, unsigned swizzle_field, unsigned leading_bytes,
                                   unsigned stride_bytes, Site site);
void wgmma_fence(Site site);
/// One thread's part of wgmma.mma_async m64nNk16: `d` its N/2 accumulators; `a_regs` its 4 A
/// registers (nullptr: A from the descriptor `desc_a`); majors 0 (K) or 1 (MN).
struct WgmmaCall {
  WmmaType type;
  int n;
  std::uint64_t desc_a, desc_b;
  const std::uint32_t* a_regs;
  int major_a, major_b;
  bool accumulate;
  float* d;
};
void wgmma_mma_async(const WgmmaCall& call, Site site);
void wgmma_commit_group(Site site);
void wgmma_wait_group(int keep, Site site);

/// Race mode's happens-before objects that order blocks (runtime.cpp): a fiber acquires the
/// start before it runs and releases the end whenever it stops, so the launching thread (which
/// frees the shared memory, say) comes after everything the block did.
void* block_start_sync();
void* block_end_sync();

/// A block starts: no mbarrier, copy, store group or wgmma group carries over.
void hopper_block_begin();

}  // namespace wb::sim::detail
