// Per-access instrumentation: classification, memcheck, initcheck and profile counters
// (common/sim/access.hpp explains the model; docs/simulator.md the choices).
//
// Everything here runs on the launching OS thread (launches are serialized) between fiber
// switches, so it needs no locks. An ordinary sim build never calls on_access(), and the
// scheduler's calls return at once unless the binary is instrumented.
#include "common/sim/access.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "common/sim/access_runtime.hpp"
#include "common/sim/image.hpp"
#include "common/sim/sanitizers.hpp"

namespace wb::sim {

AccessCounts& AccessCounts::operator+=(const AccessCounts& o) {
  bytes += o.bytes;
  requests += o.requests;
  units += o.units;
  ideal_units += o.ideal_units;
  return *this;
}

TrafficCounts& TrafficCounts::operator+=(const TrafficCounts& o) {
  global_load += o.global_load;
  global_store += o.global_store;
  shared_load += o.shared_load;
  shared_store += o.shared_store;
  return *this;
}

namespace detail {
namespace {

constexpr std::size_t kSectorBytes = 32;
constexpr std::size_t kBanks = 32;
constexpr std::size_t kBankBytes = 4;
constexpr std::size_t kPhaseBytes = kBanks * kBankBytes;  // one pass of the banks: 128 bytes
constexpr std::size_t kTileChunkBytes = 16;               // one row address of ldmatrix
constexpr unsigned kTileChunksPerPhase = 8;

enum class Space : unsigned char { global, shared };

struct Buffer {
  std::uintptr_t lo = 0, hi = 0;
  std::string name;
  unsigned id = 0;
  std::vector<unsigned char> written;  // initcheck: one flag per byte
};

/// Where an access landed. Described in words (what_of) only for a message: every access
/// classifies, so the region itself holds no string.
struct Region {
  enum class Kind : unsigned char {
    untracked_constant, constant, shared_array, dynamic_shared, buffer
  };
  Kind kind = Kind::untracked_constant;
  Space space = Space::global;
  std::uintptr_t lo = 0, hi = 0;
  std::vector<unsigned char>* written = nullptr;  // nullptr: not tracked (static data)
  const Buffer* buffer = nullptr;
  const StaticObject* object = nullptr;  // a constant or a __shared__ array
};

// ---- Profile records ---------------------------------------------------------------------

/// The access sites (instructions) met so far, numbered densely in the order they were met.
/// Every profiled access looks its pc up, so this is a flat table with linear probing and a
/// multiplicative hash: std::unordered_map's prime modulo cost a fifth of a profiled run.
class SiteIds {
 public:
  std::uint32_t id(const void* pc) {
    if (2 * (pcs_.size() + 1) > slots_.size()) grow();
    std::size_t i = slot_of(pc);
    for (; slots_[i].pc != nullptr; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].pc == pc) return slots_[i].id;
    }
    slots_[i] = Slot{pc, static_cast<std::uint32_t>(pcs_.size())};
    pcs_.push_back(pc);
    return slots_[i].id;
  }
  const void* pc(std::uint32_t id) const { return pcs_[id]; }

 private:
  struct Slot {
    const void* pc = nullptr;  // never a real pc: pcs are return addresses
    std::uint32_t id = 0;
  };
  std::size_t slot_of(const void* pc) const {
    const auto h = reinterpret_cast<std::uintptr_t>(pc) * 0x9e3779b97f4a7c15ull;
    return static_cast<std::size_t>(h >> 32) & (slots_.size() - 1);
  }
  void grow() {
    slots_.assign(slots_.empty() ? 1024 : 2 * slots_.size(), Slot{});
    for (std::uint32_t id = 0; id < pcs_.size(); ++id) {
      std::size_t i = slot_of(pcs_[id]);
      while (slots_[i].pc != nullptr) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = Slot{pcs_[id], id};
    }
  }
  std::vector<Slot> slots_;       // a power of two, at most half full
  std::vector<const void*> pcs_;  // by id
};

/// One instruction's open requests in one warp. The simulator runs a thread until it waits
/// (a barrier, a warp collective), so lane 0 may issue many requests of an instruction before
/// lane 1 issues its first: the k-th execution by each lane joins request k, which closes when
/// every live lane of the warp has joined it. Each lane appends to a log of its own (lane 0's
/// thousand accesses are written one after another, not a thousand requests apart), and a
/// request gathers its lanes when it closes. k counts from the last time every request was
/// closed, when the logs start again.
struct SiteRequests {
  struct LaneAccess {
    std::uintptr_t address;
    std::uint32_t bytes;
  };
  /// What the request is, as the last lane to join it saw (all lanes of one instruction read
  /// the same kind of memory), and who joined.
  struct Request {
    std::uintptr_t base;  // the shared array or dynamic memory the request reads (shared)
    int buffer;           // index into the launch's buffers (global)
    Space space;
    bool store;
    bool closed;
    unsigned joined;  // the lanes that have made their k-th execution, a bit each
  };
  std::uint32_t block = 0;            // the block (by count) this state belongs to
  std::size_t head = 0;               // requests before it are closed
  std::vector<Request> requests;      // by k
  std::vector<LaneAccess> lanes[32];  // lanes[l][k]: lane l's k-th execution
};

struct LaunchRecord {
  LaunchProfile profile;
  std::vector<TrafficCounts> by_site_id;         // by SiteIds id; sites not met have no requests
  std::map<std::string, TrafficCounts> by_site;  // WMMA tile operations (they know their site)
  std::unordered_map<unsigned, std::size_t> buffer_index;  // Buffer::id -> profile.buffers
  const Buffer* slot_buffer = nullptr;                     // the last buffer_slot() answer, a cache
  int slot = -1;
};

// ---- State ---------------------------------------------------------------------------------

struct State {
  bool instrumented = false;
  std::map<std::uintptr_t, Buffer> buffers;  // by lo
  unsigned next_buffer_id = 0;
  const Buffer* last_buffer = nullptr;  // the one the last access hit (a cache)

  bool in_launch = false;
  LaunchInfo launch{};
  std::string kernel;  // launch.kernel without anonymous namespaces
  std::set<std::string> kernels;  // every kernel launched so far, by that name
  const StaticObject* shared_array_ok = nullptr;  // the last __shared__ array this launch may use
  Region last_static;  // the static object the last access to one hit (a cache; none: untracked)
  std::vector<unsigned char> dynamic_written;
  std::unordered_map<std::uintptr_t, std::vector<unsigned char>> static_written;  // by array lo
  std::uintptr_t stack_lo = 0, stack_hi = 0;
  int tile_depth = 0;

  bool profiling = false;
  bool tracing = false;  // profiling, and keeping every global access and shared request
  std::vector<LaunchRecord> records;
  SiteIds sites;
  std::uint32_t block_count = 0;  // blocks begun while profiling: SiteRequests::block
  std::vector<std::vector<SiteRequests>> warp_sites;        // [warp][site id]
  std::vector<std::pair<unsigned, std::uint32_t>> touched;  // (warp, site) of this block
};

State& state() {
  static State s;
  return s;
}

std::string format_bytes_at(std::size_t bytes, std::uintptr_t address) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%zu bytes at 0x%" PRIxPTR, bytes, address);
  return buf;
}

std::string buffer_what(const Buffer& b) {
  return "device buffer " + b.name + " (" + format_bytes_at(b.hi - b.lo, b.lo) + ")";
}

/// For messages: "device buffer y (1024 bytes at 0x...)", "__shared__ array tile (...)", ...
std::string what_of(const Region& r) {
  switch (r.kind) {
    case Region::Kind::buffer: return buffer_what(*r.buffer);
    case Region::Kind::dynamic_shared:
      return "the block's dynamic shared memory (" + std::to_string(r.hi - r.lo) + " bytes)";
    case Region::Kind::shared_array:
      return "__shared__ array " + r.object->name + " (" + std::to_string(r.hi - r.lo) + " bytes)";
    case Region::Kind::constant: return "constant " + r.object->name;
    case Region::Kind::untracked_constant: break;
  }
  return "a constant of the program";
}

[[noreturn]] void memory_fault(Fault::Kind kind, const std::string& what, const void* pc) {
  const std::string message = what + ", at " + source_line(pc);
  warp_fault(wb_sim_current.lane, kind, message.c_str());
}

[[noreturn]] void out_of_bounds(std::uintptr_t a, std::size_t bytes, bool store,
                                const std::string& why, const void* pc) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "memcheck: invalid %s of %zu bytes at 0x%" PRIxPTR ": ",
                store ? "write" : "read", bytes, a);
  memory_fault(Fault::Kind::memory_access, buf + why, pc);
}

/// Why `a` is outside everything a kernel may touch, naming the nearest thing it missed: the
/// block's dynamic shared memory and the device buffers lie in one heap, so an address just past
/// a buffer may also lie a little past the shared memory (of 0 bytes, say); the nearer one is
/// what the kernel meant.
std::string miss_reason(std::uintptr_t a) {
  State& s = state();
  char buf[256];
  std::string reason = "not in any device buffer, the block's shared memory or this thread's stack";
  std::uintptr_t nearest = ~std::uintptr_t{0};
  const auto consider = [&](std::uintptr_t distance, std::uintptr_t limit, const char* format,
                            const std::string& what) {
    if (distance >= limit || distance >= nearest) return;
    nearest = distance;
    std::snprintf(buf, sizeof buf, format, static_cast<std::size_t>(distance));
    reason = buf + what;
  };
  const auto shared_lo = reinterpret_cast<std::uintptr_t>(s.launch.dynamic_shared);
  const std::uintptr_t shared_hi = shared_lo + s.launch.dynamic_shared_bytes;
  if (shared_lo != 0 && a >= shared_hi) {
    consider(a - shared_hi, kPhaseBytes * 64, "%zu bytes past the end of ",
             "the block's dynamic shared memory (" +
                 std::to_string(s.launch.dynamic_shared_bytes) + " bytes)");
  }
  auto after = s.buffers.upper_bound(a);
  if (after != s.buffers.begin()) {
    const Buffer& below = std::prev(after)->second;
    if (a >= below.hi) consider(a - below.hi, 1u << 20, "%zu bytes past the end of ", buffer_what(below));
  }
  if (after != s.buffers.end()) {
    consider(after->second.lo - a, 1u << 20, "%zu bytes before ", buffer_what(after->second));
  }
  return reason;
}

/// "N bytes past the end of the __shared__ array X (B bytes)" when `a` lies a little past one.
std::string past_shared_array(std::uintptr_t a, const StaticObject* below) {
  if (below == nullptr || below->owner.empty() || a < below->hi || a - below->hi >= kPhaseBytes * 64) {
    return "";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu bytes past the end of ", static_cast<std::size_t>(a - below->hi));
  return buf + ("the __shared__ array " + below->name + " (" + std::to_string(below->hi - below->lo) +
                " bytes)");
}

/// The static object at `a`, as a region. A kernel may touch its __shared__ arrays (function-
/// local statics), constants and the simulator's built-in variables; anything else in the
/// program's static data (another function's guard variable, a host global) is a fault.
Region static_region(std::uintptr_t a, std::size_t bytes, bool store, const void* pc) {
  State& s = state();
  Region r;
  r.lo = a;
  r.hi = a + bytes;
  const StaticObject* o = static_object_near(a);
  if (o == nullptr || a >= o->hi) {  // between objects: alignment padding, or a constant pool
    const std::string past = past_shared_array(a, o);
    if (!past.empty()) out_of_bounds(a, bytes, store, past, pc);
    return r;  // constants the compiler placed: allowed, not tracked
  }
  if (o->owner.empty()) {
    // The simulator's per-thread state (threadIdx, blockIdx, ...): compared by address, as
    // every read of a built-in variable lands here.
    if (!o->writable || o->lo == reinterpret_cast<std::uintptr_t>(&wb_sim_current)) {
      r.lo = o->lo;
      r.hi = o->hi;
      r.kind = Region::Kind::constant;
      r.object = o;
      return r;
    }
    std::string why = past_shared_array(a, o->lo > 0 ? static_object_near(o->lo - 1) : nullptr);
    if (why.empty()) why = "in the host variable " + o->name + ", which is not device memory";
    out_of_bounds(a, bytes, store, why, pc);
  }
  if (o != s.shared_array_ok && o->owner != s.kernel && s.kernels.count(o->owner) != 0) {
    std::string why = past_shared_array(a, o->lo > 0 ? static_object_near(o->lo - 1) : nullptr);
    if (why.empty()) {
      why = "in the __shared__ array " + o->name + " of another kernel, outside the shared memory "
            "of this one";
    }
    out_of_bounds(a, bytes, store, why, pc);
  }
  s.shared_array_ok = o;  // its owner checked once, not at every access
  r.lo = o->lo;
  r.hi = o->hi;
  r.space = Space::shared;
  r.kind = Region::Kind::shared_array;
  r.object = o;
  std::vector<unsigned char>& written = s.static_written[o->lo];
  if (written.size() != o->hi - o->lo) written.assign(o->hi - o->lo, 0);
  r.written = &written;
  return r;
}

/// Whether `a` lies in the running block's dynamic shared memory.
bool in_dynamic_shared(const State& s, std::uintptr_t a) {
  const auto lo = reinterpret_cast<std::uintptr_t>(s.launch.dynamic_shared);
  return a >= lo && a < lo + s.launch.dynamic_shared_bytes;
}

/// The live device buffer holding `a`, or nullptr.
const Buffer* buffer_holding(const State& s, std::uintptr_t a) {
  auto after = s.buffers.upper_bound(a);
  return after != s.buffers.begin() && a < std::prev(after)->second.hi ? &std::prev(after)->second
                                                                       : nullptr;
}

/// Classifies [a, a + bytes); local memory returns false. Faults for memory a kernel may not
/// touch.
bool classify(State& s, std::uintptr_t a, std::size_t bytes, bool store, const void* pc,
              Region& r) {
  if (a >= s.stack_lo && a < s.stack_hi) return false;  // registers and local memory
  const auto params = reinterpret_cast<std::uintptr_t>(s.launch.params);
  if (a >= params && a < params + s.launch.params_bytes) return false;  // the kernel's arguments
  if (in_dynamic_shared(s, a)) {
    const auto shared_lo = reinterpret_cast<std::uintptr_t>(s.launch.dynamic_shared);
    r.space = Space::shared;
    r.lo = shared_lo;
    r.hi = shared_lo + s.launch.dynamic_shared_bytes;
    r.written = &s.dynamic_written;
    r.kind = Region::Kind::dynamic_shared;
    return true;
  }
  const Buffer* b = s.last_buffer;
  if (b == nullptr || a < b->lo || a >= b->hi) {
    // The built-in variables and __shared__ arrays are read as often as the buffers.
    if (s.last_static.kind != Region::Kind::untracked_constant && a >= s.last_static.lo &&
        a < s.last_static.hi) {
      r = s.last_static;
      return true;
    }
    b = buffer_holding(s, a);
  }
  if (b != nullptr) {
    s.last_buffer = b;
    r.space = Space::global;
    r.lo = b->lo;
    r.hi = b->hi;
    r.buffer = b;
    r.written = const_cast<std::vector<unsigned char>*>(&b->written);
    r.kind = Region::Kind::buffer;
    return true;
  }
  if (in_program_image(a)) {
    r = static_region(a, bytes, store, pc);
    if (r.kind != Region::Kind::untracked_constant) s.last_static = r;
    return true;
  }
  out_of_bounds(a, bytes, store, miss_reason(a), pc);
}

// ---- Profile -------------------------------------------------------------------------------

AccessCounts& counts_of(TrafficCounts& t, Space space, bool store) {
  if (space == Space::global) return store ? t.global_store : t.global_load;
  return store ? t.shared_store : t.shared_load;
}

// Every access of a profiled launch passes through the functions below: their scratch
// vectors are reused (cleared, never freed), so that a request costs no allocation.
using Parts = std::vector<std::pair<std::uintptr_t, std::size_t>>;

/// The distinct units of `Unit` bytes (sectors, bank words) the parts touch, by index, sorted.
/// (Unit is a power of two known at compile time: the divisions are shifts, and this loop is
/// the hottest of a profiled run.)
template <std::size_t Unit>
const std::vector<std::uintptr_t>& units_touched(const Parts& parts) {
  static_assert((Unit & (Unit - 1)) == 0, "a power of two");
  static std::vector<std::uintptr_t> ids;
  ids.clear();
  for (const auto& [a, n] : parts) {
    for (std::uintptr_t id = a / Unit; id <= (a + n - 1) / Unit; ++id) ids.push_back(id);
  }
  if (!std::is_sorted(ids.begin(), ids.end())) std::sort(ids.begin(), ids.end());  // mostly sorted
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

/// Distinct 32-byte sectors of a global request.
std::uint64_t sectors(const Parts& parts) {
  return units_touched<kSectorBytes>(parts).size();
}

/// Wavefronts of one phase of a shared request: the most distinct 4-byte words in one bank.
std::uint64_t phase_wavefronts(const Parts& parts) {
  std::uint64_t per_bank[kBanks] = {};
  std::uint64_t most = 0;
  for (std::uintptr_t w : units_touched<kBankBytes>(parts))
    most = std::max(most, ++per_bank[w % kBanks]);
  return most;
}

/// Adds one finished request (its parts grouped into the phases the hardware serves) to the
/// launch's totals, its line's and its buffer's.
void add_request(LaunchRecord& rec, TrafficCounts& line, Space space, bool store, int buffer,
                 const std::vector<Parts>& phases) {
  AccessCounts c;
  c.requests = 1;
  static Parts all;  // a global request's parts: its sectors are counted over all of them
  all.clear();
  for (const auto& phase : phases) {
    if (phase.empty()) continue;
    for (const auto& part : phase) c.bytes += part.second;
    if (space == Space::shared) {
      c.units += phase_wavefronts(phase);
      c.ideal_units += 1;
    } else {
      all.insert(all.end(), phase.begin(), phase.end());
    }
  }
  if (space == Space::global) c.units = sectors(all);
  counts_of(rec.profile.counts, space, store) += c;
  counts_of(line, space, store) += c;
  if (buffer >= 0) {
    BufferTraffic& b = rec.profile.buffers[static_cast<std::size_t>(buffer)];
    (store ? b.stored : b.loaded) += c.bytes;
  }
}

/// Keeps the lanes of a finished shared request of a traced launch, each with its phase.
void trace_shared(LaunchRecord& rec, const std::uintptr_t (&address)[32], std::uintptr_t base,
                  unsigned mask, const std::uint32_t (&bytes)[32], unsigned lanes_per_phase,
                  bool store, bool ldmatrix) {
  const uint3 b = wb_sim_current.block;
  const dim3 g = wb_sim_current.grid_dim;
  std::vector<SharedAccess>& out = rec.profile.shared_trace;
  const std::uint32_t request = out.empty() ? 0 : out.back().request + 1;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    out.push_back(SharedAccess{request, b.x + g.x * (b.y + g.y * b.z), wb_sim_current.warp, lane,
                               lane / lanes_per_phase, address[lane] - base, bytes[lane], store,
                               ldmatrix});
  }
}

/// Counts request k of instruction `site`, joined by the lanes of `mask`.
void close_request(State& s, std::uint32_t site, const SiteRequests& sr, std::size_t k,
                   unsigned mask) {
  LaunchRecord& rec = s.records.back();
  const SiteRequests::Request& q = sr.requests[k];
  std::uintptr_t address[32] = {};
  std::uint32_t bytes[32] = {};
  std::uint32_t widest = 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    address[lane] = sr.lanes[lane][k].address;
    bytes[lane] = sr.lanes[lane][k].bytes;
    widest = std::max(widest, bytes[lane]);
  }
  // Lanes in phases of 128 bytes: 32 lanes of up to 4 bytes, 16 of 8, 8 of 16.
  const unsigned lanes_per_phase =
      q.space == Space::global || widest <= kBankBytes
          ? 32u
          : static_cast<unsigned>(std::max<std::size_t>(1, kPhaseBytes / widest));
  static std::vector<Parts> phases;
  phases.resize((32 + lanes_per_phase - 1) / lanes_per_phase);
  for (Parts& p : phases) p.clear();
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (mask >> lane & 1u) phases[lane / lanes_per_phase].emplace_back(address[lane], bytes[lane]);
  }
  if (site >= rec.by_site_id.size()) rec.by_site_id.resize(site + 1);
  add_request(rec, rec.by_site_id[site], q.space, q.store, q.buffer, phases);
  if (s.tracing && q.space == Space::shared)
    trace_shared(rec, address, q.base, mask, bytes, lanes_per_phase, q.store, false);
}

int buffer_slot(LaunchRecord& rec, const Buffer* b) {
  if (b == nullptr) return -1;
  if (b == rec.slot_buffer) return rec.slot;
  auto [it, inserted] = rec.buffer_index.emplace(b->id, rec.profile.buffers.size());
  if (inserted) rec.profile.buffers.push_back(BufferTraffic{b->name, b->hi - b->lo, 0, 0});
  rec.slot_buffer = b;
  rec.slot = static_cast<int>(it->second);
  return rec.slot;
}

/// Every request closed (or the block over): the logs start again at k = 0.
void restart(SiteRequests& sr) {
  sr.head = 0;
  sr.requests.clear();
  for (auto& log : sr.lanes) log.clear();
}

/// The open requests of instruction `site` in `warp`, reset when first met in this block.
SiteRequests& site_requests(State& s, unsigned warp, std::uint32_t site) {
  std::vector<SiteRequests>& sites = s.warp_sites[warp];
  if (site >= sites.size()) sites.resize(site + 1);
  SiteRequests& sr = sites[site];
  if (sr.block != s.block_count) {
    sr.block = s.block_count;
    restart(sr);
    s.touched.emplace_back(warp, site);
  }
  return sr;
}

void record(State& s, const Region& r, std::uintptr_t a, std::size_t bytes, bool store,
            const void* pc) {
  if (r.space == Space::global && r.buffer == nullptr) return;  // constants: not traffic
  const unsigned linear = wb_sim_current.linear, warp = wb_sim_current.warp;
  if (s.tracing && r.space == Space::global) {
    const uint3 b = wb_sim_current.block;
    const dim3 g = wb_sim_current.grid_dim;
    s.records.back().profile.trace.push_back(
        GlobalAccess{b.x + g.x * (b.y + g.y * b.z), linear, buffer_slot(s.records.back(), r.buffer),
                     a - r.buffer->lo, static_cast<std::uint32_t>(bytes), store});
  }
  const std::uint32_t site = s.sites.id(pc);
  SiteRequests& sr = site_requests(s, warp, site);
  std::vector<SiteRequests::LaneAccess>& log = sr.lanes[wb_sim_current.lane];
  const std::size_t k = log.size();
  log.push_back({a, static_cast<std::uint32_t>(bytes)});
  if (k == sr.requests.size()) sr.requests.push_back({});  // the first lane to make it opens it
  SiteRequests::Request& q = sr.requests[k];
  q.space = r.space;
  q.store = store;
  q.buffer = buffer_slot(s.records.back(), r.buffer);
  q.base = r.lo;
  q.joined |= 1u << wb_sim_current.lane;
  // Closed once every live lane has joined; a request an exited lane joined is closed with
  // the block.
  if (q.joined != live_lanes(warp)) return;
  close_request(s, site, sr, k, q.joined);
  q.closed = true;
  while (sr.head < sr.requests.size() && sr.requests[sr.head].closed) ++sr.head;
  if (sr.head == sr.requests.size()) restart(sr);
}

/// At the end of a block: the requests some live lane never joined (it diverged or exited).
void close_open_requests() {
  State& s = state();
  for (const auto& [warp, site] : s.touched) {
    SiteRequests& sr = s.warp_sites[warp][site];
    for (std::size_t k = sr.head; k < sr.requests.size(); ++k) {
      if (!sr.requests[k].closed) close_request(s, site, sr, k, sr.requests[k].joined);
    }
    restart(sr);
  }
  s.touched.clear();
}

}  // namespace

// ---- Entry points --------------------------------------------------------------------------

void set_instrumented() { state().instrumented = true; }

void note_device_alloc(const void* ptr, std::size_t bytes) {
  State& s = state();
  if (!s.instrumented) return;
  const auto lo = reinterpret_cast<std::uintptr_t>(ptr);
  Buffer b;
  b.lo = lo;
  b.hi = lo + bytes;
  b.id = s.next_buffer_id++;
  b.name = "#" + std::to_string(b.id);
  b.written.assign(bytes, 0);
  s.buffers[lo] = std::move(b);
  s.last_buffer = nullptr;
}

void note_device_free(const void* ptr) {
  State& s = state();
  if (!s.instrumented) return;
  s.buffers.erase(reinterpret_cast<std::uintptr_t>(ptr));
  s.last_buffer = nullptr;
}

void note_device_write(const void* ptr, std::size_t bytes) {
  State& s = state();
  if (!s.instrumented || bytes == 0) return;
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  auto after = s.buffers.upper_bound(a);
  if (after == s.buffers.begin()) return;
  Buffer& b = std::prev(after)->second;
  if (a >= b.hi) return;
  const std::size_t from = a - b.lo, to = std::min<std::size_t>(b.written.size(), from + bytes);
  std::fill(b.written.begin() + static_cast<std::ptrdiff_t>(from),
            b.written.begin() + static_cast<std::ptrdiff_t>(to), 1);
}

void access_launch_begin(const LaunchInfo& launch) {
  State& s = state();
  if (!s.instrumented) return;
  s.in_launch = true;
  s.launch = launch;
  s.kernel = without_anonymous_namespaces(launch.kernel);
  s.shared_array_ok = nullptr;
  s.last_static = Region{};
  s.kernels.insert(s.kernel);
  s.last_buffer = nullptr;
  if (s.profiling) {
    LaunchRecord rec;
    rec.profile.kernel = launch.kernel;
    rec.profile.grid = launch.grid;
    rec.profile.block = launch.block;
    rec.profile.dynamic_shared_bytes = launch.dynamic_shared_bytes;
    s.records.push_back(std::move(rec));
  }
}

void access_block_begin() {
  State& s = state();
  if (!s.in_launch) return;
  s.dynamic_written.assign(s.launch.dynamic_shared_bytes, 0);
  for (auto& [lo, written] : s.static_written) std::fill(written.begin(), written.end(), 0);
  if (s.profiling) {
    const unsigned threads = s.launch.block.x * s.launch.block.y * s.launch.block.z;
    if (s.warp_sites.size() < (threads + 31) / 32) s.warp_sites.resize((threads + 31) / 32);
    ++s.block_count;  // every SiteRequests met from here on is reset first
    s.touched.clear();
  }
}

void access_thread_stack(const void* lo, const void* hi) {
  State& s = state();
  s.stack_lo = reinterpret_cast<std::uintptr_t>(lo);
  s.stack_hi = reinterpret_cast<std::uintptr_t>(hi);
}

void access_barrier() {
  State& s = state();
  if (s.in_launch && s.profiling) ++s.records.back().profile.barriers;
}

void access_block_end() {
  State& s = state();
  if (s.in_launch && s.profiling) close_open_requests();
}

void access_launch_end(bool faulted) {
  State& s = state();
  if (!s.in_launch) return;
  s.in_launch = false;
  s.launch = LaunchInfo{};
  s.tile_depth = 0;
  if (s.profiling && faulted) s.records.pop_back();
}

/// memcheck's bound and initcheck's flags for [a, a + bytes) in region `r`, which it starts in;
/// a store marks its bytes written. A fault's message is "<check>: <who>...<at()>" (`at` is
/// called only then: finding a source line is slow, and every access passes here).
template <typename At>
void check_in_region(const Region& r, std::uintptr_t a, std::size_t bytes, bool store,
                     const std::string& who, At at) {
  if (a + bytes > r.hi) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "memcheck: %sinvalid %s of %zu bytes at 0x%" PRIxPTR
                  ": %zu of its bytes lie past the end of ",
                  who.c_str(), store ? "write" : "read", bytes, a,
                  static_cast<std::size_t>(a + bytes - r.hi));
    warp_fault(wb_sim_current.lane, Fault::Kind::memory_access, (buf + what_of(r) + at()).c_str());
  }
  if (r.written == nullptr) return;
  unsigned char* flags = r.written->data() + (a - r.lo);
  if (store) {
    std::fill(flags, flags + bytes, 1);
  } else if (std::find(flags, flags + bytes, 0) != flags + bytes) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "initcheck: %sread of %zu bytes at 0x%" PRIxPTR
                  " (offset %zu) that nothing has written, in ",
                  who.c_str(), bytes, a, static_cast<std::size_t>(a - r.lo));
    const char* since = r.space == Space::shared ? " since the block started" : "";
    warp_fault(wb_sim_current.lane, Fault::Kind::uninitialized_read,
               (buf + what_of(r) + since + at()).c_str());
  }
}

void on_access(const void* address, std::size_t bytes, bool store, const void* pc) {
  if (wb_sim_current.active == 0 || in_runtime()) return;
  const RuntimeScope own;  // what this function calls is not the kernel's either
  State& s = state();
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  Region r;
  if (!classify(s, a, bytes, store, pc, r)) return;
  static const std::string kNobody;
  check_in_region(r, a, bytes, store, kNobody, [pc] { return ", at " + source_line(pc); });
  if (s.profiling && s.tile_depth == 0) record(s, r, a, bytes, store, pc);
}

void begin_tile_elements() { ++state().tile_depth; }
void end_tile_elements() { --state().tile_depth; }

void on_tile_access(const TileAccess& tile) {
  State& s = state();
  if (!s.in_launch || !s.profiling || wb_sim_current.active == 0) return;
  const RuntimeScope own;
  const auto base = reinterpret_cast<std::uintptr_t>(tile.base);
  Region r;
  if (!classify(s, base, tile.row_bytes, tile.store, nullptr, r)) return;
  LaunchRecord& rec = s.records.back();
  // ldmatrix's phases: for each 16-byte column of chunks, rows 0-7, then rows 8-15.
  std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>> phases;
  for (std::size_t chunk = 0; chunk < tile.row_bytes; chunk += kTileChunkBytes) {
    for (unsigned first = 0; first < 16; first += kTileChunksPerPhase) {
      phases.emplace_back();
      for (unsigned row = first; row < first + kTileChunksPerPhase; ++row) {
        phases.back().emplace_back(base + row * tile.ld_bytes + chunk,
                                   std::min(kTileChunkBytes, tile.row_bytes - chunk));
      }
    }
  }
  add_request(rec, rec.by_site[site_string(tile.site)], r.space, tile.store,
              buffer_slot(rec, r.buffer), phases);
}

void on_ldmatrix(const void* const (&rows)[32], Site site) {
  State& s = state();
  if (!s.in_launch || !s.profiling || wb_sim_current.active == 0) return;
  const RuntimeScope own;
  const auto first = reinterpret_cast<std::uintptr_t>(rows[0]);
  Region r;
  if (!classify(s, first, kTileChunkBytes, false, nullptr, r)) return;
  LaunchRecord& rec = s.records.back();
  // One phase per matrix: the 8 lanes that give its rows, 16 bytes each. (Reused, as a kernel
  // issues one ldmatrix per fragment: no allocation per request.)
  static std::vector<Parts> phases(32 / kTileChunksPerPhase);
  for (Parts& p : phases) p.clear();
  for (unsigned lane = 0; lane < 32; ++lane) {
    phases[lane / kTileChunksPerPhase].emplace_back(reinterpret_cast<std::uintptr_t>(rows[lane]),
                                                    kTileChunkBytes);
  }
  add_request(rec, rec.by_site[site_string(site)], r.space, false, buffer_slot(rec, r.buffer),
              phases);
  if (s.tracing && r.space == Space::shared) {
    std::uintptr_t address[32];
    std::uint32_t bytes[32];
    for (unsigned lane = 0; lane < 32; ++lane) {
      address[lane] = reinterpret_cast<std::uintptr_t>(rows[lane]);
      bytes[lane] = static_cast<std::uint32_t>(kTileChunkBytes);
    }
    trace_shared(rec, address, r.lo, ~0u, bytes, kTileChunksPerPhase, false, true);
  }
}

void on_async_access(const std::vector<Parts>& phases, bool store, Site site, const char* what) {
  State& s = state();
  if (!s.in_launch || wb_sim_current.active == 0) return;
  const RuntimeScope own;
  Region first;
  bool any = false;
  for (const Parts& phase : phases) {
    for (const auto& [a, n] : phase) {
      Region r;
      if (in_dynamic_shared(s, a)) {
        r.space = Space::shared;
        r.lo = reinterpret_cast<std::uintptr_t>(s.launch.dynamic_shared);
        r.hi = r.lo + s.launch.dynamic_shared_bytes;
        r.written = &s.dynamic_written;
        r.kind = Region::Kind::dynamic_shared;
      } else if (const Buffer* b = buffer_holding(s, a)) {
        r.space = Space::global;
        r.lo = b->lo;
        r.hi = b->hi;
        r.buffer = b;
        r.written = const_cast<std::vector<unsigned char>*>(&b->written);
        r.kind = Region::Kind::buffer;
      } else {
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "memcheck: %s at %s: %s of %zu bytes at 0x%" PRIxPTR
                      " outside the block's dynamic shared memory and every device buffer",
                      what, site_string(site).c_str(), store ? "write" : "read", n, a);
        warp_fault(wb_sim_current.lane, Fault::Kind::memory_access, buf);
      }
      check_in_region(r, a, n, store, std::string(what) + " at " + site_string(site) + ": ",
                      [] { return std::string(); });
      if (!any) first = r;
      any = true;
    }
  }
  if (!any || !s.profiling) return;
  LaunchRecord& rec = s.records.back();
  add_request(rec, rec.by_site[site_string(site)], first.space, store,
              buffer_slot(rec, first.buffer), phases);
}

void note_async_write(const void* p, std::size_t bytes) {
  State& s = state();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (!s.in_launch || !in_dynamic_shared(s, a)) return;
  const auto lo = reinterpret_cast<std::uintptr_t>(s.launch.dynamic_shared);
  const std::size_t from = a - lo, to = std::min(s.dynamic_written.size(), from + bytes);
  std::fill(s.dynamic_written.begin() + static_cast<std::ptrdiff_t>(from),
            s.dynamic_written.begin() + static_cast<std::ptrdiff_t>(to), 1);
}

AddressSpace address_space(const void* address) {
  State& s = state();
  if (!s.instrumented || !s.in_launch) return AddressSpace::unknown;
  const RuntimeScope own;
  // Looked up without faulting: an address in neither space is the access's own fault, with
  // the kernel's line, when it is made.
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (in_dynamic_shared(s, a)) return AddressSpace::shared;
  if (buffer_holding(s, a) != nullptr) return AddressSpace::global;
  if (in_program_image(a)) {
    const StaticObject* o = static_object_near(a);
    if (o != nullptr && a < o->hi && !o->owner.empty()) return AddressSpace::shared;
  }
  return AddressSpace::unknown;
}

void on_mma(int m, int n, int k) {
  State& s = state();
  if (s.in_launch && s.profiling) s.records.back().profile.mma_flops += 2ull * m * n * k;
}

}  // namespace detail

// ---- Public API ----------------------------------------------------------------------------

bool instrumented() { return detail::state().instrumented; }

bool race_mode() { return detail::tsan_active(); }

void label_device_buffer(const void* ptr, const char* name) {
  detail::State& s = detail::state();
  auto it = s.buffers.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it != s.buffers.end()) it->second.name = name;
}

void start_profile(bool trace_global) {
  detail::State& s = detail::state();
  if (!s.instrumented) {
    throw std::logic_error(
        "wb::sim::start_profile: this program's kernels are not instrumented (run its "
        "instrumented twin)");
  }
  s.records.clear();
  s.profiling = true;
  s.tracing = trace_global;
}

std::vector<LaunchProfile> stop_profile() {
  detail::State& s = detail::state();
  s.profiling = false;
  s.tracing = false;
  // Sites a launch never met have no requests: every request counts one.
  const auto met = [](const TrafficCounts& c) {
    const std::uint64_t requests = c.global_load.requests + c.global_store.requests +
                                   c.shared_load.requests + c.shared_store.requests;
    return requests > 0;
  };
  // One addr2line run for every instruction of every launch.
  std::vector<const void*> pcs;
  for (const detail::LaunchRecord& rec : s.records) {
    for (std::uint32_t site = 0; site < rec.by_site_id.size(); ++site) {
      if (met(rec.by_site_id[site])) pcs.push_back(s.sites.pc(site));
    }
  }
  const std::vector<std::string> lines = detail::kernel_lines(pcs);
  std::size_t next = 0;
  std::vector<LaunchProfile> out;
  for (detail::LaunchRecord& rec : s.records) {
    std::map<std::string, TrafficCounts> by_line = rec.by_site;
    for (const TrafficCounts& counts : rec.by_site_id) {
      if (met(counts)) by_line[lines[next++]] += counts;
    }
    for (auto& [where, counts] : by_line) rec.profile.lines.push_back(LineTraffic{where, counts});
    std::stable_sort(rec.profile.lines.begin(), rec.profile.lines.end(),
                     [](const LineTraffic& a, const LineTraffic& b) {
                       return a.counts.global_load.bytes + a.counts.global_store.bytes >
                              b.counts.global_load.bytes + b.counts.global_store.bytes;
                     });
    out.push_back(std::move(rec.profile));
  }
  s.records.clear();
  return out;
}

}  // namespace wb::sim
