#include "common/timer.hpp"

#include <algorithm>
#include <stdexcept>

#if WB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_check.hpp"
#endif

namespace wb {

TimingStats summarize(std::vector<double> samples_ms) {
  TimingStats s;
  if (samples_ms.empty()) return s;
  std::sort(samples_ms.begin(), samples_ms.end());
  const std::size_t n = samples_ms.size();
  s.median_ms = n % 2 ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
  s.min_ms = samples_ms.front();
  s.max_ms = samples_ms.back();
  s.repetitions = static_cast<int>(n);
  return s;
}

TimingStats time_cpu(const std::function<void()>& work, int warmup, int repetitions) {
  for (int i = 0; i < warmup; ++i) work();
  std::vector<double> samples;
  for (int i = 0; i < repetitions; ++i) {
    CpuTimer t;
    work();
    samples.push_back(t.elapsed_ms());
  }
  return summarize(std::move(samples));
}

TimingStats time_cuda(const std::function<void()>& work, int warmup, int repetitions) {
#if WB_HAVE_CUDA
  int device = 0;
  WB_CUDA_CHECK(cudaGetDevice(&device));
  int l2_bytes = 0;
  WB_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  const std::size_t flush_bytes = 2 * static_cast<std::size_t>(std::max(l2_bytes, 1 << 20));
  void* flush = nullptr;
  WB_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t start, stop;
  WB_CUDA_CHECK(cudaEventCreate(&start));
  WB_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) work();
  std::vector<double> samples;
  for (int i = 0; i < repetitions; ++i) {
    WB_CUDA_CHECK(cudaMemset(flush, i & 0xff, flush_bytes));  // evict the inputs from L2
    WB_CUDA_CHECK(cudaEventRecord(start));
    work();
    WB_CUDA_CHECK(cudaEventRecord(stop));
    WB_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    WB_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(flush);
  return summarize(std::move(samples));
#else
  (void)work;
  (void)warmup;
  (void)repetitions;
  throw std::runtime_error("time_cuda: the cuda backend is not compiled in");
#endif
}

}  // namespace wb
