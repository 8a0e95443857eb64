// The PTX wrappers' warp side (mma.m16n8k16, ldmatrix) and the cp.async queues.
#include <cstdio>
#include <cstring>
#include <deque>
#include <vector>

#include "common/half.hpp"
#include "common/sim/access_runtime.hpp"
#include "common/sim/ptx_runtime.hpp"

namespace wb::sim {

WmmaCoord mma_coord(MmaOperand operand, unsigned lane, int reg, int half) {
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  switch (operand) {
    case MmaOperand::a:
      return WmmaCoord{g + 8 * (reg % 2), 2 * t + half + 8 * (reg / 2)};
    case MmaOperand::b:
      return WmmaCoord{2 * t + half + 8 * reg, g};
    case MmaOperand::c:
      break;
  }
  return WmmaCoord{g + 8 * (reg / 2), 2 * t + reg % 2};
}

namespace detail {
namespace {

constexpr int kM = 16, kN = 8, kK = 16;

/// One thread's cp.async queue: copies in issue order, each with its group's number.
struct CpAsyncQueue {
  struct Entry {
    CpAsyncCopy copy;
    unsigned group;
  };
  std::deque<Entry> copies;
  unsigned committed = 0;  ///< groups closed so far; the open group is number `committed`
};

std::vector<CpAsyncQueue>& queues() {
  static std::vector<CpAsyncQueue> q(kMaxThreadsPerBlock);
  return q;
}

/// `role`: which address of the instruction `what` ("row", "destination", "source").
[[noreturn]] void alignment_fault(const char* what, const char* role, const void* p, Site site) {
  char buf[384];
  std::snprintf(buf, sizeof buf, "%s at %s: %s address %p is not 16-byte aligned, as it requires",
                what, site_string(site).c_str(), role, p);
  warp_fault(wb_sim_current.lane, Fault::Kind::invalid_argument, buf);
}

/// Faults where the memcheck twins can tell that `p`, the `role` address of `what`, lies in
/// the other space than the instruction's (`shared` or global): on a GPU that address would
/// be converted into a space it is not in, and read or write garbage.
void require_space(const char* what, const char* role, const void* p, bool shared, Site site) {
  const AddressSpace space = address_space(p);
  if (space == AddressSpace::unknown || (space == AddressSpace::shared) == shared) return;
  const RuntimeScope runtime;
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "memcheck: %s at %s: %s address %p is in %s memory, where it must be in %s memory",
                what, site_string(site).c_str(), role, p, shared ? "global" : "shared",
                shared ? "shared" : "global");
  warp_fault(wb_sim_current.lane, Fault::Kind::memory_access, buf);
}

}  // namespace

namespace {

/// Where each lane's registers sit in the m16n8k16 tiles: mma_coord's answers, computed once
/// (an mma asks for 640 of them; the kernels of chapters 08-11 issue millions).
struct MmaLayout {
  WmmaCoord a[kWarpSize][8];  ///< [lane][2 reg + half]
  WmmaCoord b[kWarpSize][4];  ///< [lane][2 reg + half]
  WmmaCoord c[kWarpSize][4];  ///< [lane][reg]
};

const MmaLayout& mma_layout() {
  static const MmaLayout layout = [] {
    MmaLayout l{};
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
      for (int reg = 0; reg < 4; ++reg) {
        for (int half = 0; half < 2; ++half)
          l.a[lane][2 * reg + half] = mma_coord(MmaOperand::a, lane, reg, half);
        l.c[lane][reg] = mma_coord(MmaOperand::c, lane, reg, 0);
      }
      for (int reg = 0; reg < 2; ++reg)
        for (int half = 0; half < 2; ++half)
          l.b[lane][2 * reg + half] = mma_coord(MmaOperand::b, lane, reg, half);
    }
    return l;
  }();
  return layout;
}

/// The value of a 16-bit A or B element of type T (fragment_value, its switch decided once per
/// mma rather than per element).
template <WmmaType T>
float element_value(std::uint32_t bits) {
  static_assert(T == WmmaType::f16 || T == WmmaType::bf16, "A and B are 16-bit");
  if constexpr (T == WmmaType::f16) return wb::half_bits_to_float(static_cast<std::uint16_t>(bits));
  return wb::bf16_bits_to_float(static_cast<std::uint16_t>(bits));
}

template <WmmaType T>
void mma_m16n8k16() {
  const MmaLayout& l = mma_layout();
  // B transposed (bt[n][k]), so that the products below walk a column of B contiguously.
  float a[kM][kK], bt[kN][kK], c[kM][kN];
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    const std::uint32_t* ra = warp_lane_slot(lane, kWmmaSlotA);
    const std::uint32_t* rb = warp_lane_slot(lane, kWmmaSlotB);
    const std::uint32_t* rc = warp_lane_slot(lane, kWmmaSlotC);
    for (int reg = 0; reg < 4; ++reg) {
      for (int half = 0; half < 2; ++half) {
        const WmmaCoord e = l.a[lane][2 * reg + half];
        a[e.row][e.col] = element_value<T>(ra[reg] >> (16 * half) & 0xffffu);
      }
      const WmmaCoord e = l.c[lane][reg];
      c[e.row][e.col] = fragment_value(WmmaType::f32, rc[reg]);
    }
    for (int reg = 0; reg < 2; ++reg) {
      for (int half = 0; half < 2; ++half) {
        const WmmaCoord e = l.b[lane][2 * reg + half];
        bt[e.col][e.row] = element_value<T>(rb[reg] >> (16 * half) & 0xffffu);
      }
    }
  }
  on_mma(kM, kN, kK);
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    std::uint32_t* rd = warp_lane_slot(lane, kWmmaSlotOut);
    for (int reg = 0; reg < 4; ++reg) {
      const WmmaCoord e = l.c[lane][reg];
      float acc = c[e.row][e.col];
      // a * b is exact in float (11 + 11 or 8 + 8 significand bits): only the additions round,
      // in k order.
      for (int k = 0; k < kK; ++k) acc += a[e.row][k] * bt[e.col][k];
      rd[reg] = float_bits(acc);
    }
  }
}

}  // namespace

void ptx_mma(WmmaType ab, Site site) {
  const RuntimeScope runtime;
  (void)site;
  if (ab == WmmaType::bf16) {
    mma_m16n8k16<WmmaType::bf16>();
  } else {
    mma_m16n8k16<WmmaType::f16>();
  }
}

void ldmatrix_check_row(const void* row, Site site) {
  if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0) {
    const RuntimeScope runtime;
    alignment_fault("ldmatrix", "row", row, site);
  }
  require_space("ldmatrix", "row", row, /*shared=*/true, site);
}

void ldmatrix_row_addresses(const void* (&rows)[kLdmatrixRows]) {
  const RuntimeScope runtime;
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    const std::uint32_t* x = warp_lane_slot(lane, kWmmaSlotA);
    rows[lane] = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(x[0]) |
                                               static_cast<std::uintptr_t>(x[1]) << 32);
  }
}

void ldmatrix_deal(bool trans) {
  const RuntimeScope runtime;
  constexpr int kRowsPerMatrix = 8;
  // Row l (from lane l's slot A, after its address): 8 elements, two per word, low half first.
  const auto element = [](unsigned l, int e) {
    return warp_lane_slot(l, kWmmaSlotA)[2 + e / 2] >> (16 * (e % 2)) & 0xffffu;
  };
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
    std::uint32_t* r = warp_lane_slot(lane, kWmmaSlotOut);
    for (int j = 0; j < 4; ++j) {
      const unsigned m = static_cast<unsigned>(j * kRowsPerMatrix);  // matrix j's first row
      const std::uint32_t lo = trans ? element(m + 2 * t, g) : element(m + g, 2 * t);
      const std::uint32_t hi = trans ? element(m + 2 * t + 1, g) : element(m + g, 2 * t + 1);
      r[j] = lo | hi << 16;
    }
  }
}

void cp_async_check(const void* dst, const void* src, bool full, Site site) {
  const RuntimeScope runtime;
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0)
    alignment_fault("cp.async", "destination", dst, site);
  if (full && reinterpret_cast<std::uintptr_t>(src) % 16 != 0)
    alignment_fault("cp.async", "source", src, site);
  require_space("cp.async", "destination", dst, /*shared=*/true, site);
  if (full) require_space("cp.async", "source", src, /*shared=*/false, site);
}

void cp_async_issue(void* dst, const std::uint32_t (&data)[4]) {
  const RuntimeScope runtime;
  // In flight, the destination holds no defined value (a GPU may have written all of it, some
  // or none): 0xff bytes, a NaN in every floating type, until the wait lands the copy. Written
  // here, outside the instrumentation, so that initcheck still sees the bytes as unwritten and
  // a profile counts no store.
  std::memset(dst, 0xff, sizeof(CpAsyncCopy::data));
  CpAsyncQueue& q = queues()[wb_sim_current.linear];
  CpAsyncCopy copy;
  copy.dst = dst;
  for (int i = 0; i < 4; ++i) copy.data[i] = data[i];
  q.copies.push_back({copy, q.committed});
}

void cp_async_commit() {
  const RuntimeScope runtime;
  ++queues()[wb_sim_current.linear].committed;
}

bool cp_async_next_landing(int keep, CpAsyncCopy& copy) {
  const RuntimeScope runtime;
  CpAsyncQueue& q = queues()[wb_sim_current.linear];
  if (q.copies.empty()) return false;
  // Groups numbered below committed - keep have landed; the open group never has.
  const unsigned landed = q.committed > static_cast<unsigned>(keep) ? q.committed - keep : 0;
  if (q.copies.front().group >= landed) return false;
  copy = q.copies.front().copy;
  q.copies.pop_front();
  return true;
}

void cp_async_block_begin() {
  for (CpAsyncQueue& q : queues()) {
    q.copies.clear();
    q.committed = 0;
  }
}

}  // namespace detail
}  // namespace wb::sim
