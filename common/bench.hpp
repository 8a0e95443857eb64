// Benchmark mode shared by the chapter programs: `--bench`, `--reps N`, `--csv FILE`.
//
// Method (docs/benchmarks.md): each kernel runs kBenchWarmup times untimed, then `reps` times,
// each run timed with CUDA events after a write of twice the L2 cache (time_cuda in
// common/timer.hpp), and is reported as the median with min and max. Throughput:
//   softmax, LayerNorm   GB/s    = (bytes read + bytes written) / median time
//   attention            TFLOP/s = 4 BH Lq Lk D / median time, halved for causal
// The roofline is the device's measured device-to-device copy bandwidth (a cudaMemcpy of a
// large buffer through the same harness, read + write counted), and every kernel's GB/s is
// also shown as a fraction of it. Absolute times only come from a GPU: without one,
// `--bench` is an error (one line, exit code 2).
//
// A chapter program gets the options through common/program.hpp (ProgramOptions), then:
//   if (options.bench.enabled) {
//     wb::Bench b("01_safe_softmax", "softmax", bench);   // measures and prints the roofline
//     b.time("warp_shuffle", "fp32", wb::shape_string(rows, cols),
//            wb::Work::moving(wb::softmax_bytes(rows, cols, sizeof(float))), [&] { launch(); });
//     return b.finish();                                    // the table; CSV rows already out
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/cli.hpp"
#include "common/timer.hpp"

namespace wb {

// ------------------------------------------------------------------------------------------
// What is counted (pure functions, unit-tested in tests/test_bench.cpp)
// ------------------------------------------------------------------------------------------

inline constexpr int kBenchWarmup = 10;       // untimed runs before the timed ones
inline constexpr int kBenchDefaultReps = 50;  // timed runs; the median is reported
inline constexpr int kBenchMaxReps = 100000;
/// Bench mode's size limit: the kernels index with size_t, the launches with int rows, so
/// 2^31 elements (8 GiB per fp32 matrix; the largest benchmark shape, 49152 x 32768, is 6 GiB).
inline constexpr std::size_t kMaxBenchElements = std::size_t{1} << 31;

/// Gigabytes (1e9 bytes) per second for `bytes` moved in `ms` milliseconds.
double gb_per_s(double bytes, double ms);
/// Tera floating-point operations (1e12) per second for `flops` in `ms` milliseconds.
double tflop_per_s(double flops, double ms);

/// Softmax's ideal traffic: x read once, y written once, `elem_bytes` per element.
double softmax_bytes(std::int64_t rows, std::int64_t cols, std::size_t elem_bytes);
/// LayerNorm's ideal traffic: x read and y written (`elem_bytes` each), gamma and beta read
/// once, the float mean and rstd written once per row (what chapter 07's kernels output).
double layernorm_bytes(std::int64_t rows, std::int64_t cols, std::size_t elem_bytes);
/// Attention's FLOPs: two matmuls (Q K^T and P V) of 2 Lq Lk D each per (batch, head), so
/// 4 BH Lq Lk D; halved for causal (FlashAttention's convention: exactly half, not
/// (L + 1) / 2L).
double attention_flops(std::int64_t bh, std::int64_t lq, std::int64_t lk, std::int64_t d,
                       bool causal);
/// The backward's FLOPs as FlashAttention counts them: 2.5 times the forward's (five products
/// of 2 Lq Lk D each, S recomputed, dP, dV, dQ, dK, against the forward's two).
double attention_backward_flops(std::int64_t bh, std::int64_t lq, std::int64_t lk, std::int64_t d,
                                bool causal);
/// Attention's ideal traffic: Q and O of (BH, Lq, D), K and V of (BH, Lk, D), read or written
/// once, plus the float logsumexp of (BH, Lq).
double attention_bytes(std::int64_t bh, std::int64_t lq, std::int64_t lk, std::int64_t d,
                       std::size_t elem_bytes);

/// Rows of the benchmark's input: `kBenchTileRows` distinct randn rows repeated to fill
/// (rows, cols). The kernels' time does not depend on the values, and drawing the 1.6e9
/// normals of the largest shape would take longer than timing it.
inline constexpr std::int64_t kBenchTileRows = 256;
std::vector<float> bench_input(std::int64_t rows, std::int64_t cols, std::uint64_t seed);

/// "49152x1024".
std::string shape_string(std::int64_t rows, std::int64_t cols);
/// "bh16 lq4096 lk4096 d64 causal" (or "... full").
std::string attention_shape_string(std::int64_t bh, std::int64_t lq, std::int64_t lk,
                                   std::int64_t d, bool causal);

/// "b1 hq32 hkv32 lq1 lk4096 d128": a decode shape (chapter 09) as the benchmark CSV and
/// bench/bench_vs_torch.py name it.
std::string decode_shape_string(std::int64_t batch, std::int64_t hq, std::int64_t hkv,
                                std::int64_t lq, std::int64_t lk, std::int64_t d);

/// The work one kernel run does: bytes moved, and FLOPs where the op is compute-bound
/// (attention). Throughput is TFLOP/s when flops > 0, else GB/s.
struct Work {
  double bytes = 0.0;
  double flops = 0.0;
  static Work moving(double bytes) { return {bytes, 0.0}; }
  static Work computing(double flops, double bytes) { return {bytes, flops}; }
};

/// (max - min) / median in percent: how far the repetitions spread.
double spread_percent(const TimingStats& t);

/// One measured kernel: a row of the table and of the CSV.
struct BenchRow {
  std::string op;                   // softmax, layernorm, attention, copy
  std::string source = "workbook";  // workbook or torch (bench/bench_vs_torch.py)
  std::string chapter;              // 01_safe_softmax, ...
  std::string kernel;
  std::string dtype;  // fp32, fp16, bf16
  std::string shape;
  TimingStats time;
  double throughput = 0.0;        // in `unit`
  std::string unit;               // "GB/s" or "TFLOP/s"
  double gbps = 0.0;              // bytes / median time (0 when no bytes are counted)
  double fraction_of_copy = 0.0;  // gbps / copy_gbps (0 without a roofline)
  double copy_gbps = 0.0;         // the device's measured copy bandwidth
  std::string device;
  std::string date;  // UTC, ISO 8601
};

/// Fills the throughput fields of a row from its work and median time.
BenchRow make_bench_row(std::string op, std::string chapter, std::string kernel, std::string dtype,
                        std::string shape, const Work& work, const TimingStats& time,
                        double copy_gbps);

/// The CSV columns, comma-separated, no newline; bench/bench_vs_torch.py writes the same.
std::string csv_header();
/// One CSV line, no newline; fields with a comma, quote or newline are quoted (RFC 4180).
std::string csv_line(const BenchRow& row);
/// `field`, quoted when RFC 4180 requires it.
std::string csv_escape(const std::string& field);
/// Appends `rows` to `path`, writing the header first when the file is new or empty.
/// Throws std::runtime_error when the file cannot be written.
void append_csv(const std::string& path, const std::vector<BenchRow>& rows);

/// The current time, UTC, "2025-01-31T12:00:00Z".
std::string utc_now();

// ------------------------------------------------------------------------------------------
// The device and its roofline (CUDA only; these throw in a build without nvcc)
// ------------------------------------------------------------------------------------------

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int cc_major = 0;
  int cc_minor = 0;
  double memory_gib = 0.0;
  int l2_bytes = 0;
};

/// The current CUDA device.
DeviceInfo query_device();

struct CopyRoofline {
  std::size_t buffer_bytes = 0;  // one buffer; the copy reads and writes this many
  TimingStats time;
  double gbps = 0.0;  // 2 * buffer_bytes / median time
};

/// Times cudaMemcpy device-to-device of `buffer_bytes` with time_cuda (warm-up, reps, L2
/// flush, events).
CopyRoofline measure_copy_bandwidth(std::size_t buffer_bytes, int warmup, int reps);

// ------------------------------------------------------------------------------------------
// The mode in a chapter program
// ------------------------------------------------------------------------------------------

struct BenchOptions {
  bool enabled = false;
  int reps = 0;  // 0 until validate(): --reps N, or kBenchDefaultReps
  int warmup = kBenchWarmup;
  std::string csv_path;  // empty: no CSV

  /// Registers --csv FILE with `cli` and, when `offers_bench`, --bench and --reps N, and their
  /// section of --help.
  void add_to(Cli& cli, bool offers_bench = true);
  /// After parsing: --reps only applies with --bench, --csv with --bench, --list (`listing`)
  /// or --profile (`profiling`), and not --bench with --list. -1 to go on, else prints one
  /// line and returns 2.
  int validate(const Cli& cli, bool listing = false, bool profiling = false);
  /// With --bench: -1 when `backend` is cuda on a usable GPU, else prints one line and
  /// returns 2. Call before printing anything else.
  int check_backend(const Cli& cli, Backend backend) const;
  /// The element limit for --rows x --cols: kMaxBenchElements with --bench, else `normal`.
  std::size_t max_elements(std::size_t normal) const {
    return enabled ? kMaxBenchElements : normal;
  }
  static std::string usage();
};

/// One chapter program's benchmark: prints the device header (name, SMs, measured copy
/// bandwidth) on construction, times kernels, appends each row to the CSV as it is measured,
/// prints the table at finish().
class Bench {
 public:
  Bench(std::string chapter, std::string op, const BenchOptions& options);

  /// Times `launch` (one kernel run on the current device) and records a row.
  const BenchRow& time(const std::string& kernel, const std::string& dtype,
                       const std::string& shape, const Work& work,
                       const std::function<void()>& launch);
  /// Records a kernel that cannot take this shape ("skipped: cols > 1024").
  void skip(const std::string& kernel, const std::string& why);
  /// Prints the table; returns the program's exit code (0).
  int finish();

  const DeviceInfo& device() const { return device_; }
  const CopyRoofline& roofline() const { return copy_; }

 private:
  std::string chapter_;
  std::string op_;
  BenchOptions options_;
  DeviceInfo device_;
  CopyRoofline copy_;
  std::string date_;
  std::vector<BenchRow> rows_;
  std::vector<std::string> skipped_;
};

}  // namespace wb
