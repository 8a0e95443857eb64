// The nvcc side of common/hopper.cuh: each Hopper wrapper as its inline `asm` (the header there
// says what each one does; this file says how). Compiled for sm_90a only
// (`-gencode arch=compute_90a,code=sm_90a`): wgmma and setmaxnreg exist only on the
// architecture-specific target, and the rest is used by the same kernels. Included by
// common/hopper.cuh under nvcc, never directly.
//
// Shared-memory operands are 32-bit addresses in the shared window (shared_address, from
// common/ptx.cuh) with the `.shared::cta` state space; a tensor map is the generic address of
// the kernel parameter that holds it (`const __grid_constant__ wb::ptx::TensorMap map`: the
// parameter stays in the constant bank, where the TMA unit reads it, instead of a copy in local
// memory).
#pragma once

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error \
    "common/hopper.cuh is compiled for sm_90a only: wgmma and setmaxnreg need the architecture-specific target. Build this kernel library with -gencode arch=compute_90a,code=sm_90a (CMake: CUDA_ARCHITECTURES 90a-real)"
#endif

#include <cuda.h>  // CUtensorMap and the enums of cuTensorMapEncodeTiled: types only, no libcuda
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/ptx.cuh"

// Everything here sits in the inline namespace wb::ptx::nvcc: kernels still write
// wb::ptx::TensorMap and wb::ptx::encode_tensor_map<T>, but the host functions compiled from
// this file (encode_tensor_map<__half>, ...) get names of their own. The simulator's side
// declares the same templates with the same arguments, and CUDA's __half and the simulator's
// mangle alike, so without it a binary that links both backends' kernels (every test does)
// would keep one of the two instantiations for both.
namespace wb::ptx {
inline namespace nvcc {

// ---- mbarrier ------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals)
               : "memory");
}

/// The returned state (the phase arrived on) is what mbarrier.test_wait without .parity takes;
/// the kernels here wait by parity and may drop it.
__device__ __forceinline__ std::uint64_t mbarrier_arrive(std::uint64_t* bar) {
  std::uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
               : "=l"(state)
               : "r"(shared_address(bar))
               : "memory");
  return state;
}

__device__ __forceinline__ std::uint64_t mbarrier_arrive_expect_tx(std::uint64_t* bar,
                                                                   unsigned bytes) {
  std::uint64_t state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state)
               : "r"(shared_address(bar)), "r"(bytes)
               : "memory");
  return state;
}

// The waits answer in a predicate; selp turns it into a register C++ can read.
__device__ __forceinline__ bool mbarrier_test_wait_parity(std::uint64_t* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

__device__ __forceinline__ bool mbarrier_try_wait_parity(std::uint64_t* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

/// try_wait already suspends the thread for a while (a time the hardware chooses) before it
/// answers false, so the loop does not spin hot.
__device__ __forceinline__ void mbarrier_wait_parity(std::uint64_t* bar, unsigned parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// ---- TMA -----------------------------------------------------------------------------------

/// A CUtensorMap's 128 bytes, with its alignment, under a name the simulator can give too. The
/// alignment is CUtensorMap's own: 128 in CUDA 13's cuda.h (64 before it; 64 is what the driver
/// and the PTX ISA require of a tensor map's address).
struct alignas(alignof(CUtensorMap)) TensorMap {
  unsigned char bytes[128];
};
static_assert(sizeof(TensorMap) == sizeof(CUtensorMap) &&
                  alignof(TensorMap) == alignof(CUtensorMap),
              "TensorMap must be a CUtensorMap's bytes");

namespace detail {

[[noreturn]] inline void tensor_map_refused(const std::string& why) {
  throw std::invalid_argument("encode_tensor_map: " + why);
}

/// cuTensorMapEncodeTiled, reached through the CUDA runtime (cudaGetDriverEntryPointByVersion)
/// rather than by linking libcuda: the workbook links only the runtime, as every CUDA program
/// may, and the driver that is loaded anyway answers. Version 12000: the function's signature as
/// CUDA 12.0 introduced it, the one PFN_cuTensorMapEncodeTiled_v12000 declares.
/// (cudaGetDriverEntryPoint, without the version, is deprecated in CUDA 13.)
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t status = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn,
                                                                12000, cudaEnableDefault, &found);
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
      throw std::runtime_error(std::string("encode_tensor_map: the CUDA driver offers no "
                                           "cuTensorMapEncodeTiled (") +
                               cudaGetErrorString(status) + ")");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

inline CUtensorMapSwizzle tensor_map_swizzle(Swizzle s) {
  switch (s) {
    case Swizzle::b32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case Swizzle::b64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case Swizzle::b128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    case Swizzle::none:
      break;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

/// The limits cuTensorMapEncodeTiled documents (CUDA driver API, "Tensor Map Object
/// Management"), checked here so that a bad map is refused with the limit named rather than
/// with CUDA_ERROR_INVALID_VALUE.
inline void check_tensor_map(const void* global, unsigned element_bytes, int rank,
                             const std::uint64_t* sizes, const std::uint64_t* strides,
                             const std::uint32_t* box, Swizzle swizzle) {
  const auto at = [](const char* what, int i, std::uint64_t v) {
    return std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(v);
  };
  // The driver takes rank 1 to 5; the wrappers copy 2-D and 3-D boxes (tma_load_2d/3d).
  if (rank < 2 || rank > 3)
    tensor_map_refused("rank " + std::to_string(rank) + ": the wrappers take rank 2 or 3");
  if (reinterpret_cast<std::uintptr_t>(global) % 16 != 0)
    tensor_map_refused("the global address is not 16-byte aligned");
  constexpr std::uint64_t kMaxSize = std::uint64_t{1} << 32, kMaxStride = std::uint64_t{1} << 40;
  constexpr std::uint32_t kMaxBox = 256;
  for (int i = 0; i < rank; ++i) {
    if (sizes[i] == 0 || sizes[i] > kMaxSize)
      tensor_map_refused(at("sizes", i, sizes[i]) + ": each size is in [1, 2^32]");
    if (box[i] == 0 || box[i] > kMaxBox)
      tensor_map_refused(at("box", i, box[i]) + ": each box size is in [1, 256]");
  }
  for (int i = 0; i + 1 < rank; ++i) {
    if (strides[i] % 16 != 0 || strides[i] >= kMaxStride)
      tensor_map_refused(at("strides", i, strides[i]) +
                         " bytes: strides are multiples of 16 below 2^40");
  }
  const std::uint64_t inner_bytes = std::uint64_t{box[0]} * element_bytes;
  if (inner_bytes % 16 != 0)
    tensor_map_refused("the box's inner dimension is " + std::to_string(inner_bytes) +
                       " bytes: TMA moves whole 16-byte chunks, so it is a multiple of 16");
  if (swizzle != Swizzle::none && inner_bytes > swizzle_bytes(swizzle))
    tensor_map_refused("the box's inner dimension is " + std::to_string(inner_bytes) +
                       " bytes, more than the " + std::to_string(swizzle_bytes(swizzle)) +
                       "-byte rows of its swizzle");
}

}  // namespace detail

/// Element type from T; interleave none; element strides 1; out-of-bounds elements read as
/// zeros (oobFill NONE); L2 promotion 128B: a miss fetches the whole 128-byte line from DRAM at
/// once, the size of a box row of 64 16-bit elements, rather than its 32-byte sectors one by
/// one (CUTLASS's default for TMA loads).
template <typename T>
void encode_tensor_map(TensorMap& map, const T* global, int rank, const std::uint64_t* sizes,
                       const std::uint64_t* strides, const std::uint32_t* box, Swizzle swizzle) {
  static_assert(
      std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float>,
      "encode_tensor_map takes __half, __nv_bfloat16 or float");
  constexpr CUtensorMapDataType kType = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                        : std::is_same_v<T, float>
                                            ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                            : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  static_assert(sizeof(cuuint64_t) == sizeof(std::uint64_t), "sizes and strides are 64-bit");
  detail::check_tensor_map(global, sizeof(T), rank, sizes, strides, box, swizzle);
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result = detail::tensor_map_encoder()(
      reinterpret_cast<CUtensorMap*>(&map), kType, static_cast<cuuint32_t>(rank),
      const_cast<T*>(global), reinterpret_cast<const cuuint64_t*>(sizes),
      reinterpret_cast<const cuuint64_t*>(strides), box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, detail::tensor_map_swizzle(swizzle),
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    detail::tensor_map_refused("cuTensorMapEncodeTiled refused the map (CUresult " +
                               std::to_string(static_cast<int>(result)) + ")");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int x, int y,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n"
      :
      : "r"(shared_address(dst)), "l"(map), "r"(x), "r"(y), "r"(shared_address(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, int x, int y, int z,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n"
      :
      : "r"(shared_address(dst)), "l"(map), "r"(x), "r"(y), "r"(z), "r"(shared_address(bar))
      : "memory");
}

__device__ __forceinline__ void tma_store_2d(const TensorMap* map, int x, int y, const void* src) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
      " [%0, {%1, %2}], [%3];\n"
      :
      : "l"(map), "r"(x), "r"(y), "r"(shared_address(src))
      : "memory");
}

__device__ __forceinline__ void tma_store_3d(const TensorMap* map, int x, int y, int z,
                                             const void* src) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
      " [%0, {%1, %2, %3}], [%4];\n"
      :
      : "l"(map), "r"(x), "r"(y), "r"(z), "r"(shared_address(src))
      : "memory");
}

__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- named barriers and setmaxnreg ---------------------------------------------------------

__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes a multiple of 8 in 24-256");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes a multiple of 8 in 24-256");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- wgmma ---------------------------------------------------------------------------------

__device__ __forceinline__ std::uint64_t make_smem_descriptor(const void* tile, Swizzle swizzle,
                                                              unsigned leading_bytes,
                                                              unsigned stride_bytes) {
  return encode_smem_descriptor(shared_address(tile), swizzle, leading_bytes, stride_bytes);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/// An empty volatile asm that reads and writes each register of `d`: the compiler may move an
/// ordinary read or write of an accumulator across wgmma_wait_group (which names no register),
/// but not across this, which stays in order with the wait (CUTLASS's warpgroup_fence_operand).
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

namespace detail {

/// wgmma.mma_async.m64nNk16 with f32 accumulators, one specialization per N (below).
template <int N>
struct WgmmaM64K16;

// The instruction text, once for every N. `d_list` and `d_operands` are the N/2 accumulators
// ("{%0, ..., %(N/2 - 1)}" and their "+f" operands), a0..a6 the numbers of the operands after
// them, from common/cmake/WbWgmmaShapes.cmake. ss: a-desc a0, b-desc a1, scale-d a2, imm-trans-a
// a3, imm-trans-b a4; rs: A's four registers a0..a3, b-desc a4, scale-d a5, imm-trans-b a6. The
// scale-d operand is a predicate, set inside the block from `scale_d` (0: D = A B, the old D
// ignored); imm-scale-a and imm-scale-b are 1 (no negation). No "memory" clobber, as CUTLASS
// has none: the operands are read asynchronously, after the asm anyway, and the wrappers that
// order C++ accesses around them (wgmma_fence, fence_proxy_async, wgmma_wait_group) have one.
#define WB_WGMMA_UNPAREN(...) __VA_ARGS__
// clang-format off
#define WB_WGMMA_SS_ASM(n, type, d_list, d_operands, a0, a1, a2, a3, a4)                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " a2 ", 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." type "." type                     \
               " " d_list ", " a0 ", " a1 ", p, 1, 1, " a3 ", " a4 ";\n}\n"                       \
               : WB_WGMMA_UNPAREN d_operands                                                       \
               : "l"(a), "l"(b), "r"(scale_d), "n"(kTransA), "n"(kTransB))
#define WB_WGMMA_RS_ASM(n, type, d_list, d_operands, a0, a1, a2, a3, a4, a5, a6)                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " a5 ", 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." type "." type                     \
               " " d_list ", {" a0 ", " a1 ", " a2 ", " a3 "}, " a4 ", p, 1, 1, " a6 ";\n}\n"      \
               : WB_WGMMA_UNPAREN d_operands                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(kTransB))
// clang-format on
#define WB_WGMMA_SHAPE(n, d_list, d_operands, a0, a1, a2, a3, a4, a5, a6)                          \
  template <>                                                                                      \
  struct WgmmaM64K16<n> {                                                                          \
    template <typename T, int kTransA, int kTransB>                                                \
    static __device__ __forceinline__ void ss(float (&d)[n / 2], std::uint64_t a, std::uint64_t b, \
                                              int scale_d) {                                       \
      if constexpr (std::is_same_v<T, __half>) {                                                   \
        WB_WGMMA_SS_ASM(n, "f16", d_list, d_operands, a0, a1, a2, a3, a4);                         \
      } else {                                                                                     \
        WB_WGMMA_SS_ASM(n, "bf16", d_list, d_operands, a0, a1, a2, a3, a4);                        \
      }                                                                                            \
    }                                                                                              \
    template <typename T, int kTransB>                                                             \
    static __device__ __forceinline__ void rs(float (&d)[n / 2], const std::uint32_t (&a)[4],      \
                                              std::uint64_t b, int scale_d) {                      \
      if constexpr (std::is_same_v<T, __half>) {                                                   \
        WB_WGMMA_RS_ASM(n, "f16", d_list, d_operands, a0, a1, a2, a3, a4, a5, a6);                 \
      } else {                                                                                     \
        WB_WGMMA_RS_ASM(n, "bf16", d_list, d_operands, a0, a1, a2, a3, a4, a5, a6);                \
      }                                                                                            \
    }                                                                                              \
  };

#include "common/wgmma_shapes.inc"  // generated: WB_WGMMA_SHAPE(8, ...) ... WB_WGMMA_SHAPE(256, ...)

#undef WB_WGMMA_SHAPE
#undef WB_WGMMA_RS_ASM
#undef WB_WGMMA_SS_ASM
#undef WB_WGMMA_UNPAREN

template <typename T, int N>
__host__ __device__ constexpr void check_wgmma_shape() {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                "wgmma takes __half or __nv_bfloat16 inputs here");
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma.m64nNk16: N is a multiple of 8 in 8-256");
}

}  // namespace detail

template <typename T, int N, Major A = Major::k, Major B = Major::k>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], std::uint64_t a, std::uint64_t b,
                                         bool accumulate) {
  detail::check_wgmma_shape<T, N>();
  detail::WgmmaM64K16<N>::template ss<T, static_cast<int>(A), static_cast<int>(B)>(d, a, b,
                                                                                   accumulate);
}

template <typename T, int N, Major B = Major::k>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4],
                                         std::uint64_t b, bool accumulate) {
  detail::check_wgmma_shape<T, N>();
  detail::WgmmaM64K16<N>::template rs<T, static_cast<int>(B)>(d, a, b, accumulate);
}

}  // namespace nvcc
}  // namespace wb::ptx
