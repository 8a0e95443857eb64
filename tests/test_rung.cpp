// The rung interface (common/rung.hpp): the limits refuse what a rung cannot take, with one
// line naming the limit, before anything runs; --list prints the ladder as CSV.
#include <climits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/rung_list.hpp"
#include "tests/support.hpp"

using namespace wb;

namespace {

int g_launches = 0;
void count_launch(const RowArgs&) { ++g_launches; }

// Any non-null pointer: the refusals look at shapes and types, the launch above at nothing.
float g_cell[1];

RowArgs row_args(int rows, int cols, Dtype t) {
  return {g_cell, g_cell, rows, cols, t};
}

AttentionArgs attention_args(int d, bool causal, Dtype t) {
  AttentionArgs a{g_cell, g_cell, g_cell, g_cell, g_cell, nullptr, nullptr,
                  AttentionShape{2, 17, 97, d}, 0.125f, causal, t};
  return a;
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("a row rung refuses rows longer than its limit and types it does not take") {
    const RungLimits l = row_limits(1024, {Dtype::fp32, Dtype::fp16});
    CHECK(refusal(l, row_args(3, 1024, Dtype::fp32)).empty());
    CHECK(refusal(l, row_args(3, 1025, Dtype::fp32)) ==
          "rows must be >= 1 and cols in [1, 1024] for fp32, got (3, 1025)");
    CHECK(refusal(l, row_args(0, 5, Dtype::fp16)).find("rows must be >= 1") == 0);
    CHECK(refusal(l, row_args(3, 5, Dtype::bf16)) == "takes fp32, fp16 elements, not bf16");
  }

  TEST_CASE("a cached row's byte limit lets 16-bit rows be twice as long") {
    const RungLimits l = row_limits(kAnyCols, {Dtype::fp32, Dtype::bf16}, 4096);
    CHECK(l.max_cols_of(Dtype::fp32) == 1024);
    CHECK(l.max_cols_of(Dtype::bf16) == 2048);
    CHECK(refusal(l, row_args(1, 2048, Dtype::bf16)).empty());
    CHECK_FALSE(refusal(l, row_args(1, 1025, Dtype::fp32)).empty());
  }

  TEST_CASE("an attention rung refuses head dimensions, masks and types it does not take") {
    const RungLimits l =
        attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128}, 65535, false, kWritesO | kWritesLse);
    CHECK(refusal(l, attention_args(64, false, Dtype::fp16)).empty());
    CHECK(refusal(l, attention_args(59, false, Dtype::fp16)) ==
          "d = 59 is not one it takes: d in 64 or 128");
    CHECK(refusal(l, attention_args(64, true, Dtype::fp16)) == "takes no causal mask");
    CHECK(refusal(l, attention_args(64, false, Dtype::fp32)) ==
          "takes fp16, bf16 elements, not fp32");
    AttentionArgs no_lse = attention_args(128, false, Dtype::bf16);
    no_lse.lse = nullptr;
    CHECK_FALSE(refusal(l, no_lse).empty());
  }

  TEST_CASE("an attention rung refuses lengths its int loops or its grid cannot reach") {
    RungLimits l = attention_limits({Dtype::fp32}, 128, {}, 65535, false, kWritesO);
    AttentionArgs a = attention_args(64, false, Dtype::fp32);
    a.shape.lk = kMaxLength;  // a loop's last step of up to 1024 stays an int
    CHECK(refusal(l, a).empty());
    a.shape.lk = kMaxLength + 1;
    CHECK(refusal(l, a) == "lq and lk must be in [1, " + std::to_string(kMaxLength) +
                               "], got lq 17, lk " + std::to_string(kMaxLength + 1));
    // The matmul baselines: grid.y = ceil(lq / 64) <= 65535, and bh x lq int rows.
    l.max_length = 65535 * 64;
    l.max_rows = INT_MAX;
    a.shape = {1, 65535 * 64, 5, 64};
    CHECK(refusal(l, a).empty());
    a.shape.lq += 1;
    CHECK(refusal(l, a).find("lq and lk must be in [1, 4194240]") == 0);
    a.shape = {1024, 2097152, 5, 64};  // bh x lq = 2^31
    CHECK(refusal(l, a) == "bh x lq = 2147483648 exceeds 2147483647");
  }

  TEST_CASE("run_rung launches what the limits take and refuses the rest before launching") {
    const Rung<RowArgs> rung{"short_rows", "rows of at most 32", row_limits(32), &count_launch};
    g_launches = 0;
    run_rung(rung, row_args(4, 32, Dtype::fp32));
    CHECK(g_launches == 1);
    CHECK_THROWS_WITH_AS(run_rung(rung, row_args(4, 33, Dtype::fp32)),
                         "short_rows: rows must be >= 1 and cols in [1, 32] for fp32, got (4, 33)",
                         std::invalid_argument);
    CHECK(g_launches == 1);
  }

  TEST_CASE("the ladder's CSV has one line per rung under the header, quoted where needed") {
    const Ladder<RowArgs> ladder = {
        {"a", "first, with a comma", row_limits(kAnyCols), &count_launch},
        {"b", "second", row_limits(1024, {Dtype::fp32, Dtype::fp16}, 2048), &count_launch}};
    std::ostringstream out;
    print_ladder(out, "99_test", "softmax", rung_infos(ladder), "-");
    CHECK(out.str() == ladder_csv_header() + "\n" +
                           "99_test,softmax,1,a,\"first, with a comma\",fp32," +
                           std::to_string(kAnyCols) + ",0,0,,0,\n" +
                           "99_test,softmax,2,b,second,fp32;fp16,1024,2048,0,,0,\n");
    // A file that cannot be opened is an error the program reports, not an empty success.
    CHECK_THROWS_WITH_AS(print_ladder(out, "99_test", "softmax", rung_infos(ladder),
                                      "/nonexistent-directory/ladder.csv"),
                         "--csv: cannot write '/nonexistent-directory/ladder.csv'",
                         std::runtime_error);
  }
}
