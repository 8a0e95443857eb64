// The benchmark mode's pure helpers (common/bench.hpp): what is counted, how the samples are
// summarized, how a row is written. The timing itself needs a GPU; these need none.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/bench.hpp"
#include "common/timer.hpp"

namespace {

using namespace wb;

// Every formula below is a product and a quotient of exact small integers: the only rounding
// is double's, so 1e-12 relative is far more than enough and catches any factor of 2 or 1000.
constexpr double kExact = 1e-12;


TimingStats timing(double median_ms, double min_ms, double max_ms, int repetitions) {
  TimingStats t;
  t.median_ms = median_ms;
  t.min_ms = min_ms;
  t.max_ms = max_ms;
  t.repetitions = repetitions;
  return t;
}

}  // namespace

TEST_CASE("GB/s is bytes over seconds in units of 1e9" * doctest::test_suite("cpu")) {
  CHECK(gb_per_s(1e9, 1000.0) == doctest::Approx(1.0).epsilon(kExact));
  CHECK(gb_per_s(3e9, 1.0) == doctest::Approx(3000.0).epsilon(kExact));
  CHECK(gb_per_s(1e9, 0.0) == 0.0);  // no division by zero for an unmeasured run
}

TEST_CASE("TFLOP/s is FLOPs over seconds in units of 1e12" * doctest::test_suite("cpu")) {
  CHECK(tflop_per_s(1e12, 1000.0) == doctest::Approx(1.0).epsilon(kExact));
  CHECK(tflop_per_s(5e11, 1.0) == doctest::Approx(500.0).epsilon(kExact));
  CHECK(tflop_per_s(1e12, 0.0) == 0.0);
}

TEST_CASE("softmax moves one read and one write per element" * doctest::test_suite("cpu")) {
  CHECK(softmax_bytes(49152, 1024, 4) == doctest::Approx(2.0 * 49152 * 1024 * 4).epsilon(kExact));
  CHECK(softmax_bytes(3, 5, 2) == doctest::Approx(60.0).epsilon(kExact));
  // The largest shape of the benchmark does not overflow: 49152 x 32768 fp32 in and out.
  CHECK(softmax_bytes(49152, 32768, 4) == doctest::Approx(12884901888.0).epsilon(kExact));
}

TEST_CASE("LayerNorm adds gamma and beta once and a float mean and rstd per row" *
          doctest::test_suite("cpu")) {
  // x and y: 2 * 10 * 7 * 4 = 560; gamma, beta: 2 * 7 * 4 = 56; mean, rstd: 2 * 10 * 4 = 80.
  CHECK(layernorm_bytes(10, 7, 4) == doctest::Approx(696.0).epsilon(kExact));
  // fp16 x and y, the statistics still float: 2 * 10 * 7 * 2 + 2 * 7 * 2 + 80 = 388.
  CHECK(layernorm_bytes(10, 7, 2) == doctest::Approx(388.0).epsilon(kExact));
}

TEST_CASE("attention counts 4 BH Lq Lk D FLOPs and half of that when causal" *
          doctest::test_suite("cpu")) {
  CHECK(attention_flops(16, 4096, 4096, 64, false) ==
        doctest::Approx(4.0 * 16 * 4096 * 4096 * 64).epsilon(kExact));
  CHECK(attention_flops(16, 4096, 4096, 64, true) ==
        doctest::Approx(2.0 * 16 * 4096 * 4096 * 64).epsilon(kExact));
  CHECK(attention_flops(1, 3, 5, 7, false) == doctest::Approx(420.0).epsilon(kExact));
  CHECK(attention_backward_flops(1, 3, 5, 7, false) == doctest::Approx(1050.0).epsilon(kExact));
  // Q and O (BH, Lq, D), K and V (BH, Lk, D) in fp16, logsumexp (BH, Lq) in float:
  // 2 * (2*3*7 + 2*5*7) * 2 + 2 * 3 * 4 = 448 + 24.
  CHECK(attention_bytes(2, 3, 5, 7, 2) == doctest::Approx(472.0).epsilon(kExact));
}

TEST_CASE("a row's throughput is GB/s for bytes and TFLOP/s when FLOPs are counted" *
          doctest::test_suite("cpu")) {
  const TimingStats t = timing(2.0, 1.5, 3.0, 5);
  SUBCASE("bandwidth-bound") {
    const BenchRow r = make_bench_row("softmax", "01_safe_softmax", "warp_shuffle", "fp32", "4x8",
                                      Work::moving(4e9), t, 2500.0);
    CHECK(r.unit == "GB/s");
    CHECK(r.throughput == doctest::Approx(2000.0).epsilon(kExact));
    CHECK(r.gbps == doctest::Approx(2000.0).epsilon(kExact));
    CHECK(r.fraction_of_copy == doctest::Approx(0.8).epsilon(kExact));
    CHECK(r.source == "workbook");
  }
  SUBCASE("compute-bound") {
    const BenchRow r = make_bench_row("attention", "06_fa2_rescaled", "fa2", "fp16", "s",
                                      Work::computing(6e11, 1e9), t, 2000.0);
    CHECK(r.unit == "TFLOP/s");
    CHECK(r.throughput == doctest::Approx(300.0).epsilon(kExact));
    CHECK(r.gbps == doctest::Approx(500.0).epsilon(kExact));
    CHECK(r.fraction_of_copy == doctest::Approx(0.25).epsilon(kExact));
  }
  SUBCASE("without a roofline the fraction is 0, not inf") {
    const BenchRow r = make_bench_row("softmax", "c", "k", "fp32", "s", Work::moving(1e9), t, 0.0);
    CHECK(r.fraction_of_copy == 0.0);
  }
}

TEST_CASE("the summary is the median with min and max" * doctest::test_suite("cpu")) {
  SUBCASE("odd count: the middle sample, whatever the order") {
    const TimingStats s = summarize({5.0, 1.0, 4.0, 2.0, 3.0});
    CHECK(s.median_ms == 3.0);
    CHECK(s.min_ms == 1.0);
    CHECK(s.max_ms == 5.0);
    CHECK(s.repetitions == 5);
  }
  SUBCASE("even count: the mean of the two middle samples") {
    const TimingStats s = summarize({4.0, 1.0, 2.0, 10.0});
    CHECK(s.median_ms == 3.0);
    CHECK(s.max_ms == 10.0);  // one slow outlier moves max, not the median
  }
  SUBCASE("spread is (max - min) / median in percent") {
    const TimingStats s = summarize({1.0, 2.0, 3.0});
    CHECK(spread_percent(s) == doctest::Approx(100.0).epsilon(kExact));
    CHECK(spread_percent(TimingStats{}) == 0.0);
  }
}

TEST_CASE("shapes are written without commas" * doctest::test_suite("cpu")) {
  CHECK(shape_string(49152, 32768) == "49152x32768");
  CHECK(attention_shape_string(16, 4096, 4096, 64, true) == "bh16 lq4096 lk4096 d64 causal");
  CHECK(attention_shape_string(1, 2, 3, 128, false) == "bh1 lq2 lk3 d128 full");
}

TEST_CASE("bench input repeats a tile of randn rows" * doctest::test_suite("cpu")) {
  const int cols = 3;
  const std::vector<float> x = bench_input(kBenchTileRows * 2 + 5, cols, 1);
  REQUIRE(x.size() == static_cast<std::size_t>((kBenchTileRows * 2 + 5) * cols));
  const std::size_t tile = static_cast<std::size_t>(kBenchTileRows * cols);
  for (std::size_t i = tile; i < x.size(); ++i) CHECK(x[i] == x[i % tile]);
  CHECK(x[0] != x[static_cast<std::size_t>(cols)]);  // distinct rows inside a tile
  CHECK(bench_input(2, cols, 1).size() == 6);        // fewer rows than a tile
}

TEST_CASE("CSV fields are quoted only when they must be" * doctest::test_suite("cpu")) {
  CHECK(csv_escape("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3");
  CHECK(csv_escape("a,b") == "\"a,b\"");
  CHECK(csv_escape("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_escape("two\nlines") == "\"two\nlines\"");
  CHECK(csv_escape("") == "");
}

TEST_CASE("a CSV line has one field per header column in the header's order" *
          doctest::test_suite("cpu")) {
  const TimingStats t = timing(0.5, 0.25, 1.0, 50);
  BenchRow r = make_bench_row("softmax", "01_safe_softmax", "warp_shuffle", "fp32", "49152x1024",
                              Work::moving(1e9), t, 2500.0);
  r.device = "GPU, rev 2";
  r.date = "2025-01-31T12:00:00Z";
  CHECK(csv_header() ==
        "op,source,chapter,kernel,dtype,shape,median_ms,min_ms,max_ms,reps,throughput,unit,gbps,"
        "fraction_of_copy,copy_gbps,device,date");
  CHECK(csv_line(r) ==
        "softmax,workbook,01_safe_softmax,warp_shuffle,fp32,49152x1024,0.5,0.25,1,50,2000,GB/s,"
        "2000,0.8000,2500,\"GPU, rev 2\",2025-01-31T12:00:00Z");
}

TEST_CASE("append_csv writes the header once and appends rows" * doctest::test_suite("cpu")) {
  const std::string path = "test_bench_append.csv";
  std::remove(path.c_str());
  const TimingStats t = timing(1.0, 1.0, 1.0, 1);
  const BenchRow r = make_bench_row("softmax", "c", "k", "fp32", "1x1", Work::moving(1e9), t, 0.0);
  append_csv(path, {});  // creates the file with its header
  append_csv(path, {r});
  append_csv(path, {r, r});
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::remove(path.c_str());
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == csv_header());
  CHECK(lines[1] == csv_line(r));
  CHECK(lines[3] == csv_line(r));
  CHECK_THROWS_AS(append_csv("no_such_dir/x.csv", {r}), std::runtime_error);
}

TEST_CASE("the date is UTC in ISO 8601" * doctest::test_suite("cpu")) {
  const std::string d = utc_now();
  REQUIRE(d.size() == 20);
  CHECK(d[4] == '-');
  CHECK(d[10] == 'T');
  CHECK(d[19] == 'Z');
}
