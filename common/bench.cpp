#include "common/bench.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <utility>

#include "common/inputs.hpp"
#include "common/table.hpp"

#if WB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_check.hpp"
#endif

namespace wb {

// ------------------------------------------------------------------------------------------
// What is counted
// ------------------------------------------------------------------------------------------

double gb_per_s(double bytes, double ms) {
  return ms > 0.0 ? bytes / (ms * 1e-3) / 1e9 : 0.0;
}

double tflop_per_s(double flops, double ms) {
  return ms > 0.0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
}

double softmax_bytes(std::int64_t rows, std::int64_t cols, std::size_t elem_bytes) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  return 2.0 * n * static_cast<double>(elem_bytes);  // read x, write y
}

double layernorm_bytes(std::int64_t rows, std::int64_t cols, std::size_t elem_bytes) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  const double e = static_cast<double>(elem_bytes);
  return 2.0 * n * e                                         // read x, write y
         + 2.0 * static_cast<double>(cols) * e               // read gamma, beta
         + 2.0 * static_cast<double>(rows) * sizeof(float);  // write mean, rstd
}

double attention_flops(std::int64_t bh, std::int64_t lq, std::int64_t lk, std::int64_t d,
                       bool causal) {
  const double full = 4.0 * static_cast<double>(bh) * static_cast<double>(lq) *
                      static_cast<double>(lk) * static_cast<double>(d);
  return causal ? full / 2.0 : full;
}

double attention_backward_flops(std::int64_t bh, std::int64_t lq, std::int64_t lk, std::int64_t d,
                                bool causal) {
  return 2.5 * attention_flops(bh, lq, lk, d, causal);
}

double attention_bytes(std::int64_t bh, std::int64_t lq, std::int64_t lk, std::int64_t d,
                       std::size_t elem_bytes) {
  const double e = static_cast<double>(elem_bytes);
  const double b = static_cast<double>(bh);
  return b * (2.0 * static_cast<double>(lq) * d + 2.0 * static_cast<double>(lk) * d) * e  // Q O K V
         + b * static_cast<double>(lq) * sizeof(float);                                   // lse
}

std::vector<float> bench_input(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  const std::size_t row = static_cast<std::size_t>(cols);
  const std::size_t tile = static_cast<std::size_t>(std::min(rows, kBenchTileRows)) * row;
  std::vector<float> x = randn(tile, seed);
  x.resize(static_cast<std::size_t>(rows) * row);
  for (std::size_t i = tile; i < x.size(); i += tile)
    std::copy_n(x.begin(), std::min(tile, x.size() - i),
                x.begin() + static_cast<std::ptrdiff_t>(i));
  return x;
}

std::string shape_string(std::int64_t rows, std::int64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

std::string attention_shape_string(std::int64_t bh, std::int64_t lq, std::int64_t lk,
                                   std::int64_t d, bool causal) {
  return "bh" + std::to_string(bh) + " lq" + std::to_string(lq) + " lk" + std::to_string(lk) +
         " d" + std::to_string(d) + (causal ? " causal" : " full");
}

std::string decode_shape_string(std::int64_t batch, std::int64_t hq, std::int64_t hkv,
                                std::int64_t lq, std::int64_t lk, std::int64_t d) {
  return "b" + std::to_string(batch) + " hq" + std::to_string(hq) + " hkv" + std::to_string(hkv) +
         " lq" + std::to_string(lq) + " lk" + std::to_string(lk) + " d" + std::to_string(d);
}

double spread_percent(const TimingStats& t) {
  return t.median_ms > 0.0 ? 100.0 * (t.max_ms - t.min_ms) / t.median_ms : 0.0;
}

BenchRow make_bench_row(std::string op, std::string chapter, std::string kernel, std::string dtype,
                        std::string shape, const Work& work, const TimingStats& time,
                        double copy_gbps) {
  BenchRow r;
  r.op = std::move(op);
  r.chapter = std::move(chapter);
  r.kernel = std::move(kernel);
  r.dtype = std::move(dtype);
  r.shape = std::move(shape);
  r.time = time;
  r.gbps = gb_per_s(work.bytes, time.median_ms);
  if (work.flops > 0.0) {
    r.throughput = tflop_per_s(work.flops, time.median_ms);
    r.unit = "TFLOP/s";
  } else {
    r.throughput = r.gbps;
    r.unit = "GB/s";
  }
  r.copy_gbps = copy_gbps;
  r.fraction_of_copy = copy_gbps > 0.0 ? r.gbps / copy_gbps : 0.0;
  return r;
}

// ------------------------------------------------------------------------------------------
// CSV
// ------------------------------------------------------------------------------------------

namespace {

std::string number(double v, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

std::string csv_header() {
  return "op,source,chapter,kernel,dtype,shape,median_ms,min_ms,max_ms,reps,throughput,unit,"
         "gbps,fraction_of_copy,copy_gbps,device,date";
}

std::string csv_escape(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string quoted = "\"";
  for (char c : field) {
    if (c == '"') quoted += '"';  // a quote is doubled inside a quoted field
    quoted += c;
  }
  return quoted + "\"";
}

std::string csv_line(const BenchRow& r) {
  const std::vector<std::string> fields = {r.op,
                                           r.source,
                                           r.chapter,
                                           r.kernel,
                                           r.dtype,
                                           r.shape,
                                           number(r.time.median_ms, "%.6g"),
                                           number(r.time.min_ms, "%.6g"),
                                           number(r.time.max_ms, "%.6g"),
                                           std::to_string(r.time.repetitions),
                                           number(r.throughput, "%.6g"),
                                           r.unit,
                                           number(r.gbps, "%.6g"),
                                           number(r.fraction_of_copy, "%.4f"),
                                           number(r.copy_gbps, "%.6g"),
                                           r.device,
                                           r.date};
  std::string line;
  for (std::size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_escape(fields[i]);
  return line;
}

void append_csv(const std::string& path, const std::vector<BenchRow>& rows) {
  bool empty = true;
  if (std::ifstream in(path, std::ios::binary | std::ios::ate); in) empty = in.tellg() == 0;
  std::ofstream out(path, std::ios::app);
  if (!out) throw std::runtime_error("--csv: cannot write '" + path + "'");
  if (empty) out << csv_header() << '\n';
  for (const BenchRow& r : rows) out << csv_line(r) << '\n';
  if (!out) throw std::runtime_error("--csv: writing '" + path + "' failed");
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ------------------------------------------------------------------------------------------
// The device and its roofline
// ------------------------------------------------------------------------------------------

DeviceInfo query_device() {
#if WB_HAVE_CUDA
  int device = 0;
  WB_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  WB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.memory_gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  info.l2_bytes = prop.l2CacheSize;
  return info;
#else
  throw std::runtime_error("the cuda backend is not compiled in (configured without nvcc)");
#endif
}

CopyRoofline measure_copy_bandwidth(std::size_t buffer_bytes, int warmup, int reps) {
#if WB_HAVE_CUDA
  void* src = nullptr;
  void* dst = nullptr;
  WB_CUDA_CHECK(cudaMalloc(&src, buffer_bytes));
  WB_CUDA_CHECK(cudaMalloc(&dst, buffer_bytes));
  WB_CUDA_CHECK(cudaMemset(src, 1, buffer_bytes));
  CopyRoofline c;
  c.buffer_bytes = buffer_bytes;
  try {
    c.time = time_cuda(
        [&] { WB_CUDA_CHECK(cudaMemcpy(dst, src, buffer_bytes, cudaMemcpyDeviceToDevice)); },
        warmup, reps);
  } catch (...) {
    cudaFree(src);
    cudaFree(dst);
    throw;
  }
  cudaFree(src);
  cudaFree(dst);
  c.gbps = gb_per_s(2.0 * static_cast<double>(buffer_bytes), c.time.median_ms);  // read + write
  return c;
#else
  (void)buffer_bytes;
  (void)warmup;
  (void)reps;
  throw std::runtime_error("the cuda backend is not compiled in (configured without nvcc)");
#endif
}

namespace {

// One copy buffer: 1 GiB (far beyond any L2), or a quarter of the free memory if less.
std::size_t copy_buffer_bytes() {
  std::size_t bytes = std::size_t{1} << 30;
#if WB_HAVE_CUDA
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  WB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  bytes = std::min(bytes, std::max(kMiB, free_bytes / 4 / kMiB * kMiB));
#endif
  return bytes;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// The mode in a chapter program
// ------------------------------------------------------------------------------------------

void BenchOptions::add_to(Cli& cli, bool offers_bench) {
  if (!offers_bench) {
    cli.option("--csv", &csv_path,
               "with --list, write the ladder as CSV to this file (- for stdout); with "
               "--profile, the counted traffic");
    return;
  }
  cli.flag("--bench", &enabled, "time every kernel on the GPU (see the benchmark section)")
      .option("--reps", &reps, "timed runs per kernel with --bench", kBenchMaxReps)
      .option("--csv", &csv_path,
              "with --bench, append one row per kernel to this file; with --list, write the "
              "ladder as CSV to it (- for stdout); with --profile, the counted traffic");
  cli.epilog(usage());
}

int BenchOptions::validate(const Cli& cli, bool listing, bool profiling) {
  if (enabled && listing) return cli.error("--list and --bench do not go together");
  if (!enabled && reps != 0) return cli.error("--reps only applies with --bench");
  if (!enabled && !listing && !profiling && !csv_path.empty())
    return cli.error("--csv only applies with --bench, --list or --profile");
  if (enabled && csv_path == "-") return cli.error("--bench --csv needs a file name, not -");
  if (profiling && csv_path == "-")  // the profile's tables go to standard output
    return cli.error("--profile --csv needs a file name, not -");
  if (reps == 0) reps = kBenchDefaultReps;
  return -1;
}

int BenchOptions::check_backend(const Cli& cli, Backend backend) const {
  if (!enabled) return -1;
  if (!cuda_available())
    return cli.error("--bench needs a CUDA GPU (absolute times only come from one): " +
                     cuda_device_description());
  if (backend != Backend::cuda)
    return cli.error(std::string("--bench needs --backend cuda: --backend ") + to_string(backend) +
                     " runs on the CPU, whose times say nothing of a GPU");
  return -1;
}

std::string BenchOptions::usage() {
  return "\nbenchmark mode (needs a CUDA GPU; see the docs page \"Benchmarks\"): --bench times\n"
         "every kernel on the shape after " +
         std::to_string(kBenchWarmup) + " warm-up runs, --reps timed runs (default " +
         std::to_string(kBenchDefaultReps) +
         ") with the L2\n"
         "cache flushed before each, CUDA events; prints the median [min, max] next to the\n"
         "device's measured copy bandwidth (the roofline). --csv appends one row per kernel.\n";
}

Bench::Bench(std::string chapter, std::string op, const BenchOptions& options)
    : chapter_(std::move(chapter)), op_(std::move(op)), options_(options), date_(utc_now()) {
  if (!options_.csv_path.empty()) append_csv(options_.csv_path, {});  // fail before timing
  device_ = query_device();
  copy_ = measure_copy_bandwidth(copy_buffer_bytes(), options_.warmup, options_.reps);
  constexpr double kMiB = 1024.0 * 1024.0;
  std::cout << "Benchmark: chapter " << chapter_ << " on " << device_.name << " (sm_"
            << device_.cc_major << device_.cc_minor << ", " << device_.sm_count << " SMs, "
            << fixed(device_.memory_gib, 1) << " GiB, L2 " << fixed(device_.l2_bytes / kMiB, 1)
            << " MiB), " << date_ << "\n"
            << "  method: " << options_.warmup << " warm-up runs, then " << options_.reps
            << " runs, each after a " << fixed(2.0 * device_.l2_bytes / kMiB, 0)
            << " MiB write that evicts L2, timed with CUDA events; median [min, max]\n"
            << "  roofline: cudaMemcpy device-to-device of " << fixed(copy_.buffer_bytes / kMiB, 0)
            << " MiB, read + write counted: " << fixed(copy_.gbps, 1) << " GB/s (median; min "
            << fixed(copy_.time.min_ms, 3) << " ms, max " << fixed(copy_.time.max_ms, 3)
            << " ms)\n\n";
}

const BenchRow& Bench::time(const std::string& kernel, const std::string& dtype,
                            const std::string& shape, const Work& work,
                            const std::function<void()>& launch) {
  const TimingStats t = time_cuda(launch, options_.warmup, options_.reps);
  BenchRow row = make_bench_row(op_, chapter_, kernel, dtype, shape, work, t, copy_.gbps);
  row.device = device_.name;
  row.date = date_;
  if (!options_.csv_path.empty()) append_csv(options_.csv_path, {row});  // as measured
  rows_.push_back(std::move(row));
  return rows_.back();
}

void Bench::skip(const std::string& kernel, const std::string& why) {
  skipped_.push_back(kernel + ": " + why);
}

int Bench::finish() {
  // Not a table of nothing and exit 0: the shape is bad input for every kernel asked for.
  if (rows_.empty() && !skipped_.empty())
    throw std::invalid_argument("--bench: no kernel takes this shape (" + skipped_.front() + ")");
  Table t(
      {"kernel", "dtype", "shape", "median ms", "min ms", "max ms", "throughput", "of copy bw"});
  for (const BenchRow& r : rows_) {
    t.add_row({r.kernel, r.dtype, r.shape, fixed(r.time.median_ms, 4), fixed(r.time.min_ms, 4),
               fixed(r.time.max_ms, 4),
               fixed(r.throughput, r.unit == "GB/s" ? 1 : 2) + " " + r.unit,
               fixed(100.0 * r.fraction_of_copy, 1) + " %"});
  }
  t.print(std::cout);
  for (const std::string& s : skipped_) std::cout << "  skipped " << s << '\n';
  std::cout << "  throughput: "
            << (rows_.empty() || rows_.front().unit == "GB/s"
                    ? "bytes read + written / median time"
                    : "4 BH Lq Lk D (halved for causal) / median time")
            << "; of copy bw: GB/s over the measured copy bandwidth.\n";
  if (!options_.csv_path.empty())
    std::cout << "  " << rows_.size() << " rows appended to " << options_.csv_path << '\n';
  return 0;
}

}  // namespace wb
