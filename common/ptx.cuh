// The PTX instructions of the fast attention kernels (chapter 08 on), one small wrapper each:
// under nvcc the wrapper is the inline `asm`, in the simulator (common/sim/ptx.hpp) an
// emulation with the register layouts of the PTX ISA, so a kernel built on them is tested
// like any other.
//
//   mma_m16n8k16<T>(d, a, b, c)   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: the warp's
//                                 D (16x8, float) = A (16x16, T) B (16x8, T) + C (16x8, float)
//   ldmatrix_x4(r, row)           ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 matrices of
//   ldmatrix_x4_trans(r, row)     16-bit elements from shared memory into fragments (.trans:
//                                 each matrix transposed on the way)
//   cp_async_16(dst, src, full)   cp.async.cg.shared.global: 16 bytes from global to shared
//                                 memory without passing through registers (zeros when !full)
//   cp_async_commit()             cp.async.commit_group: closes the copies issued so far
//   cp_async_wait<N>()            cp.async.wait_group N: all but the N newest groups landed
//   exp2_approx(x)                ex2.approx.ftz.f32: 2^x by the special-function unit, one
//                                 instruction (exp2f is several: it keeps subnormals)
//
// Fragments are what the PTX ISA calls them: 32-bit registers, each holding two 16-bit
// elements (the lower-numbered one in the low half: the lower column of A, C and D, the lower
// k of B) or one float. With g = lane / 4 (the "group") and t = lane % 4 (the "thread in
// group"), for mma.m16n8k16 (PTX ISA, section "Matrix Fragments for mma.m16n8k16 with floating
// point type"):
//   A (16x16, row):  a[0] = A(g, 2t..2t+1)     a[1] = A(g+8, 2t..2t+1)
//                    a[2] = A(g, 2t+8..2t+9)   a[3] = A(g+8, 2t+8..2t+9)
//   B (16x8, col):   b[0] = B(2t..2t+1, g)     b[1] = B(2t+8..2t+9, g)
//   C, D (16x8):     c[0], c[1] = C(g, 2t), C(g, 2t+1)   c[2], c[3] = C(g+8, 2t), C(g+8, 2t+1)
// and for ldmatrix: lane l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte
// aligned, in shared memory); r[j] of lane l is then matrix j's (row g, columns 2t..2t+1), or
// with .trans its (rows 2t..2t+1, column g): the B layout above.
//
// mma and ldmatrix are warp-wide (.sync.aligned): all 32 lanes execute the same call, with
// convergent control flow. cp.async copies are asynchronous: until cp_async_wait covers their
// group, the destination is undefined on a GPU (old data or new, or a mix); the simulator fills
// it with 0xff bytes (NaN) at the issue and performs the copy at that wait, so a missing wait
// reads NaN there, and race mode reports the race.
#pragma once

#include "common/kernel.cuh"

#include <cstdint>
#include <cstring>
#include <type_traits>

#if !defined(__CUDACC__)
#include "common/sim/ptx.hpp"
#else

namespace wb::ptx {

// The mma instruction for elements of PTX type `type` ("f16" or "bf16"): an asm template is a
// string literal, so the type is pasted into it here rather than chosen at compile time.
#define WB_MMA_M16N8K16_ASM(type)                                                             \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." type "." type                         \
               ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"   \
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), \
                 "f"(c[1]), "f"(c[2]), "f"(c[3]))

/// d = a b + c over the warp's 16x16x16 product (fragments as above; d may be c).
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4],
                                             const std::uint32_t (&b)[2], const float (&c)[4]) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                "mma_m16n8k16 takes __half or __nv_bfloat16");
  if constexpr (std::is_same_v<T, __half>) {
    WB_MMA_M16N8K16_ASM("f16");
  } else {
    WB_MMA_M16N8K16_ASM("bf16");
  }
}

#undef WB_MMA_M16N8K16_ASM

/// Shared-memory address of a generic pointer into shared memory (ldmatrix's and cp.async's
/// operand).
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

/// Four 8x8 matrices of 16-bit elements; `row`: this lane's row (see the header).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

/// ldmatrix_x4 with each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

/// Copies 16 bytes from `src` (global) to `dst` (shared), both 16-byte aligned; with
/// full = false it reads nothing and writes 16 zero bytes (a tile row past the matrix).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool full) {
  const int src_bytes = full ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(src_bytes)
               : "memory");
}

/// Closes this thread's group of the copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Waits until at most `N` of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// 2^x, one special-function-unit instruction: a few ulp of float from the exact value, a
/// subnormal x read as 0 and a result below the smallest normal float flushed to 0 (exp2f
/// keeps subnormals at the cost of a compare, two multiplications and a register per value).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace wb::ptx

#endif

namespace wb::ptx {

/// The 32 bits at `p` as one register (memcpy is how C++ reads the bytes of one type as
/// another; it compiles to a single load, or to nothing for a value already in a register).
__device__ __forceinline__ std::uint32_t register_bits(const void* p) {
  std::uint32_t bits;
  memcpy(&bits, p, sizeof bits);
  return bits;
}

/// Two floats rounded to the 16-bit type T and packed into one register, `lo` in the low half:
/// an A or B fragment register made from float values (P~ from S's accumulator).
template <typename T>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi);

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__half>(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return register_bits(&pair);
}

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return register_bits(&pair);
}

/// The register holding elements p[0] and p[1] (consecutive, 4-byte aligned) of a 16-bit
/// matrix: one 32-bit load.
template <typename T>
__device__ __forceinline__ std::uint32_t load_pair(const T* p) {
  return register_bits(p);
}

/// The register holding two elements that are not adjacent in memory (two rows of one column
/// of a row-major matrix): two 16-bit loads, `lo` in the low half.
template <typename T>
__device__ __forceinline__ std::uint32_t load_pair(const T* lo, const T* hi) {
  unsigned short l, h;
  memcpy(&l, lo, sizeof l);
  memcpy(&h, hi, sizeof h);
  return std::uint32_t(l) | std::uint32_t(h) << 16;
}

}  // namespace wb::ptx
