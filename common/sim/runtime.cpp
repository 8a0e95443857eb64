// The simulator's scheduler: launches, blocks, barriers, warp collectives and faults.
//
// One launch at a time (a global mutex). For each block, in blockIdx order (x fastest; or its
// reverse, set_block_order), every CUDA thread gets a fiber; the scheduler sweeps the threads
// in linear order and resumes each runnable one until it blocks (at a barrier or collective
// that others have not reached yet), exits, or faults. A barrier or collective completes when
// its last participant arrives; that thread computes everyone's results and carries on. When a
// sweep finds no runnable thread while some are still blocked, nothing can ever complete: that
// is reported as a fault naming the waiting thread and the one it waits for, instead of hanging.
//
// Race mode (ThreadSanitizer): fibers switch without synchronizing (no happens-before), so the
// only orderings TSan sees between CUDA threads of a block are the ones CUDA guarantees:
// __syncthreads (and its _count/_and/_or forms) over the block and __syncwarp over its mask.
// Shuffles and votes exchange registers, not memory, and give no ordering. Blocks are ordered
// one after another (start and end of a block synchronize with the launching thread), so the
// reuse of static __shared__ arrays by the next block is not a race.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/sim/access_runtime.hpp"
#include "common/sim/ptx_runtime.hpp"
#include "common/sim/fiber.hpp"
#include "common/sim/hopper_runtime.hpp"
#include "common/sim/runtime.hpp"
#include "common/sim/sanitizers.hpp"

WbSimCurrent wb_sim_current = {};

namespace wb::sim {
namespace detail {

std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

namespace {

/// Dynamic shared memory's alignment: enough for any vector type, for WMMA's 32 bytes and for
/// the 1024-byte pattern of a 128-byte swizzle (TMA boxes and wgmma operands, hopper.hpp).
constexpr std::size_t kDynamicSharedAlignment = 1024;

enum class Status : unsigned char { runnable, blocked, exited };
/// What a blocked thread waits at: __syncthreads, a warp collective, a named barrier (bar.sync),
/// a warpgroup-wide .aligned operation (wgmma, setmaxnreg), or (runnable, not blocked) an
/// mbarrier it polls: it runs again in the next sweep.
enum class Wait : unsigned char { none, block_barrier, warp, named_barrier, warpgroup, poll };

/// A happens-before object for one barrier or collective instance (race mode only). Every
/// participant releases it on arrival and acquires it when it passes; the last one frees it,
/// which also frees TSan's clock for the address, so a later instance starts clean.
struct SyncObject {
  int pending;  // participants that still have to acquire
};

struct Thread {
  uint3 idx{};
  unsigned linear = 0, warp = 0, lane = 0;
  Status status = Status::runnable;
  Wait wait = Wait::none;
  const char* op = nullptr;  // what it waits at, e.g. "__syncthreads" (for messages)
  Site site{nullptr, 0};
  unsigned mask = 0;        // the collective's mask while waiting at one
  std::uint64_t in = 0;     // a collective's input value (shuffle bits or predicate)
  int arg = 0;              // shuffle source lane or delta
  int width = 0;            // shuffle width
  std::uint64_t out = 0;    // the collective's result for this thread
  SyncObject* sync = nullptr;  // to acquire when it passes (race mode)
  const AlignedCall* call = nullptr;  // a warp-wide (.aligned) operation's arguments while waiting
  Fiber* fiber = nullptr;
  int runtime_depth = 0;  // > 0 while the simulator's own code runs on this thread (RuntimeScope)
  unsigned named_id = 0;           // the named barrier it waits at (Wait::named_barrier)
  const void* polled = nullptr;    // the mbarrier it polls (Wait::poll), and the parity
  unsigned poll_parity = 0;
  std::uint64_t poll_events = ~0ull;  // the launch's event count at its last poll
  bool stale_poll = false;  // it polled again with no event anywhere since its previous poll
  int tsan_ignores = 0;     // open IgnoreAccesses scopes (race mode), closed if it faults
};

enum class WarpOp : unsigned char { syncwarp, shfl_idx, shfl_up, shfl_down, shfl_bfly, ballot,
                                    any, all, aligned };

struct WarpEpisode {
  WarpOp op;
  const char* name;
  unsigned mask;
  unsigned arrived;
  Site site;  // where the first participant called it
  SyncObject* sync;
};

struct Warp {
  unsigned existing = 0;  // lanes that exist (the last warp of a block may be partial)
  unsigned exited = 0;
  std::vector<WarpEpisode> open;  // collectives some lanes wait at
};

struct BlockBarrier {
  bool open = false;
  BarrierOp op = BarrierOp::sync;
  Site site{nullptr, 0};
  unsigned arrived = 0;
  int reduction = 0;
  Thread* first = nullptr;
  SyncObject* sync = nullptr;
};

/// One of the 16 named barriers of a block (bar.sync / bar.arrive id, count; id 0 is
/// __syncthreads' own and not used here).
struct NamedBarrier {
  bool open = false;
  unsigned count = 0;    // threads it waits for
  unsigned arrived = 0;  // threads arrived so far (bar.sync and bar.arrive alike)
  Site site{nullptr, 0};
  const Thread* first = nullptr;
  std::vector<unsigned> lanes;  // per warp of the block: the lanes that arrived
  SyncObject* sync = nullptr;
};

/// A warpgroup-wide .sync.aligned operation (wgmma.*, setmaxnreg) some of its 128 threads wait at.
struct WarpgroupEpisode {
  bool open = false;
  const char* name = nullptr;
  Site site{nullptr, 0};
  unsigned arrived = 0;
  const Thread* first = nullptr;
};

struct Launch {
  const char* kernel = nullptr;
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  unsigned char* shared = nullptr;
  void (*invoke)(void*) = nullptr;
  void* ctx = nullptr;
  unsigned threads_per_block = 0;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  BlockBarrier barrier;
  NamedBarrier named[kNamedBarriers];
  std::vector<WarpgroupEpisode> warpgroups;
  std::uint64_t events = 0;  // arrivals, exits and mbarrier changes: what can end a poll
  unsigned live = 0;
  unsigned exited = 0;
  Thread* running = nullptr;
  bool faulted = false;
  Fault::Kind fault_kind = Fault::Kind::invalid_argument;
  std::string fault_message;
};

Launch g_launch;
std::mutex g_launch_mutex;
BlockOrder g_block_order = BlockOrder::forward;  // set_block_order
// Happens-before objects that order blocks: the scheduler releases `g_block_start` before a
// block and each of its threads acquires it first; each thread releases `g_block_end` whenever
// it hands control back, and the scheduler acquires it after the block.
char g_block_start;
char g_block_end;

bool race_mode() { return tsan_active(); }

// ---- Messages ---------------------------------------------------------------------------------

std::string dim(uint3 v) { return format("(%u,%u,%u)", v.x, v.y, v.z); }
std::string dim(dim3 v) { return format("(%u,%u,%u)", v.x, v.y, v.z); }

/// file:line, relative to the project's source root when it is inside it.
std::string where(Site site) {
  if (site.file == nullptr) return "?";
  const char* file = site.file;
#ifdef WB_SIM_SOURCE_ROOT
  const std::size_t n = std::strlen(WB_SIM_SOURCE_ROOT);
  if (std::strncmp(file, WB_SIM_SOURCE_ROOT, n) == 0 && file[n] == '/') file += n + 1;
#endif
  return format("%s:%d", file, site.line);
}

std::string thread_name(const Thread& t) { return "thread " + dim(t.idx); }

std::string prefix(const Thread& t) {
  return format("wb::sim: kernel %s, block %s, thread %s: ", g_launch.kernel,
                dim(wb_sim_current.block).c_str(), dim(t.idx).c_str());
}

/// What a blocked or exited thread is doing, e.g. "waits at __syncthreads() at k.cuh:42".
std::string doing(const Thread& t) {
  if (t.status == Status::exited) return "has exited";
  if (t.wait == Wait::block_barrier) return format("waits at %s at %s", t.op, where(t.site).c_str());
  if (t.wait == Wait::warp) {
    return format("waits at %s(mask 0x%08x) at %s", t.op, t.mask, where(t.site).c_str());
  }
  if (t.wait == Wait::named_barrier) {
    return format("waits at %s %u at %s", t.op, t.named_id, where(t.site).c_str());
  }
  if (t.wait == Wait::warpgroup || t.wait == Wait::poll) {
    return format("waits at %s at %s", t.op, where(t.site).c_str());
  }
  return "is running";
}

void set_fault(Fault::Kind kind, const Thread& t, const std::string& what) {
  if (g_launch.faulted) return;
  g_launch.faulted = true;
  g_launch.fault_kind = kind;
  g_launch.fault_message = prefix(t) + what;
}

// ---- Switching --------------------------------------------------------------------------------

/// Fiber side: hands control back to the scheduler until this thread is resumed. A thread that
/// parks blocked has arrived somewhere: an event that can end another thread's poll.
void park(Thread& t) {
  if (t.status == Status::blocked) ++g_launch.events;
  if (race_mode()) __tsan_release(&g_block_end);
  t.fiber->suspend(false);
  if (t.sync != nullptr) {  // passed a synchronizing barrier: see what the others wrote
    __tsan_acquire(t.sync);
    if (--t.sync->pending == 0) delete t.sync;
    t.sync = nullptr;
  }
}

/// Fiber side, after set_fault: stops this thread for good (the scheduler abandons the block).
[[noreturn]] void stop_faulted(Thread& t) {
  for (; t.tsan_ignores > 0; --t.tsan_ignores) __tsan_ignore_thread_end();
  if (race_mode()) __tsan_release(&g_block_end);
  t.fiber->suspend(false);
  std::abort();  // never resumed
}

SyncObject* new_sync(bool synchronizing) {
  if (!synchronizing || !race_mode()) return nullptr;
  return new SyncObject{0};
}

/// A participant arrives at a synchronizing instance: publish what it wrote so far.
void arrive_sync(SyncObject* s) {
  if (s == nullptr) return;
  __tsan_release(s);
  ++s->pending;
}

Thread& self() { return *g_launch.running; }

// ---- Block barrier ------------------------------------------------------------------------------

const char* barrier_name(BarrierOp op) {
  switch (op) {
    case BarrierOp::sync: return "__syncthreads()";
    case BarrierOp::count: return "__syncthreads_count()";
    case BarrierOp::all: return "__syncthreads_and()";
    case BarrierOp::any: return "__syncthreads_or()";
  }
  return "?";
}

const Thread* first_exited() {
  for (const Thread& t : g_launch.threads) {
    if (t.status == Status::exited) return &t;
  }
  return nullptr;
}

// ---- Warp collectives ---------------------------------------------------------------------------

Thread& lane_thread(const Thread& any_lane_of_warp, unsigned lane) {
  return g_launch.threads[any_lane_of_warp.warp * kWarpSize + lane];
}

/// Why `lane` cannot be read in episode `e` of warp `w` (it does not participate).
std::string absent_lane(const Warp& w, const WarpEpisode& e, unsigned lane) {
  const unsigned bit = 1u << lane;
  if ((e.mask & bit) == 0) return format("lane %u, which is not in the mask 0x%08x", lane, e.mask);
  if ((w.existing & bit) == 0) {
    return format("lane %u, which does not exist (this warp has %d threads)", lane,
                  __builtin_popcount(w.existing));
  }
  return format("lane %u, which has exited", lane);
}

/// The source lane of a shuffle, by the PTX definition of shfl.sync (c = segment mask and
/// clamp as the CUDA headers encode `width`); `valid` false means "keep the own value".
unsigned shuffle_source(WarpOp op, unsigned lane, int b, int width, bool* valid) {
  const unsigned seg = static_cast<unsigned>(kWarpSize - width);  // segmask (high lane bits)
  const unsigned bval = static_cast<unsigned>(b) & 31u;
  const unsigned clamp = op == WarpOp::shfl_up ? 0u : 31u;
  const unsigned max_lane = (lane & seg) | (clamp & ~seg);
  const unsigned min_lane = lane & seg;
  int j = 0;
  switch (op) {
    case WarpOp::shfl_up:
      j = static_cast<int>(lane) - static_cast<int>(bval);
      *valid = j >= static_cast<int>(max_lane);
      break;
    case WarpOp::shfl_down:
      j = static_cast<int>(lane + bval);
      *valid = j <= static_cast<int>(max_lane);
      break;
    case WarpOp::shfl_bfly:
      j = static_cast<int>(lane ^ bval);
      *valid = j <= static_cast<int>(max_lane);
      break;
    default:  // idx
      j = static_cast<int>(min_lane | (bval & ~seg));
      *valid = j <= static_cast<int>(max_lane);
      break;
  }
  return *valid ? static_cast<unsigned>(j) : lane;
}

bool is_shuffle(WarpOp op) {
  return op == WarpOp::shfl_idx || op == WarpOp::shfl_up || op == WarpOp::shfl_down ||
         op == WarpOp::shfl_bfly;
}

/// A warp-wide operation (WMMA, mma.sync, ldmatrix) needs every lane of the warp with the same
/// arguments: sets the fault and returns false if it cannot have them.
bool check_aligned(const Warp& w, const WarpEpisode& e, const Thread& lane0) {
  const Thread& first = lane_thread(lane0, static_cast<unsigned>(__builtin_ctz(e.arrived)));
  if (e.arrived != kAllLanes) {
    const unsigned missing = static_cast<unsigned>(__builtin_ctz(~e.arrived));
    set_fault(Fault::Kind::warp_collective, first,
              format("%s at %s needs all 32 lanes of the warp, but it cannot have %s (%s): "
                     "warp-wide operations (WMMA, mma.sync, ldmatrix) are .aligned, every lane "
                     "must execute them",
                     e.name, where(e.site).c_str(), absent_lane(w, e, missing).c_str(),
                     thread_name(lane_thread(lane0, missing)).c_str()));
    return false;
  }
  const AlignedCall& a = *first.call;
  for (unsigned lane = 0; lane < 32; ++lane) {
    const Thread& t = lane_thread(lane0, lane);
    const AlignedCall& b = *t.call;
    if (a.ptr == b.ptr && a.ldm == b.ldm && a.layout == b.layout) continue;
    set_fault(Fault::Kind::warp_collective, t,
              format("%s at %s is called with pointer %p, ldm %u, layout %d, but lane %u passes "
                     "pointer %p, ldm %u, layout %d: every lane of the warp must pass the same "
                     "arguments",
                     e.name, where(e.site).c_str(), b.ptr, b.ldm, b.layout, first.lane, a.ptr,
                     a.ldm, a.layout));
    return false;
  }
  return true;
}

/// Completes episode `index` of warp `w` if every lane of its mask that still exists has
/// arrived; returns false if it must keep waiting. Wakes the other participants.
bool try_complete(Warp& w, std::size_t index) {
  WarpEpisode e = w.open[index];
  const unsigned live = w.existing & ~w.exited;
  if ((e.mask & live & ~e.arrived) != 0) return false;
  w.open.erase(w.open.begin() + static_cast<std::ptrdiff_t>(index));
  const Thread& lane0 = g_launch.threads[static_cast<std::size_t>(&w - g_launch.warps.data()) *
                                         kWarpSize];
  if (e.op == WarpOp::aligned && !check_aligned(w, e, lane0)) return true;
  unsigned votes = 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if ((e.arrived >> lane & 1u) && lane_thread(lane0, lane).in != 0) votes |= 1u << lane;
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(e.arrived >> lane & 1u)) continue;
    Thread& t = lane_thread(lane0, lane);
    if (is_shuffle(e.op)) {
      bool valid = false;
      const unsigned src = shuffle_source(e.op, lane, t.arg, t.width, &valid);
      if (!(e.arrived >> src & 1u)) {
        set_fault(Fault::Kind::warp_collective, t,
                  format("%s at %s reads %s, so its result is undefined", e.name,
                         where(t.site).c_str(), absent_lane(w, e, src).c_str()));
        return true;
      }
      t.out = lane_thread(lane0, src).in;
    } else if (e.op == WarpOp::ballot) {
      t.out = votes;
    } else if (e.op == WarpOp::any) {
      t.out = votes != 0;
    } else if (e.op == WarpOp::all) {
      t.out = votes == e.arrived;
    }
    t.sync = e.sync;
    t.wait = Wait::none;
    if (&t != g_launch.running) t.status = Status::runnable;
  }
  return true;
}

/// The calling lane joins collective `op` over `mask`; returns when it completes, true in the
/// lane whose arrival completed it.
bool warp_collective(WarpOp op, const char* name, unsigned mask, Site site) {
  Thread& t = self();
  Warp& w = g_launch.warps[t.warp];
  const unsigned bit = 1u << t.lane;
  t.site = site;
  if ((mask & bit) == 0) {
    set_fault(Fault::Kind::warp_collective, t,
              format("%s at %s is called with mask 0x%08x, which does not include the calling "
                     "lane %u",
                     name, where(site).c_str(), mask, t.lane));
    stop_faulted(t);
  }
  std::size_t index = w.open.size();
  for (std::size_t i = 0; i < w.open.size(); ++i) {
    const WarpEpisode& e = w.open[i];
    if ((e.mask & bit) == 0) continue;
    const Thread& other = lane_thread(t, static_cast<unsigned>(__builtin_ctz(e.arrived)));
    const bool same_site = e.site.line == site.line &&
                           (e.site.file == site.file || std::strcmp(e.site.file, site.file) == 0);
    if (op == WarpOp::aligned && (e.op != op || !same_site)) {
      set_fault(Fault::Kind::warp_collective, t,
                format("%s at %s does not match lane %u, which waits at %s at %s: the warp "
                       "diverged, and warp-wide operations (WMMA, mma.sync, ldmatrix) are "
                       ".aligned, every lane of the warp must execute the same one",
                       name, where(site).c_str(), other.lane, e.name, where(e.site).c_str()));
      stop_faulted(t);
    }
    if (e.mask != mask || e.op != op) {
      set_fault(Fault::Kind::warp_collective, t,
                format("%s(mask 0x%08x) at %s does not match lane %u, which waits at "
                       "%s(mask 0x%08x) at %s: every lane of a mask must call the same "
                       "collective with the same mask",
                       name, mask, where(site).c_str(), other.lane, e.name, e.mask,
                       where(e.site).c_str()));
      stop_faulted(t);
    }
    index = i;
    break;
  }
  if (index == w.open.size()) {
    const bool synchronizing = op == WarpOp::syncwarp;  // shuffles and votes do not order memory
    w.open.push_back(WarpEpisode{op, name, mask, 0u, site, new_sync(synchronizing)});
  }
  WarpEpisode& e = w.open[index];
  e.arrived |= bit;
  arrive_sync(e.sync);
  t.wait = Wait::warp;
  t.op = name;
  t.mask = mask;
  if (!try_complete(w, index)) {
    t.status = Status::blocked;
    park(t);
    return false;
  }
  if (g_launch.faulted) stop_faulted(t);
  if (t.sync != nullptr) {
    __tsan_acquire(t.sync);
    if (--t.sync->pending == 0) delete t.sync;
    t.sync = nullptr;
  }
  return true;
}

// ---- Block lifecycle -------------------------------------------------------------------------

/// A thread has finished its kernel body.
void thread_exit(Thread& t) {
  t.status = Status::exited;
  t.wait = Wait::none;
  --g_launch.live;
  ++g_launch.exited;
  ++g_launch.events;
  const unsigned group = t.linear / kWarpgroupThreads;
  if (group < g_launch.warpgroups.size() && g_launch.warpgroups[group].open) {
    const WarpgroupEpisode& e = g_launch.warpgroups[group];
    set_fault(Fault::Kind::warp_collective, t,
              format("exits without reaching %s at %s, where %u threads of its warpgroup wait "
                     "(first %s): warpgroup-wide operations (wgmma, setmaxnreg) are .aligned, all "
                     "128 threads of the warpgroup must execute them",
                     e.name, where(e.site).c_str(), e.arrived, thread_name(*e.first).c_str()));
    return;
  }
  BlockBarrier& b = g_launch.barrier;
  if (b.open) {
    set_fault(Fault::Kind::barrier_divergence, t,
              format("exits without reaching %s at %s, where %u of the block's %u threads wait "
                     "(first %s): every thread of a block must reach each __syncthreads()",
                     barrier_name(b.op), where(b.site).c_str(), b.arrived,
                     g_launch.threads_per_block, thread_name(*b.first).c_str()));
    return;
  }
  Warp& w = g_launch.warps[t.warp];
  w.exited |= 1u << t.lane;
  for (std::size_t i = 0; i < w.open.size();) {
    if ((w.open[i].mask >> t.lane & 1u) && try_complete(w, i)) {
      if (g_launch.faulted) return;
      continue;  // the episode was removed; the next one moved to index i
    }
    ++i;
  }
}

/// Entry of every thread's fiber.
void thread_main(void* arg) {
  Thread& t = *static_cast<Thread*>(arg);
  if (race_mode()) __tsan_acquire(&g_block_start);
  bool threw = false;
  std::string error;
  try {
    g_launch.invoke(g_launch.ctx);
  } catch (const std::exception& e) {
    threw = true;
    error = e.what();
  } catch (...) {
    threw = true;
    error = "an exception that is not a std::exception";
  }
  if (threw) {
    set_fault(Fault::Kind::kernel_exception, t, "a C++ exception escaped the kernel: " + error);
    std::string().swap(error);  // free it: this fiber's frame is never unwound
  } else {
    thread_exit(t);
  }
  if (race_mode()) __tsan_release(&g_block_end);
  t.fiber->suspend(true);
  std::abort();  // never resumed
}

/// Builds the fault for a block in which no thread can run but some have not exited.
void report_deadlock() {
  // A warpgroup operation names the warp that does not come.
  for (Thread& t : g_launch.threads) {
    if (t.status != Status::blocked || t.wait != Wait::warpgroup) continue;
    const unsigned first = t.linear / kWarpgroupThreads * kWarpgroupThreads;
    for (unsigned i = first; i < first + kWarpgroupThreads; ++i) {
      const Thread& m = g_launch.threads[i];
      if (m.status == Status::blocked && m.wait == Wait::warpgroup) continue;
      set_fault(Fault::Kind::warp_collective, t,
                format("%s at %s can never complete: warp %u of the warpgroup (%s) %s; "
                       "warpgroup-wide operations are .aligned, all 4 warps must execute them",
                       t.op, where(t.site).c_str(), m.warp, thread_name(m).c_str(),
                       doing(m).c_str()));
      return;
    }
  }
  for (Thread& t : g_launch.threads) {
    if (t.status != Status::blocked || t.wait != Wait::named_barrier) continue;
    const NamedBarrier& b = g_launch.named[t.named_id];
    set_fault(Fault::Kind::barrier_divergence, t,
              format("%s %u, %u at %s can never complete: %u of its %u threads arrived, and no "
                     "other thread can run",
                     t.op, t.named_id, b.count, where(t.site).c_str(), b.arrived, b.count));
    return;
  }
  // Threads polling mbarriers: the first one's wait, and the other waits (by line and barrier)
  // that keep it from completing, which is usually where the bug is.
  const Thread* first = nullptr;
  std::string others;
  int listed = 0;
  constexpr int kMostListed = 3;
  for (const Thread& t : g_launch.threads) {
    if (t.wait != Wait::poll) continue;
    if (first == nullptr) {
      first = &t;
      continue;
    }
    bool seen = t.polled == first->polled && t.site.line == first->site.line;
    for (const Thread* u = first; !seen && u < &t; ++u) {
      seen = u->wait == Wait::poll && u->polled == t.polled && u->site.line == t.site.line &&
             u != first;
    }
    if (seen || listed == kMostListed) continue;
    ++listed;
    others += format("; meanwhile %s waits at %s at %s: %s", thread_name(t).c_str(), t.op,
                     where(t.site).c_str(), describe_mbarrier_wait(t.polled, t.poll_parity).c_str());
  }
  if (first != nullptr) {
    set_fault(Fault::Kind::barrier_divergence, *first,
              format("deadlock: %s at %s can never complete: %s%s", first->op,
                     where(first->site).c_str(),
                     describe_mbarrier_wait(first->polled, first->poll_parity).c_str(),
                     others.c_str()));
    return;
  }
  // Prefer a thread waiting at a warp collective: it names the lane it waits for.
  for (Thread& t : g_launch.threads) {
    if (t.status != Status::blocked || t.wait != Wait::warp) continue;
    const Warp& w = g_launch.warps[t.warp];
    for (const WarpEpisode& e : w.open) {
      if (!(e.arrived >> t.lane & 1u)) continue;
      const unsigned missing = e.mask & w.existing & ~w.exited & ~e.arrived;
      if (missing == 0) continue;  // (complete; cannot happen while t is blocked on it)
      const Thread& m = lane_thread(t, static_cast<unsigned>(__builtin_ctz(missing)));
      set_fault(Fault::Kind::warp_collective, t,
                format("%s(mask 0x%08x) at %s can never complete: lane %u (%s) %s", e.name,
                       e.mask, where(e.site).c_str(), m.lane, thread_name(m).c_str(),
                       doing(m).c_str()));
      return;
    }
  }
  for (Thread& t : g_launch.threads) {
    if (t.status != Status::blocked) continue;
    set_fault(Fault::Kind::barrier_divergence, t,
              format("%s at %s can never complete (%u of %u threads reached it)", t.op,
                     where(t.site).c_str(), g_launch.barrier.arrived,
                     g_launch.threads_per_block));
    return;
  }
}

void run_block(std::vector<Fiber*>& fibers) {
  Launch& L = g_launch;
  L.live = L.threads_per_block;
  L.exited = 0;
  L.barrier = BlockBarrier{};
  for (NamedBarrier& b : L.named) b = NamedBarrier{};
  L.warpgroups.assign((L.threads_per_block + kWarpgroupThreads - 1) / kWarpgroupThreads,
                      WarpgroupEpisode{});
  L.events = 0;
  for (Warp& w : L.warps) {
    w.exited = 0;
    w.open.clear();
  }
  const bool race = race_mode();
  for (unsigned i = 0; i < L.threads_per_block; ++i) {
    Thread& t = L.threads[i];
    t.status = Status::runnable;
    t.wait = Wait::none;
    t.sync = nullptr;
    t.runtime_depth = 0;  // a faulted thread may have left its scope open
    t.poll_events = ~0ull;
    t.stale_poll = false;
    t.fiber = fibers[i];
    t.fiber->restart(&thread_main, &t);
    if (race) {
      char name[64];
      std::snprintf(name, sizeof name, "block (%u,%u,%u) thread (%u,%u,%u)",
                    wb_sim_current.block.x, wb_sim_current.block.y, wb_sim_current.block.z,
                    t.idx.x, t.idx.y, t.idx.z);
      t.fiber->set_name(name);
    }
  }
  if (race) __tsan_release(&g_block_start);
  while (L.live > 0 && !L.faulted) {
    // A sweep makes progress unless every thread it resumed polled an mbarrier again with
    // nothing changed anywhere since its previous poll: then nothing ever will.
    bool ran = false, progress = false;
    for (Thread& t : L.threads) {
      if (t.status != Status::runnable) continue;
      ran = true;
      L.running = &t;
      wb_sim_current.thread = t.idx;
      wb_sim_current.linear = t.linear;
      wb_sim_current.warp = t.warp;
      wb_sim_current.lane = t.lane;
      wb_sim_current.active = 1;
      access_thread_stack(t.fiber->stack_lo(), t.fiber->stack_hi());
      t.fiber->resume();
      wb_sim_current.active = 0;
      L.running = nullptr;
      if (t.wait != Wait::poll || !t.stale_poll) progress = true;
      if (L.faulted) break;
    }
    if ((!ran || !progress) && !L.faulted) report_deadlock();
  }
  if (race) __tsan_acquire(&g_block_end);
  access_block_end();
  if (L.faulted) {
    for (Thread& t : L.threads) {
      if (t.status == Status::exited) continue;
      if (t.tsan_ignores > 0) {
        // Parked inside the simulator's bookkeeping (a warpgroup operation, say): close its
        // IgnoreAccesses on its own fiber, as ThreadSanitizer requires before the fiber goes.
        void* here = __tsan_get_current_fiber();
        __tsan_switch_to_fiber(t.fiber->tsan_fiber(), kTsanSwitchNoSync);
        for (; t.tsan_ignores > 0; --t.tsan_ignores) __tsan_ignore_thread_end();
        __tsan_switch_to_fiber(here, kTsanSwitchNoSync);
      }
      t.fiber->abandon();
    }
    // Synchronizing objects of unfinished barriers are not freed: a fault ends the launch.
  }
}

}  // namespace

/// After a sanitizer report (say an AddressSanitizer out-of-bounds access in a kernel), name
/// the CUDA thread that made it: the report itself knows only the fiber's stack.
void on_sanitizer_death() {
  if (wb_sim_current.active == 0) return;
  std::fprintf(stderr, "wb::sim: sanitizer report from kernel %s, block %s, thread %s\n",
               wb_sim_current.kernel, dim(wb_sim_current.block).c_str(),
               dim(wb_sim_current.thread).c_str());
}

namespace {

std::map<std::uintptr_t, std::size_t>& shared_limits() {
  static std::map<std::uintptr_t, std::size_t> limits;
  return limits;
}

std::string launch_prefix(const char* kernel) {
  return format("wb::sim: kernel %s: launch failed: ", kernel);
}

void check_configuration(const char* kernel, KernelKey key, dim3 grid, dim3 block,
                         std::size_t shared_bytes) {
  const auto fail = [&](Fault::Kind kind, const std::string& why) {
    throw Fault(kind, launch_prefix(kernel) + why);
  };
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > kMaxBlockDimX ||
      block.y > kMaxBlockDimY || block.z > kMaxBlockDimZ || threads > kMaxThreadsPerBlock) {
    fail(Fault::Kind::launch_configuration,
         format("invalid configuration argument: block %s has %llu threads (a block may have "
                "1 to %u threads, at most (%u,%u,%u) per dimension)",
                dim(block).c_str(), threads, kMaxThreadsPerBlock, kMaxBlockDimX, kMaxBlockDimY,
                kMaxBlockDimZ));
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridDimX ||
      grid.y > kMaxGridDimYZ || grid.z > kMaxGridDimYZ) {
    fail(Fault::Kind::launch_configuration,
         format("invalid configuration argument: grid %s is out of range (1 to (%u,%u,%u) "
                "blocks per dimension)",
                dim(grid).c_str(), kMaxGridDimX, kMaxGridDimYZ, kMaxGridDimYZ));
  }
  std::size_t limit = kDefaultMaxDynamicSharedBytes;
  const auto it = shared_limits().find(reinterpret_cast<std::uintptr_t>(key));
  if (it != shared_limits().end()) limit = it->second;
  if (shared_bytes > limit) {
    fail(Fault::Kind::shared_memory,
         format("invalid argument: %zu bytes of dynamic shared memory for block %s exceed this "
                "kernel's limit of %zu bytes (a kernel may opt in to up to %zu with "
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize), in the simulator "
                "wb::sim::set_max_dynamic_shared_bytes)",
                shared_bytes, dim(block).c_str(), limit, kMaxDynamicSharedBytesOptIn));
  }
}

}  // namespace

// ---- Public entry points ------------------------------------------------------------------------

std::string pretty_kernel_name(const char* pretty_function) {
  std::string s = pretty_function;
  // GCC: "... [with auto Kernel = ns::{anonymous}::k<256>]"; Clang: "... [Kernel = &ns::k]".
  const std::size_t eq = s.find(" = ");
  if (eq != std::string::npos) s = s.substr(eq + 3);
  if (!s.empty() && s.back() == ']') s.pop_back();
  const std::size_t semi = s.find(';');  // further template arguments, if any
  if (semi != std::string::npos) s.erase(semi);
  if (!s.empty() && s.front() == '&') s.erase(0, 1);
  for (const char* anon : {"{anonymous}::", "(anonymous namespace)::"}) {
    for (std::size_t p; (p = s.find(anon)) != std::string::npos;) s.erase(p, std::strlen(anon));
  }
  return s;
}

void set_max_dynamic_shared_bytes(KernelKey kernel, const char* name, std::size_t bytes) {
  if (bytes > kMaxDynamicSharedBytesOptIn) {
    throw Fault(Fault::Kind::invalid_argument,
                format("wb::sim: kernel %s: invalid argument: cannot allow %zu bytes of dynamic "
                       "shared memory, the device's opt-in maximum is %zu",
                       name, bytes, kMaxDynamicSharedBytesOptIn));
  }
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  shared_limits()[reinterpret_cast<std::uintptr_t>(kernel)] = bytes;
}

void launch(const char* name, KernelKey key, dim3 grid, dim3 block, std::size_t shared_bytes,
            void (*invoke)(void*), void* ctx, std::size_t ctx_bytes) {
  if (wb_sim_current.active != 0) {
    throw Fault(Fault::Kind::invalid_argument,
                launch_prefix(name) + "a kernel cannot launch kernels in the simulator");
  }
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  check_configuration(name, key, grid, block, shared_bytes);
  static const bool death_callback_set = [] {
    if (__sanitizer_set_death_callback != nullptr) {
      __sanitizer_set_death_callback(&on_sanitizer_death);
    }
    return true;
  }();
  static_cast<void>(death_callback_set);

  Launch& L = g_launch;
  L.kernel = name;
  L.grid = grid;
  L.block = block;
  L.shared_bytes = shared_bytes;
  L.invoke = invoke;
  L.ctx = ctx;
  L.threads_per_block = block.x * block.y * block.z;
  L.faulted = false;
  L.fault_message.clear();
  L.threads.assign(L.threads_per_block, Thread{});
  for (unsigned z = 0, i = 0; z < block.z; ++z) {
    for (unsigned y = 0; y < block.y; ++y) {
      for (unsigned x = 0; x < block.x; ++x, ++i) {
        Thread& t = L.threads[i];
        t.idx = uint3{x, y, z};
        t.linear = i;
        t.warp = i / kWarpSize;
        t.lane = i % kWarpSize;
      }
    }
  }
  const unsigned warps = (L.threads_per_block + kWarpSize - 1) / kWarpSize;
  L.warps.assign(warps, Warp{});
  for (unsigned w = 0; w < warps; ++w) {
    const unsigned lanes = std::min<unsigned>(kWarpSize, L.threads_per_block - w * kWarpSize);
    L.warps[w].existing = lanes == 32 ? kAllLanes : (1u << lanes) - 1u;
  }
  void* shared = nullptr;
  if (posix_memalign(&shared, kDynamicSharedAlignment, shared_bytes) != 0) {
    throw Fault(Fault::Kind::shared_memory,
                launch_prefix(name) + "cannot allocate the dynamic shared memory");
  }
  L.shared = static_cast<unsigned char*>(shared);
  std::vector<Fiber*>& fibers = fiber_pool(L.threads_per_block);

  access_launch_begin(LaunchInfo{name, grid, block, L.shared, shared_bytes, ctx, ctx_bytes});
  wb_sim_current.kernel = name;
  wb_sim_current.block_dim = block;
  wb_sim_current.grid_dim = grid;
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  for (unsigned long long n = 0; n < blocks && !L.faulted; ++n) {
    const unsigned long long b = g_block_order == BlockOrder::forward ? n : blocks - 1 - n;
    wb_sim_current.block =
        uint3{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
              static_cast<unsigned>(b / grid.x / grid.y)};
    // Real shared memory starts with whatever the previous block left: make reads of
    // unwritten bytes visible (NaN as float) instead of a convenient zero.
    if (shared_bytes > 0) std::memset(L.shared, 0xff, shared_bytes);
    access_block_begin();
    cp_async_block_begin();
    hopper_block_begin();
    run_block(fibers);
  }
  std::free(L.shared);
  L.shared = nullptr;
  wb_sim_current.active = 0;
  access_launch_end(L.faulted);
  if (L.faulted) {
    L.faulted = false;
    throw Fault(L.fault_kind, L.fault_message);
  }
}

int block_barrier(BarrierOp op, int predicate, Site site) {
  const RuntimeScope runtime;
  Thread& t = self();
  BlockBarrier& b = g_launch.barrier;
  t.site = site;
  if (const Thread* gone = g_launch.exited > 0 ? first_exited() : nullptr) {
    set_fault(Fault::Kind::barrier_divergence, t,
              format("%s at %s can never complete: %s has already exited without reaching it "
                     "(every thread of a block must reach each __syncthreads())",
                     barrier_name(op), where(site).c_str(), thread_name(*gone).c_str()));
    stop_faulted(t);
  }
  const bool same_site = b.site.line == site.line &&
                         (b.site.file == site.file || std::strcmp(b.site.file, site.file) == 0);
  if (b.open && (!same_site || b.op != op)) {
    set_fault(Fault::Kind::barrier_divergence, t,
              format("reaches %s at %s while %u threads (first %s) wait at %s at %s: divergent "
                     "barrier, every thread of a block must reach the same __syncthreads()",
                     barrier_name(op), where(site).c_str(), b.arrived,
                     thread_name(*b.first).c_str(), barrier_name(b.op), where(b.site).c_str()));
    stop_faulted(t);
  }
  if (!b.open) {
    b = BlockBarrier{true, op, site, 0u, op == BarrierOp::all ? 1 : 0, &t, new_sync(true)};
  }
  ++b.arrived;
  switch (op) {
    case BarrierOp::sync: break;
    case BarrierOp::count: b.reduction += predicate != 0; break;
    case BarrierOp::all: b.reduction &= predicate != 0; break;
    case BarrierOp::any: b.reduction |= predicate != 0; break;
  }
  arrive_sync(b.sync);
  t.wait = Wait::block_barrier;
  t.op = barrier_name(op);
  if (b.arrived < g_launch.threads_per_block) {
    t.status = Status::blocked;
    park(t);
    return static_cast<int>(t.out);
  }
  // The last thread to arrive releases everyone.
  access_barrier();
  for (Thread& u : g_launch.threads) {
    u.out = static_cast<std::uint64_t>(b.reduction);
    u.sync = b.sync;
    u.wait = Wait::none;
    if (&u != &t) u.status = Status::runnable;
  }
  b.open = false;
  if (t.sync != nullptr) {
    __tsan_acquire(t.sync);
    if (--t.sync->pending == 0) delete t.sync;
    t.sync = nullptr;
  }
  return static_cast<int>(t.out);
}

void warp_barrier(unsigned mask, Site site) {
  const RuntimeScope runtime;
  warp_collective(WarpOp::syncwarp, "__syncwarp", mask, site);
}

std::uint64_t warp_shuffle(ShuffleMode mode, unsigned mask, std::uint64_t bits, int lane_or_delta,
                           int width, const char* name, Site site) {
  const RuntimeScope runtime;
  Thread& t = self();
  if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0) {
    t.site = site;
    set_fault(Fault::Kind::warp_collective, t,
              format("%s at %s has width %d, which is not a power of 2 from 1 to 32", name,
                     where(site).c_str(), width));
    stop_faulted(t);
  }
  t.in = bits;
  t.arg = lane_or_delta;
  t.width = width;
  WarpOp op = WarpOp::shfl_idx;
  switch (mode) {
    case ShuffleMode::idx: op = WarpOp::shfl_idx; break;
    case ShuffleMode::up: op = WarpOp::shfl_up; break;
    case ShuffleMode::down: op = WarpOp::shfl_down; break;
    case ShuffleMode::bfly: op = WarpOp::shfl_bfly; break;
  }
  warp_collective(op, name, mask, site);
  return t.out;
}

bool warp_aligned(const AlignedCall& call, Site site) {
  const RuntimeScope runtime;
  Thread& t = self();
  t.call = &call;
  return warp_collective(WarpOp::aligned, call.name, kAllLanes, site);
}

void named_barrier(unsigned id, unsigned threads, bool wait, Site site) {
  const RuntimeScope runtime;
  Thread& t = self();
  t.site = site;
  const char* op = wait ? "bar.sync" : "bar.arrive";
  const unsigned block_warps = static_cast<unsigned>(g_launch.warps.size());
  if (id == 0 || id >= kNamedBarriers) {
    set_fault(Fault::Kind::invalid_argument, t,
              format("%s %u at %s: a named barrier is 1 to %u (barrier 0 is __syncthreads')", op,
                     id, where(site).c_str(), kNamedBarriers - 1));
    stop_faulted(t);
  }
  if (threads == 0 || threads % kWarpSize != 0 || threads > block_warps * kWarpSize) {
    set_fault(Fault::Kind::invalid_argument, t,
              format("%s %u, %u at %s: the thread count must be a multiple of 32 from 32 to the "
                     "block's %u warps",
                     op, id, threads, where(site).c_str(), block_warps));
    stop_faulted(t);
  }
  NamedBarrier& b = g_launch.named[id];
  if (b.open && b.count != threads) {
    set_fault(Fault::Kind::barrier_divergence, t,
              format("%s %u, %u at %s does not match the %u threads %s waits for there at %s: "
                     "every arrival at a named barrier must name the same thread count",
                     op, id, threads, where(site).c_str(), b.count, thread_name(*b.first).c_str(),
                     where(b.site).c_str()));
    stop_faulted(t);
  }
  if (!b.open) {
    b.open = true;
    b.count = threads;
    b.arrived = 0;
    b.site = site;
    b.first = &t;
    b.lanes.assign(block_warps, 0u);
    b.sync = new_sync(true);
  }
  ++b.arrived;
  b.lanes[t.warp] |= 1u << t.lane;
  // Every arrival releases what it wrote; only bar.sync's waiters acquire when they pass.
  if (b.sync != nullptr) {
    __tsan_release(b.sync);
    if (wait) ++b.sync->pending;
  }
  ++g_launch.events;
  if (b.arrived < b.count) {
    if (!wait) return;  // bar.arrive: released what it wrote, goes on
    t.wait = Wait::named_barrier;
    t.op = op;
    t.named_id = id;
    t.status = Status::blocked;
    park(t);
    return;
  }
  // The count is reached. bar is .aligned: a warp arrives with all its lanes or not at all
  // (lanes that arrived and exited since, as a producer does after bar.arrive, count).
  for (unsigned w = 0; w < block_warps; ++w) {
    if (b.lanes[w] == 0 || (live_lanes(w) & ~b.lanes[w]) == 0) continue;
    const unsigned missing = live_lanes(w) & ~b.lanes[w];
    set_fault(Fault::Kind::barrier_divergence, t,
              format("%s %u, %u at %s completed with %d of warp %u's lanes, without lane %u: "
                     "bar.sync and bar.arrive are .aligned, every lane of a warp executes them",
                     op, id, threads, where(b.site).c_str(), __builtin_popcount(b.lanes[w]), w,
                     static_cast<unsigned>(__builtin_ctz(missing))));
    stop_faulted(t);
  }
  SyncObject* sync = b.sync;
  for (Thread& u : g_launch.threads) {
    if (u.status != Status::blocked || u.wait != Wait::named_barrier || u.named_id != id) continue;
    u.sync = sync;
    u.wait = Wait::none;
    u.status = Status::runnable;
  }
  b.open = false;
  if (sync == nullptr) return;
  if (wait) {  // the last arrival passes at once
    __tsan_acquire(sync);
    --sync->pending;
  }
  if (sync->pending == 0) delete sync;
}

bool warpgroup_aligned(const char* name, Site site) {
  const RuntimeScope runtime;
  Thread& t = self();
  t.site = site;
  const unsigned group = t.linear / kWarpgroupThreads;
  if ((group + 1) * kWarpgroupThreads > g_launch.threads_per_block) {
    set_fault(Fault::Kind::warp_collective, t,
              format("%s at %s needs a whole warpgroup of %u threads (warps 4k to 4k + 3), but "
                     "the block has %u threads",
                     name, where(site).c_str(), kWarpgroupThreads, g_launch.threads_per_block));
    stop_faulted(t);
  }
  WarpgroupEpisode& e = g_launch.warpgroups[group];
  if (e.open && ((e.name != name && std::strcmp(e.name, name) != 0) || e.site.line != site.line ||
                 (e.site.file != site.file && std::strcmp(e.site.file, site.file) != 0))) {
    set_fault(Fault::Kind::warp_collective, t,
              format("%s at %s does not match %s at %s, where warp %u of the warpgroup waits: "
                     "warpgroup-wide operations are .aligned, all 4 warps must execute the same one",
                     name, where(site).c_str(), e.name, where(e.site).c_str(), e.first->warp));
    stop_faulted(t);
  }
  if (!e.open) e = WarpgroupEpisode{true, name, site, 0u, &t};
  ++e.arrived;
  t.wait = Wait::warpgroup;
  t.op = name;
  if (e.arrived < kWarpgroupThreads) {
    t.status = Status::blocked;
    park(t);
    if (g_launch.faulted) stop_faulted(t);
    return false;
  }
  // The last to arrive performs the operation for the warpgroup before anyone runs on.
  const unsigned first = group * kWarpgroupThreads;
  for (unsigned i = first; i < first + kWarpgroupThreads; ++i) {
    Thread& u = g_launch.threads[i];
    u.wait = Wait::none;
    if (&u != &t) u.status = Status::runnable;
  }
  e.open = false;
  ++g_launch.events;
  return true;
}

void poll_yield(const char* op, const void* object, unsigned parity, Site site) {
  const RuntimeScope runtime;
  Thread& t = self();
  t.site = site;
  t.op = op;
  t.polled = object;
  t.poll_parity = parity;
  t.stale_poll = t.poll_events == g_launch.events;
  t.poll_events = g_launch.events;
  t.wait = Wait::poll;  // still runnable: resumed in the next sweep
  park(t);
  t.wait = Wait::none;
}

void note_event() { ++g_launch.events; }

void* block_start_sync() { return &g_block_start; }
void* block_end_sync() { return &g_block_end; }

IgnoreAccesses::IgnoreAccesses() {
  if (!race_mode() || __tsan_ignore_thread_begin == nullptr || g_launch.running == nullptr) return;
  __tsan_ignore_thread_begin();
  ++g_launch.running->tsan_ignores;
  active_ = true;
}
IgnoreAccesses::~IgnoreAccesses() {
  if (!active_) return;
  --g_launch.running->tsan_ignores;
  __tsan_ignore_thread_end();
}

std::size_t dynamic_shared_size() { return g_launch.shared_bytes; }

void warp_fault(unsigned lane, Fault::Kind kind, const char* what) {
  const RuntimeScope runtime;
  Thread& t = self();
  set_fault(kind, lane_thread(t, lane), what);  // the message's temporaries end here: this
  stop_faulted(t);                              // fiber's frames are never unwound
}

std::string site_string(Site site) { return where(site); }

RuntimeScope::RuntimeScope() {
  if (g_launch.running != nullptr) ++g_launch.running->runtime_depth;
}
RuntimeScope::~RuntimeScope() {
  if (g_launch.running != nullptr) --g_launch.running->runtime_depth;
}

bool in_runtime() { return g_launch.running != nullptr && g_launch.running->runtime_depth > 0; }

unsigned live_lanes(unsigned warp) {
  const Warp& w = g_launch.warps[warp];
  return w.existing & ~w.exited;
}

unsigned warp_vote(VoteOp op, unsigned mask, int predicate, Site site) {
  const RuntimeScope runtime;
  Thread& t = self();
  t.in = predicate != 0;
  switch (op) {
    case VoteOp::ballot: warp_collective(WarpOp::ballot, "__ballot_sync", mask, site); break;
    case VoteOp::any: warp_collective(WarpOp::any, "__any_sync", mask, site); break;
    case VoteOp::all: warp_collective(WarpOp::all, "__all_sync", mask, site); break;
  }
  return static_cast<unsigned>(t.out);
}

}  // namespace detail

}  // namespace wb::sim

/// UndefinedBehaviorSanitizer's report hook (a weak symbol in its runtime that this definition
/// replaces): UBSan calls no death callback, so name the CUDA thread here.
extern "C" void __ubsan_on_report() { wb::sim::detail::on_sanitizer_death(); }

namespace wb::sim {

const WbSimCurrent* current() { return wb_sim_current.active != 0 ? &wb_sim_current : nullptr; }

unsigned char* dynamic_shared_bytes() {
  if (wb_sim_current.active == 0) {
    throw Fault(Fault::Kind::invalid_argument,
                "wb::sim: dynamic shared memory exists only inside a running kernel");
  }
  return detail::g_launch.shared;
}

void set_block_order(BlockOrder order) {
  std::lock_guard<std::mutex> lock(detail::g_launch_mutex);
  detail::g_block_order = order;
}

BlockOrder block_order() {
  std::lock_guard<std::mutex> lock(detail::g_launch_mutex);
  return detail::g_block_order;
}

}  // namespace wb::sim
