// Hopper's asynchronous machinery in the simulator: mbarriers, TMA copies, wgmma groups,
// setmaxnreg and the async proxy (common/sim/hopper.hpp says what each makes visible).
//
// Everything runs between fiber switches on the launching OS thread, so nothing needs a lock.
// The state of a block (its mbarriers, copies in flight, wgmma groups) is dropped when the next
// block starts, as shared memory is.
//
// mbarrier (PTX ISA, "mbarrier"): a phase completes when its pending arrivals and its
// transaction count both reach zero; then the phase number advances (its parity flips) and the
// pending count is reset. A TMA copy adds its bytes to the phase it lands on; here the copies of
// a phase land together, when a thread observes the phase complete (a wait, or any operation on
// the barrier), so that their destination is NaN until then on every run, not only when a GPU
// happens to be late.
//
// Race mode: the async proxy, which performs TMA copies and reads wgmma's shared-memory
// operands, is a ThreadSanitizer fiber of its own. It sees the CUDA threads' ordinary stores
// only through fence.proxy.async (and a TMA load, through the thread that issues it: a refill
// after the consumers released the buffer); the threads see its writes through the mbarrier
// phase they complete, and its reads through the wgmma or bulk-store wait that covers them.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/sim/access_runtime.hpp"
#include "common/sim/hopper_runtime.hpp"
#include "common/sim/ptx_runtime.hpp"
#include "common/sim/sanitizers.hpp"
#include "common/sim/wgmma_layout.hpp"

namespace wb::sim::detail {
namespace {

[[noreturn]] void fault(Fault::Kind kind, const std::string& what) {
  warp_fault(wb_sim_current.lane, kind, what.c_str());
}

/// The PTX ISA's limits: an mbarrier counts up to 2^20 - 1 arrivals and transaction bytes.
constexpr unsigned kMaxArrivals = (1u << 20) - 1;
constexpr long long kMaxTxBytes = (1ll << 20) - 1;
/// A TMA destination in shared memory is 128-byte aligned (a swizzled one: its pattern's).
constexpr std::uintptr_t kTmaSharedAlignment = 128;
/// 0xff bytes: NaN in every floating type, what an asynchronous destination holds in flight.
constexpr unsigned char kPoison = 0xff;

// ---- The async proxy (race mode) ----------------------------------------------------------------
// Every entry point below runs under an IgnoreScope: what the simulator's own code reads and
// writes (its tables, the copies' bytes, the accumulators it fills) is its business, not the
// kernel's, and ThreadSanitizer's interceptors would otherwise see it. The accesses that are the
// kernel's (a box landing, an operand read) are announced explicitly, as the proxy's.

using IgnoreScope = IgnoreAccesses;

char g_proxy_fence;  // released by fence.proxy.async, acquired by the proxy before it reads
char g_tma_issue;    // released by a thread issuing a TMA load, acquired by the proxy

/// Runs the enclosed annotations (tsan_read, tsan_write, acquire, release) as the async
/// proxy's, to ThreadSanitizer: a fiber of its own, entered and left without synchronizing.
/// Nothing in it may fault (a fault never returns to leave it). Outside race mode, nothing.
/// The proxy's fiber. A new fiber inherits its creator's happens-before, so it is created by the
/// launching thread before the first block runs (hopper_block_begin), never by a CUDA thread,
/// whose view would hide what the proxy must not see.
void* async_proxy() {
  static void* proxy = [] {
    void* f = __tsan_create_fiber(0);
    __tsan_set_fiber_name(f, "async proxy (TMA and wgmma)");
    return f;
  }();
  return proxy;
}

class ProxyScope {
 public:
  ProxyScope() {
    if (!tsan_active()) return;
    from_ = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(async_proxy(), kTsanSwitchNoSync);
    __tsan_acquire(block_start_sync());
  }
  ~ProxyScope() {
    if (from_ == nullptr) return;
    __tsan_release(block_end_sync());
    __tsan_switch_to_fiber(from_, kTsanSwitchNoSync);
  }
  ProxyScope(const ProxyScope&) = delete;
  ProxyScope& operator=(const ProxyScope&) = delete;

 private:
  void* from_ = nullptr;
};

/// Announces an access of the proxy's (inside a ProxyScope, whose fiber checks its accesses).
void tsan_read(const void* p, std::size_t n) {
  if (tsan_active() && __tsan_read_range != nullptr) __tsan_read_range(const_cast<void*>(p), n);
}
void tsan_write(void* p, std::size_t n) {
  if (tsan_active() && __tsan_write_range != nullptr) __tsan_write_range(p, n);
}
void tsan_release(void* p) {
  if (tsan_active()) __tsan_release(p);
}
void tsan_acquire(void* p) {
  if (tsan_active()) __tsan_acquire(p);
}

// ---- Shared memory ---------------------------------------------------------------------------------

/// The block's dynamic shared memory, the simulator's shared window for descriptors and TMA.
struct Window {
  unsigned char* lo;
  std::size_t bytes;
};
Window window() { return Window{dynamic_shared_bytes(), dynamic_shared_size()}; }

bool in_window(const void* p, std::size_t n) {
  const Window w = window();
  const auto* c = static_cast<const unsigned char*>(p);
  return c >= w.lo && c + n <= w.lo + w.bytes && n <= w.bytes;
}

// ---- mbarrier ------------------------------------------------------------------------------------

/// One TMA load in flight: where it lands, what it brings.
struct Copy {
  unsigned char* dst;
  std::vector<unsigned char> data;  // the box as it lands (swizzled, zero-filled)
  Site site;
};

struct Mbarrier {
  unsigned expected = 0;  // arrivals per phase (init's count)
  unsigned pending = 0;   // arrivals the current phase still waits for
  long long tx = 0;       // transaction bytes the current phase still waits for
  std::uint64_t phase = 0;  // phases completed so far: the current one has parity phase % 2
  std::vector<Copy> copies;  // in flight on the current phase
  std::size_t copy_bytes = 0;
  Site init_site{nullptr, 0};
  char sync[2] = {};  // race mode: the arrivals of the phases of parity 0 and 1
};

std::unordered_map<const void*, Mbarrier>& mbarriers() {
  static std::unordered_map<const void*, Mbarrier> m;
  return m;
}

std::string where(Site site) { return site_string(site); }

/// Faults where the memcheck twins can tell that `p` is not in shared memory.
void require_shared(const void* p, const char* op, Site site) {
  if (address_space(p) != AddressSpace::global) return;
  fault(Fault::Kind::memory_access,
        format("memcheck: %s at %s: %p is in global memory, where an mbarrier must be in shared "
               "memory",
               op, where(site).c_str(), p));
}

Mbarrier& initialized(const void* bar, const char* op, Site site) {
  auto it = mbarriers().find(bar);
  if (it == mbarriers().end()) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: the mbarrier at %p was never initialized (mbarrier_init) in this "
                 "block",
                 op, where(site).c_str(), bar));
  }
  return it->second;
}

/// Lands the phase's copies (in the running thread's turn, as the async proxy) and completes
/// the phase if its arrivals and bytes are all in. Returns whether it completed.
bool settle(Mbarrier& b) {
  if (b.pending != 0 || b.tx != static_cast<long long>(b.copy_bytes)) return false;
  if (!b.copies.empty()) {
    for (Copy& c : b.copies) {
      std::memcpy(c.dst, c.data.data(), c.data.size());
      note_async_write(c.dst, c.data.size());
    }
    const ProxyScope proxy;
    for (Copy& c : b.copies) tsan_write(c.dst, c.data.size());
    tsan_release(&b.sync[b.phase % 2]);
  }
  b.copies.clear();
  b.copy_bytes = 0;
  b.tx = 0;
  b.pending = b.expected;
  ++b.phase;
  note_event();
  return true;
}

/// The copies of a phase whose arrivals are all in may not bring more than it expects.
void check_bytes(const Mbarrier& b, const void* bar, const char* op, Site site) {
  if (b.pending != 0 || static_cast<long long>(b.copy_bytes) <= b.tx) return;
  fault(Fault::Kind::invalid_argument,
        format("%s at %s: the copies on the mbarrier at %p bring %zu bytes to phase %" PRIu64
               ", which expects %lld (expect_tx): a box larger than its expect_tx completes the "
               "phase before all of it has landed",
               op, where(site).c_str(), bar, b.copy_bytes, b.phase, b.tx));
}

}  // namespace

void mbarrier_init(std::uint64_t* bar, unsigned arrivals, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  if (reinterpret_cast<std::uintptr_t>(bar) % alignof(std::uint64_t) != 0) {
    fault(Fault::Kind::invalid_argument,
          format("mbarrier_init at %s: the mbarrier at %p is not 8-byte aligned", where(site).c_str(),
                 static_cast<void*>(bar)));
  }
  if (arrivals == 0 || arrivals > kMaxArrivals) {
    fault(Fault::Kind::invalid_argument,
          format("mbarrier_init at %s: %u arrivals; an mbarrier expects 1 to %u", where(site).c_str(),
                 arrivals, kMaxArrivals));
  }
  require_shared(bar, "mbarrier_init", site);
  Mbarrier& b = mbarriers()[bar];
  b = Mbarrier{};
  b.expected = b.pending = arrivals;
  b.init_site = site;
  note_event();
}

std::uint64_t mbarrier_arrive(std::uint64_t* bar, unsigned tx_bytes, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  const char* op = tx_bytes > 0 ? "mbarrier_arrive_expect_tx" : "mbarrier_arrive";
  Mbarrier& b = initialized(bar, op, site);
  settle(b);
  if (b.pending == 0) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: phase %" PRIu64 " of the mbarrier at %p (initialized at %s) has all "
                 "its %u arrivals and waits only for transaction bytes: one arrival too many",
                 op, where(site).c_str(), b.phase, static_cast<void*>(bar),
                 where(b.init_site).c_str(), b.expected));
  }
  if (b.tx + tx_bytes > kMaxTxBytes) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: %lld transaction bytes on one phase; an mbarrier counts at most %lld",
                 op, where(site).c_str(), b.tx + tx_bytes, kMaxTxBytes));
  }
  const std::uint64_t token = b.phase;
  b.tx += tx_bytes;
  --b.pending;
  tsan_release(&b.sync[b.phase % 2]);
  note_event();
  check_bytes(b, bar, op, site);
  // A phase with no copies completes at its last arrival; one with copies when it is observed.
  if (b.copies.empty()) settle(b);
  return token;
}

bool mbarrier_wait(std::uint64_t* bar, unsigned parity, const char* op, Site site) {
  {
    const RuntimeScope runtime;
    const IgnoreScope ignore;
    if (parity > 1) {
      fault(Fault::Kind::invalid_argument,
            format("%s at %s: parity %u; a phase parity is 0 or 1", op, where(site).c_str(),
                   parity));
    }
    Mbarrier& b = initialized(bar, op, site);
    settle(b);
    if (b.phase % 2 != parity) {  // the phase of that parity is the one before the current
      tsan_acquire(&b.sync[parity]);
      return true;
    }
  }
  poll_yield(op, bar, parity, site);
  return false;
}

std::string describe_mbarrier_wait(const void* bar, unsigned parity) {
  const auto it = mbarriers().find(bar);
  if (it == mbarriers().end()) return format("the mbarrier at %p was never initialized", bar);
  const Mbarrier& b = it->second;
  std::string why = format("it waits for phase %" PRIu64 " (parity %u) of the mbarrier at %p "
                           "(initialized at %s for %u arrivals), which ",
                           b.phase, parity, bar, where(b.init_site).c_str(), b.expected);
  if (b.pending > 0) {
    why += format("still expects %u of its %u arrivals", b.pending, b.expected);
    if (b.tx > 0) why += format(" and %lld transaction bytes", b.tx);
  } else {
    why += format("has all its arrivals but expects %lld transaction bytes that no copy brings "
                  "(copies in flight: %zu bytes; expect_tx and the boxes disagree)",
                  b.tx - static_cast<long long>(b.copy_bytes), b.copy_bytes);
  }
  return why;
}

// ---- TMA ----------------------------------------------------------------------------------------------

namespace {

[[noreturn]] void bad_map(const std::string& why) {
  throw std::invalid_argument("encode_tensor_map: " + why);
}

const SimTensorMap& tensor_map(const void* map, const char* op, Site site) {
  const auto* m = static_cast<const SimTensorMap*>(map);
  if (m == nullptr || m->magic != kTensorMapMagic) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: %p is not a tensor map encoded by encode_tensor_map", op,
                 where(site).c_str(), map));
  }
  return *m;
}

/// The swizzle of a TMA box or wgmma operand as the shared window's address bits see it.
WgmmaSwizzle swizzle_of(unsigned swizzle_bytes) {
  switch (swizzle_bytes) {
    case 128: return WgmmaSwizzle::b128;
    case 64: return WgmmaSwizzle::b64;
    case 32: return WgmmaSwizzle::b32;
    default: return WgmmaSwizzle::none;
  }
}

/// Checks a box's place in shared memory: inside the window, 128-byte aligned, a swizzled one
/// on its pattern's boundary (so that the pattern TMA writes is the one a descriptor reads).
void check_box_place(const void* smem, std::size_t bytes, unsigned swizzle_bytes, const char* op,
                     Site site) {
  if (!in_window(smem, bytes)) {
    fault(Fault::Kind::memory_access,
          format("memcheck: %s at %s: the box of %zu bytes at %p is not inside the block's dynamic "
                 "shared memory (%zu bytes at %p), where the simulator's TMA boxes live",
                 op, where(site).c_str(), bytes, smem, window().bytes,
                 static_cast<void*>(window().lo)));
  }
  const std::uintptr_t offset = static_cast<const unsigned char*>(smem) - window().lo;
  const std::uintptr_t align =
      swizzle_bytes == 0 ? kTmaSharedAlignment
                         : wgmma_swizzle_pattern_bytes(swizzle_of(swizzle_bytes));
  if (offset % align != 0) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: the box at shared offset %zu is not %zu-byte aligned, as %s requires",
                 op, where(site).c_str(), static_cast<std::size_t>(offset),
                 static_cast<std::size_t>(align),
                 swizzle_bytes == 0 ? "TMA" : "a swizzled box (its pattern's 8 rows)"));
  }
}

/// Visits the box's rows: `row(r, coords of its first element)` for each of its rows in order.
template <typename Row>
void for_each_box_row(const SimTensorMap& m, Row row) {
  const std::uint32_t rows_y = m.box[1], rows_z = m.rank == 3 ? m.box[2] : 1;
  for (std::uint32_t z = 0; z < rows_z; ++z) {
    for (std::uint32_t y = 0; y < rows_y; ++y) row(z * rows_y + y, y, z);
  }
}

/// The shared-window address of byte `b` of box row `r` (rows packed, the swizzle applied).
std::uintptr_t box_byte_offset(const SimTensorMap& m, std::uintptr_t box_offset, std::size_t r,
                               std::size_t b) {
  const std::size_t row_bytes = std::size_t{m.box[0]} * m.element_bytes;
  const auto linear = static_cast<std::uint32_t>(box_offset + r * row_bytes + b);
  return wgmma_swizzle(linear, swizzle_of(m.swizzle_bytes), 0);
}

/// Whether coordinate c of dimension d lies inside the tensor.
bool inside(const SimTensorMap& m, int d, long long c) {
  return c >= 0 && static_cast<unsigned long long>(c) < m.sizes[d];
}

std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>>& scratch_phases() {
  static std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>> p;
  return p;
}

/// The global parts of a box (one per row inside the tensor, clipped to it) for memcheck,
/// initcheck and the profile.
const std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>>& global_rows(
    const SimTensorMap& m, const int* coords) {
  auto& phases = scratch_phases();
  phases.assign(1, {});
  const long long x0 = coords[0];
  const long long x_lo = std::max<long long>(x0, 0);
  const long long x_hi = std::min<long long>(x0 + m.box[0], static_cast<long long>(m.sizes[0]));
  if (x_lo >= x_hi) return phases;
  for_each_box_row(m, [&](std::size_t, std::uint32_t y, std::uint32_t z) {
    const long long gy = coords[1] + static_cast<long long>(y);
    const long long gz = m.rank == 3 ? coords[2] + static_cast<long long>(z) : 0;
    if (!inside(m, 1, gy) || (m.rank == 3 && !inside(m, 2, gz))) return;
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(m.global) +
                             static_cast<std::uintptr_t>(x_lo) * m.element_bytes +
                             static_cast<std::uintptr_t>(gy) * m.strides[1] +
                             static_cast<std::uintptr_t>(gz) * m.strides[2];
    phases[0].emplace_back(a, static_cast<std::size_t>(x_hi - x_lo) * m.element_bytes);
  });
  return phases;
}

std::size_t box_bytes(const SimTensorMap& m) {
  std::size_t n = m.element_bytes;
  for (std::uint32_t d = 0; d < m.rank; ++d) n *= m.box[d];
  return n;
}

/// Bulk store groups of the running thread: stores issued since the last commit, and the
/// number committed (the wait's race-mode edge covers them all).
struct StoreGroups {
  unsigned committed = 0;
  char done = 0;  // race mode: the proxy's reads of the thread's stores so far
};
std::vector<StoreGroups>& store_groups() {
  static std::vector<StoreGroups> g(kMaxThreadsPerBlock);
  return g;
}

}  // namespace

void encode_sim_tensor_map(SimTensorMap& out, const void* global, std::uint32_t element_bytes,
                           int rank, const std::uint64_t* sizes, const std::uint64_t* strides,
                           const std::uint32_t* box, unsigned swizzle_bytes) {
  constexpr std::uint64_t kMaxStride = 1ull << 40, kMaxSize = 1ull << 32;
  constexpr std::uint32_t kMaxBox = 256, kStrideAlignment = 16;
  if (rank < 2 || rank > 3) bad_map(format("rank %d; the simulator's TMA takes 2-D and 3-D maps", rank));
  if (global == nullptr || reinterpret_cast<std::uintptr_t>(global) % 16 != 0)
    bad_map("the global address must be 16-byte aligned");
  out = SimTensorMap{};
  out.magic = kTensorMapMagic;
  out.rank = static_cast<std::uint32_t>(rank);
  out.element_bytes = element_bytes;
  out.swizzle_bytes = swizzle_bytes;
  out.global = static_cast<const unsigned char*>(global);
  out.strides[0] = element_bytes;
  for (int d = 0; d < rank; ++d) {
    if (sizes[d] == 0 || sizes[d] > kMaxSize)
      bad_map(format("size %" PRIu64 " of dimension %d is outside 1 to 2^32", sizes[d], d));
    if (box[d] == 0 || box[d] > kMaxBox)
      bad_map(format("box size %u of dimension %d is outside 1 to %u", box[d], d, kMaxBox));
    out.sizes[d] = sizes[d];
    out.box[d] = box[d];
    if (d == 0) continue;
    const std::uint64_t s = strides[d - 1];
    if (s % kStrideAlignment != 0 || s >= kMaxStride)
      bad_map(format("stride %" PRIu64 " of dimension %d is not a multiple of 16 below 2^40", s, d));
    out.strides[d] = s;
  }
  const std::uint64_t inner_bytes = std::uint64_t{box[0]} * element_bytes;
  if (inner_bytes % 16 != 0)
    bad_map(format("the box's inner dimension is %" PRIu64 " bytes, not a multiple of 16",
                   inner_bytes));
  if (swizzle_bytes != 0 && inner_bytes > swizzle_bytes)
    bad_map(format("the box's inner dimension is %" PRIu64 " bytes, more than the %u-byte swizzle",
                   inner_bytes, swizzle_bytes));
}

void tma_load(void* dst, const void* map, const int* coords, int rank, std::uint64_t* bar,
              Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  const char* op = rank == 2 ? "tma_load_2d" : "tma_load_3d";
  const SimTensorMap& m = tensor_map(map, op, site);
  if (static_cast<int>(m.rank) != rank) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: the tensor map is %u-D", op, where(site).c_str(), m.rank));
  }
  Mbarrier& b = initialized(bar, op, site);
  settle(b);  // a copy joins the phase in progress, not one that already has all it needs
  const std::size_t bytes = box_bytes(m);
  check_box_place(dst, bytes, m.swizzle_bytes, op, site);
  on_async_access(global_rows(m, coords), /*store=*/false, site, op);
  // The box as it lands: row by row, zeros past the tensor's edge, swizzled.
  auto* lo = static_cast<unsigned char*>(dst);
  const std::uintptr_t box_offset = lo - window().lo;
  Copy c{lo, std::vector<unsigned char>(bytes, 0), site};
  const std::size_t e = m.element_bytes;
  for_each_box_row(m, [&](std::size_t r, std::uint32_t y, std::uint32_t z) {
    const long long gy = coords[1] + static_cast<long long>(y);
    const long long gz = m.rank == 3 ? coords[2] + static_cast<long long>(z) : 0;
    const bool row_inside = inside(m, 1, gy) && (m.rank != 3 || inside(m, 2, gz));
    for (std::uint32_t x = 0; x < m.box[0]; ++x) {
      const long long gx = coords[0] + static_cast<long long>(x);
      if (!row_inside || !inside(m, 0, gx)) continue;
      const unsigned char* src = m.global + static_cast<std::size_t>(gx) * e +
                                 static_cast<std::size_t>(gy) * m.strides[1] +
                                 static_cast<std::size_t>(gz) * m.strides[2];
      // Elements never straddle a 16-byte chunk, so one swizzled address serves the element.
      const std::uintptr_t to = box_offset == 0 && m.swizzle_bytes == 0
                                    ? r * m.box[0] * e + x * e
                                    : box_byte_offset(m, box_offset, r, x * e) - box_offset;
      std::memcpy(c.data.data() + to, src, e);
    }
  });
  // In flight: the destination holds no defined value until the phase lands it. The proxy
  // writes it after what the issuing thread saw (a refill after the consumers' release).
  std::memset(dst, kPoison, bytes);
  tsan_release(&g_tma_issue);
  {
    const ProxyScope proxy;
    tsan_acquire(&g_tma_issue);
    tsan_write(dst, bytes);
  }
  b.copies.push_back(std::move(c));
  b.copy_bytes += bytes;
  note_event();
  check_bytes(b, bar, op, site);
}

void tma_store(const void* map, const int* coords, int rank, const void* src, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  const char* op = rank == 2 ? "tma_store_2d" : "tma_store_3d";
  const SimTensorMap& m = tensor_map(map, op, site);
  if (static_cast<int>(m.rank) != rank) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: the tensor map is %u-D", op, where(site).c_str(), m.rank));
  }
  const std::size_t bytes = box_bytes(m);
  check_box_place(src, bytes, m.swizzle_bytes, op, site);
  const auto* lo = static_cast<const unsigned char*>(src);
  const std::uintptr_t box_offset = lo - window().lo;
  // The proxy reads the box and writes what lies inside the tensor (nothing past its edge).
  on_async_access(std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>>{
                      {{reinterpret_cast<std::uintptr_t>(src), bytes}}},
                  /*store=*/false, site, op);
  const auto rows = global_rows(m, coords);
  on_async_access(rows, /*store=*/true, site, op);
  const std::size_t e = m.element_bytes;
  for_each_box_row(m, [&](std::size_t r, std::uint32_t y, std::uint32_t z) {
    const long long gy = coords[1] + static_cast<long long>(y);
    const long long gz = m.rank == 3 ? coords[2] + static_cast<long long>(z) : 0;
    if (!inside(m, 1, gy) || (m.rank == 3 && !inside(m, 2, gz))) return;
    for (std::uint32_t x = 0; x < m.box[0]; ++x) {
      const long long gx = coords[0] + static_cast<long long>(x);
      if (!inside(m, 0, gx)) continue;
      auto* to = const_cast<unsigned char*>(m.global) + static_cast<std::size_t>(gx) * e +
                 static_cast<std::size_t>(gy) * m.strides[1] +
                 static_cast<std::size_t>(gz) * m.strides[2];
      const std::uintptr_t from = box_byte_offset(m, box_offset, r, x * e) - box_offset;
      std::memcpy(to, lo + from, e);
    }
  });
  const ProxyScope proxy;
  tsan_acquire(&g_proxy_fence);
  tsan_read(src, bytes);
  for (const auto& phase : rows)
    for (const auto& [p, n] : phase) tsan_write(reinterpret_cast<void*>(p), n);
  tsan_release(&store_groups()[wb_sim_current.linear].done);
}

void tma_store_commit() {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  ++store_groups()[wb_sim_current.linear].committed;
}

void tma_store_wait(int keep, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  static_cast<void>(keep);  // the simulator's stores read their box when issued: all are done
  static_cast<void>(site);
  tsan_acquire(&store_groups()[wb_sim_current.linear].done);
}

void fence_proxy_async() {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  tsan_release(&g_proxy_fence);
}

// ---- setmaxnreg ------------------------------------------------------------------------------------

namespace {

/// One thread's part of a warpgroup operation, read by the thread that performs it.
struct WarpgroupArgs {
  WgmmaCall call{};
  int registers = 0;
};
std::vector<WarpgroupArgs>& args() {
  static std::vector<WarpgroupArgs> a(kMaxThreadsPerBlock);
  return a;
}

}  // namespace

void setmaxnreg(bool inc, int registers, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  constexpr int kMin = 24, kMax = 256, kStep = 8;
  const char* op = inc ? "setmaxnreg.inc" : "setmaxnreg.dec";
  if (registers < kMin || registers > kMax || registers % kStep != 0) {
    fault(Fault::Kind::invalid_argument,
          format("%s at %s: %d registers; setmaxnreg takes a multiple of %d from %d to %d", op,
                 where(site).c_str(), registers, kStep, kMin, kMax));
  }
  args()[wb_sim_current.linear].registers = registers;
  if (!warpgroup_aligned(op, site)) return;
  const unsigned first = wb_sim_current.linear / kWarpgroupThreads * kWarpgroupThreads;
  for (unsigned i = first; i < first + kWarpgroupThreads; ++i) {
    if (args()[i].registers == registers) continue;
    fault(Fault::Kind::warp_collective,
          format("%s at %s: thread %u asks for %d registers, thread %u for %d: the whole "
                 "warpgroup must ask for the same count",
                 op, where(site).c_str(), i, args()[i].registers, wb_sim_current.linear,
                 registers));
  }
}

// ---- wgmma -------------------------------------------------------------------------------------------

namespace {

/// One wgmma in flight for a warpgroup.
struct WgmmaOp {
  WgmmaCall call;                    // thread 0's (the descriptors and shape are the warpgroup's)
  std::vector<float*> d;             // each thread's accumulators
  std::vector<std::uint32_t> a;      // [thread][4]: A from registers, copied at the issue
  std::vector<float> c;              // [thread][N/2]: the accumulator it adds to, at the issue
  bool chained = false;              // adds to the result of the op before it on the same d
  unsigned group = 0;
  Site site;
};

struct Warpgroup {
  bool fenced = false;  // a wgmma_fence since the block began or the last wait
  unsigned committed = 0;
  std::deque<WgmmaOp> ops;
  char done = 0;  // race mode: the proxy's operand reads of the groups waited for
};

std::vector<Warpgroup>& warpgroups() {
  static std::vector<Warpgroup> w(kMaxThreadsPerBlock / kWarpgroupThreads);
  return w;
}

Warpgroup& my_warpgroup() { return warpgroups()[wb_sim_current.linear / kWarpgroupThreads]; }
unsigned first_of_warpgroup() {
  return wb_sim_current.linear / kWarpgroupThreads * kWarpgroupThreads;
}

constexpr std::uint32_t kPoisonWord = 0xffffffffu;

/// Reads element (mn, k) of a shared-memory operand through its descriptor.
float operand_element(const WgmmaDescriptor& d, WgmmaMajor major, WmmaType type, int mn, int k) {
  const std::uint32_t address = wgmma_element_address(d, major, mn, k);
  std::uint16_t bits;
  std::memcpy(&bits, window().lo + address, sizeof bits);
  return fragment_value(type, bits);
}

/// The byte addresses (in the window) an operand of `rows` x 16 reads, in core-matrix phases
/// of 8 rows of 16 bytes: what the profile counts and memcheck checks.
void operand_phases(const WgmmaDescriptor& d, WgmmaMajor major, int rows,
                    std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>>& phases) {
  const auto lo = reinterpret_cast<std::uintptr_t>(window().lo);
  if (major == WgmmaMajor::k) {
    for (int r0 = 0; r0 < rows; r0 += kCoreMatrixRows) {
      for (int k0 = 0; k0 < kWgmmaK; k0 += kChunkElements) {
        phases.emplace_back();
        for (int r = r0; r < r0 + static_cast<int>(kCoreMatrixRows); ++r)
          phases.back().emplace_back(lo + wgmma_element_address(d, major, r, k0), kChunkBytes);
      }
    }
  } else {
    for (int m0 = 0; m0 < rows; m0 += kChunkElements) {
      for (int k0 = 0; k0 < kWgmmaK; k0 += kCoreMatrixRows) {
        phases.emplace_back();
        for (int k = k0; k < k0 + static_cast<int>(kCoreMatrixRows); ++k)
          phases.back().emplace_back(lo + wgmma_element_address(d, major, m0, k), kChunkBytes);
      }
    }
  }
}

/// Completes `op`: reads its operands now (as the async proxy) and computes D = A B + C, C as
/// captured at the issue, or (chained) what the registers hold now: the result of the op before
/// it on the same registers, written when that op completed.
void complete(const WgmmaOp& op, std::vector<float>& result,
              std::vector<std::pair<std::uintptr_t, std::size_t>>& reads) {
  constexpr int kM = 64;
  const int n = op.call.n, per_thread = n / 2;
  const WmmaType type = op.call.type;
  const WgmmaDescriptor db = decode_wgmma_descriptor(op.call.desc_b);
  const auto major_b = static_cast<WgmmaMajor>(op.call.major_b);
  std::vector<float> a(kM * kWgmmaK), b(static_cast<std::size_t>(kWgmmaK) * n);
  auto& phases = scratch_phases();
  phases.clear();
  if (op.call.a_regs == nullptr) {
    const WgmmaDescriptor da = decode_wgmma_descriptor(op.call.desc_a);
    const auto major_a = static_cast<WgmmaMajor>(op.call.major_a);
    for (int m = 0; m < kM; ++m)
      for (int k = 0; k < kWgmmaK; ++k) a[m * kWgmmaK + k] = operand_element(da, major_a, type, m, k);
    operand_phases(da, major_a, kM, phases);
  } else {
    for (unsigned i = 0; i < kWarpgroupThreads; ++i) {
      const unsigned warp = i / kWarpSize, lane = i % kWarpSize;
      for (int reg = 0; reg < 4; ++reg) {
        for (int half = 0; half < 2; ++half) {
          const WmmaCoord e = mma_coord(MmaOperand::a, lane, reg, half);
          a[(16 * warp + e.row) * kWgmmaK + e.col] =
              fragment_value(type, op.a[i * 4 + reg] >> (16 * half) & 0xffffu);
        }
      }
    }
  }
  for (int nn = 0; nn < n; ++nn)
    for (int k = 0; k < kWgmmaK; ++k) b[k * n + nn] = operand_element(db, major_b, type, nn, k);
  operand_phases(db, major_b, n, phases);
  on_async_access(phases, /*store=*/false, op.site, "wgmma");
  for (const auto& phase : phases) reads.insert(reads.end(), phase.begin(), phase.end());
  on_mma(kM, n, kWgmmaK);
  result.assign(kWarpgroupThreads * per_thread, 0.f);
  for (unsigned i = 0; i < kWarpgroupThreads; ++i) {
    const unsigned warp = i / kWarpSize, lane = i % kWarpSize;
    const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
    for (int j = 0; j < per_thread; ++j) {
      // d[4i + 0, 1]: row g, columns 8i + 2t (+1); d[4i + 2, 3]: row g + 8 (common/hopper.cuh).
      const int row = 16 * static_cast<int>(warp) + g + 8 * (j % 4 / 2);
      const int col = 8 * (j / 4) + 2 * t + j % 2;
      float acc = 0.f;
      if (op.call.accumulate) acc = op.chained ? op.d[i][j] : op.c[i * per_thread + j];
      // Each product is exact in float; the additions round one at a time, in k order.
      for (int k = 0; k < kWgmmaK; ++k) acc += a[row * kWgmmaK + k] * b[k * n + col];
      result[i * per_thread + j] = acc;
    }
  }
}

}  // namespace

std::uint64_t make_smem_descriptor(const void* tile, unsigned swizzle_field, unsigned leading_bytes,
                                   unsigned stride_bytes, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  if (!in_window(tile, 1)) {
    fault(Fault::Kind::invalid_argument,
          format("make_smem_descriptor at %s: %p is not in the block's dynamic shared memory, "
                 "where the simulator's wgmma operands live",
                 where(site).c_str(), tile));
  }
  const auto address = static_cast<unsigned>(static_cast<const unsigned char*>(tile) - window().lo);
  const auto field = [](unsigned bytes) { return std::uint64_t{(bytes & 0x3ffffu) >> 4}; };
  return field(address) | field(leading_bytes) << 16 | field(stride_bytes) << 32 |
         std::uint64_t{swizzle_field} << 62;
}

void wgmma_fence(Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  if (warpgroup_aligned("wgmma_fence", site)) my_warpgroup().fenced = true;
}

void wgmma_mma_async(const WgmmaCall& call, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  args()[wb_sim_current.linear].call = call;
  const char* op = call.a_regs == nullptr ? "wgmma_ss" : "wgmma_rs";
  if (!warpgroup_aligned(op, site)) return;
  Warpgroup& w = my_warpgroup();
  const unsigned first = first_of_warpgroup();
  if (!w.fenced) {
    fault(Fault::Kind::warp_collective,
          format("%s at %s: no wgmma_fence() since the warpgroup %s: the registers a wgmma reads "
                 "(accumulators, A) must be fenced after other instructions wrote them",
                 op, where(site).c_str(), w.committed == 0 && w.ops.empty() ? "began" : "last waited"));
  }
  const WgmmaCall& c0 = args()[first].call;
  for (unsigned i = first; i < first + kWarpgroupThreads; ++i) {
    const WgmmaCall& c = args()[i].call;
    if (c.desc_a == c0.desc_a && c.desc_b == c0.desc_b && c.accumulate == c0.accumulate) continue;
    fault(Fault::Kind::warp_collective,
          format("%s at %s: thread %u passes descriptors 0x%016" PRIx64 ", 0x%016" PRIx64
                 " and accumulate %d, thread %u 0x%016" PRIx64 ", 0x%016" PRIx64
                 " and %d: the warpgroup's threads must pass the same",
                 op, where(site).c_str(), i, c.desc_b, c.desc_a, c.accumulate, first, c0.desc_b,
                 c0.desc_a, c0.accumulate));
  }
  const auto check_operand = [&](std::uint64_t desc, int major, const char* name) {
    const std::string why =
        wgmma_descriptor_fault(decode_wgmma_descriptor(desc), static_cast<WgmmaMajor>(major));
    if (!why.empty())
      fault(Fault::Kind::invalid_argument,
            format("%s at %s: operand %s: %s", op, where(site).c_str(), name, why.c_str()));
  };
  if (c0.a_regs == nullptr) check_operand(c0.desc_a, c0.major_a, "A");
  check_operand(c0.desc_b, c0.major_b, "B");
  WgmmaOp o;
  o.call = c0;
  o.group = w.committed;
  o.site = site;
  const int per_thread = c0.n / 2;
  o.d.resize(kWarpgroupThreads);
  for (unsigned i = 0; i < kWarpgroupThreads; ++i) o.d[i] = args()[first + i].call.d;
  // The same registers as an op still in flight: the hardware orders accumulation into them.
  o.chained = std::any_of(w.ops.begin(), w.ops.end(),
                          [&](const WgmmaOp& p) { return p.d[0] == o.d[0]; });
  if (c0.a_regs != nullptr) {
    o.a.resize(kWarpgroupThreads * 4);
    for (unsigned i = 0; i < kWarpgroupThreads; ++i)
      std::memcpy(&o.a[i * 4], args()[first + i].call.a_regs, 4 * sizeof(std::uint32_t));
  }
  if (c0.accumulate && !o.chained) {
    o.c.resize(kWarpgroupThreads * per_thread);
    for (unsigned i = 0; i < kWarpgroupThreads; ++i)
      std::memcpy(&o.c[i * per_thread], o.d[i], per_thread * sizeof(float));
  }
  // In flight the accumulators hold no defined value: NaN until the wait that covers the group.
  for (unsigned i = 0; i < kWarpgroupThreads; ++i)
    std::memset(args()[first + i].call.d, kPoison, per_thread * sizeof(float));
  w.ops.push_back(std::move(o));
}

void wgmma_commit_group(Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  if (warpgroup_aligned("wgmma_commit_group", site)) ++my_warpgroup().committed;
}

void wgmma_wait_group(int keep, Site site) {
  const RuntimeScope runtime;
  const IgnoreScope ignore;
  if (warpgroup_aligned("wgmma_wait_group", site)) {
    Warpgroup& w = my_warpgroup();
    const unsigned landed = w.committed > static_cast<unsigned>(keep) ? w.committed - keep : 0;
    std::vector<float> result;
    std::vector<std::pair<std::uintptr_t, std::size_t>> reads;  // the operands' bytes
    while (!w.ops.empty() && w.ops.front().group < landed) {
      const WgmmaOp& op = w.ops.front();
      complete(op, result, reads);
      const std::size_t per_thread = static_cast<std::size_t>(op.call.n / 2);
      for (unsigned i = 0; i < kWarpgroupThreads; ++i)
        std::memcpy(op.d[i], &result[i * per_thread], per_thread * sizeof(float));
      w.ops.pop_front();
    }
    const ProxyScope proxy;
    tsan_acquire(&g_proxy_fence);
    for (const auto& [p, n] : reads) tsan_read(reinterpret_cast<void*>(p), n);
    tsan_release(&w.done);
    w.fenced = false;
  }
  tsan_acquire(&my_warpgroup().done);
}

void hopper_block_begin() {
  if (tsan_active()) async_proxy();
  mbarriers().clear();
  for (Warpgroup& w : warpgroups()) w = Warpgroup{};
  for (StoreGroups& g : store_groups()) g.committed = 0;
}

}  // namespace wb::sim::detail
