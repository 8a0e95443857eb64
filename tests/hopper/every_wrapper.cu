// Every wrapper of common/hopper_nvcc.cuh through ptxas, for sm_90a: wgmma_ss and wgmma_rs at
// every N of m64nNk16 (8 to 256 in steps of 8) in both 16-bit types, which checks each
// generated operand list (common/cmake/WbWgmmaShapes.cmake) against the instruction, and the
// wrappers the warpgroup GEMM does not call (tma_load_3d, the TMA stores and their groups,
// test_wait, named barriers, setmaxnreg). Compiled, never run: the GEMM test
// (warpgroup_gemm.cuh) runs the instructions; this proves the rest assemble. nvcc only.
#include <cstdint>
#include <utility>

#include "common/hopper.cuh"

namespace wb::test {
namespace {

using ptx::Major;

// d: (128 threads, N / 2), the accumulators as each thread holds them; a, b: descriptors.
template <typename T, int N>
__global__ void every_wgmma_kernel(float* d_out, std::uint64_t a, std::uint64_t b,
                                   const std::uint32_t* a_registers) {
  float d[N / 2] = {};
  const std::uint32_t a_fragment[4] = {a_registers[0], a_registers[1], a_registers[2],
                                       a_registers[3]};
  ptx::wgmma_fence();
  // Both transposes set (imm-trans-a/b = 1): the immediates are the instruction's last operands.
  ptx::wgmma_ss<T, N, Major::mn, Major::mn>(d, a, b, false);
  ptx::wgmma_rs<T, N, Major::mn>(d, a_fragment, b, true);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
#pragma unroll
  for (int e = 0; e < N / 2; ++e) d_out[threadIdx.x * (N / 2) + e] = d[e];
}

// Two warpgroups: the first gives registers back and stores a 3-D box, the second takes more.
__global__ void __launch_bounds__(256, 1)
    every_other_wrapper_kernel(const __grid_constant__ ptx::TensorMap map, int* out) {
  __shared__ std::uint64_t bar;
  unsigned char* box = dynamic_shared<unsigned char>();
  if (threadIdx.x == 0) ptx::mbarrier_init(&bar, 1);
  __syncthreads();
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      ptx::mbarrier_arrive_expect_tx(&bar, 1024);
      ptx::tma_load_3d(box, &map, 0, 0, 0, &bar);
      ptx::mbarrier_wait_parity(&bar, 0);
      out[0] = ptx::mbarrier_test_wait_parity(&bar, 0);
      ptx::fence_proxy_async();
      ptx::tma_store_3d(&map, 0, 0, 1, box);
      ptx::tma_store_2d(&map, 0, 0, box);
      ptx::tma_store_commit();
      ptx::tma_store_wait<1>();
      ptx::tma_store_wait<0>();
    }
    ptx::named_barrier_arrive(1, 256);
  } else {
    ptx::setmaxnreg_inc<232>();
    ptx::named_barrier_sync(1, 256);
  }
}

template <typename T, int... I>
int every_n(std::integer_sequence<int, I...>) {
  // Naming each instance's address instantiates it, so that ptxas compiles it.
  const void* kernels[] = {reinterpret_cast<const void*>(&every_wgmma_kernel<T, 8 * (I + 1)>)...};
  return static_cast<int>(sizeof kernels / sizeof kernels[0]);
}

}  // namespace

/// The kernels above, so that they are compiled (nothing launches them).
int every_hopper_wrapper_kernel_count() {
  const void* other = reinterpret_cast<const void*>(&every_other_wrapper_kernel);
  return (other != nullptr) + every_n<__half>(std::make_integer_sequence<int, 32>{}) +
         every_n<__nv_bfloat16>(std::make_integer_sequence<int, 32>{});
}

}  // namespace wb::test
