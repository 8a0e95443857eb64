// Chapter 08 program: FlashAttention-2 at speed, one optimization per rung. `--help` lists the
// options.
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "chapters/08_fa2_at_speed/fast_report.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_profile.hpp"
#include "common/attention_report.hpp"
#include "common/bench.hpp"
#include "common/buffer.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/ladder_profile.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/sim/access.hpp"
#include "common/table.hpp"

namespace {

using namespace wb;
using namespace wb::ch08;

void print_intro() {
  std::cout
      << "Chapter 08: FlashAttention-2 at speed\n"
         "  Chapter 06's tensor-core kernel computes the right thing slowly: every K/V tile, its\n"
         "  S~ and P~ make a round trip through shared memory. This chapter keeps the algorithm\n"
         "  and changes how it runs, one idea per rung, each rung proven equal to the one before:\n"
         "  mma.sync.m16n8k16 with S~ in registers (its accumulator layout IS P~'s operand\n"
         "  layout), ldmatrix, a swizzled shared-memory layout, cp.async double buffering, and\n"
         "  FA2's own schedule (128 rows per block, exp2 with the scale folded in, the causal\n"
         "  mask only where the diagonal crosses a tile).\n\n";
}

// Eq. (1): lane (g, t)'s S~ registers after S = Q K^T, and the P~ A-fragment registers they
// become, as matrix coordinates: the two columns agree element for element.
void print_fragment_trace() {
  std::cout << "Eq. (1): S~'s accumulators are P~'s A fragment. Keys 0-15 of a tile, for a few "
               "lanes (g = lane / 4, t = lane % 4);\n  s[n][e] holds S(g + 8 (e / 2), 8 n + 2t + "
               "e % 2), A register r holds A(g + 8 (r % 2), 2t + 8 (r / 2)) and the next column:\n";
  Table table({"lane", "g, t", "A register", "= pack(s[n][e], s[n][e + 1])",
               "S~ elements (row, key)", "A elements (row, col)"});
  for (int lane : {0, 1, 5, 31}) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {
      const int n = r / 2, e = 2 * (r % 2);  // the accumulator the register is packed from
      const int s_row = g + 8 * (e / 2), s_key = 8 * n + 2 * t + e % 2;
      const int a_row = g + 8 * (r % 2), a_col = 2 * t + 8 * (r / 2);
      table.add_row({std::to_string(lane), std::to_string(g) + ", " + std::to_string(t),
                     "a[" + std::to_string(r) + "]",
                     "s[" + std::to_string(n) + "][" + std::to_string(e) + "], s[" +
                         std::to_string(n) + "][" + std::to_string(e + 1) + "]",
                     "(" + std::to_string(s_row) + ", " + std::to_string(s_key) + "), (" +
                         std::to_string(s_row) + ", " + std::to_string(s_key + 1) + ")",
                     "(" + std::to_string(a_row) + ", " + std::to_string(a_col) + "), (" +
                         std::to_string(a_row) + ", " + std::to_string(a_col + 1) + ")"});
    }
  }
  table.print(std::cout);
  std::cout << '\n';
}

// Eq. (3): the 8 row addresses of one ldmatrix matrix (column chunk 0 of rows 0-7, d = 64),
// the banks they start in, unpadded, padded and swizzled.
void print_bank_map() {
  using Unpadded = UnpaddedLayout<64>;  // rows 128 bytes apart
  using Padded = TileLayout<64, false>;
  using Swizzled = TileLayout<64, true>;
  std::cout << "Eq. (3): one ldmatrix matrix, column chunk 0 of rows 0-7 of a d = 64 tile: the "
               "bank each 16-byte row starts in\n  (it spans that bank and the next 3):\n";
  Table table({"row", "unpadded (128 B rows)", "padded (144 B rows)", "swizzled chunk",
               "swizzled (128 B rows)"});
  for (int row = 0; row < kSwizzleRows; ++row) {
    table.add_row({std::to_string(row), std::to_string(first_bank<Unpadded>(row, 0)),
                   std::to_string(first_bank<Padded>(row, 0)),
                   std::to_string(Swizzled::offset(row, 0) % 64 / kChunkElements),
                   std::to_string(first_bank<Swizzled>(row, 0))});
  }
  table.print(std::cout);
  std::cout << "  Unpadded, all 8 rows start in bank 0: the banks serve them one after another,\n"
               "  8 wavefronts (an 8-way conflict). Padded or swizzled: 8 groups of 4 banks, 1 "
               "wavefront.\n  `ch08 --profile` counts them per rung (the \"conflict\" column) and "
               "records one ldmatrix in each layout.\n\n";
}

// Eq. (4): the cp.async pipeline over 4 K/V tiles.
void print_pipeline() {
  std::cout
      << "Eq. (4): K/V tiles by cp.async into two buffers, 4 tiles:\n"
         "  copy     | tile 0 -> buf 0 | tile 1 -> buf 1 | tile 2 -> buf 0 | tile 3 -> buf 1 |\n"
         "  compute  |  (wait)         | tile 0 (buf 0)  | tile 1 (buf 1)  | tile 2 (buf 0)  "
         "| tile 3 (buf 1)\n"
         "  Each step: issue tile j + 1, commit, wait_group 1 (tile j landed), "
         "__syncthreads, compute j,\n  __syncthreads (buffer j % 2 free for tile j + 2).\n\n";
}

void print_trace() {
  print_fragment_trace();
  print_bank_map();
  print_pipeline();
}

// The chapter after this one, printed last.
void print_next() {
  std::cout
      << "Next: chapter 09, Flash-Decoding (chapters/09_flash_decoding, docs page\n"
         "\"Chapter 09: Flash-Decoding\"): a handful of query rows against a long KV cache, split\n"
         "across blocks and merged by chapter 03's monoid.\n";
}

// The report: the CPU step and every rung, fp16 and bf16, with and without the mask
// (fast_report.hpp), the CPU step with the tiles of fa2_mma (64 x 64).
void report_errors(Backend backend, const Ladder<AttentionArgs>& ladder, AttentionShape shape,
                   std::uint64_t seed) {
  ch08::report_tensor_core_errors(backend, ladder, shape, seed, Rungs<Backend::sim>::fa2_mma().facts.tiles(shape.d));
}

// Profile mode: the bank-map launch in each layout of eq. (3), recorded (bank_map_kernel.cuh).
// The wavefronts of its one ldmatrix, and with --access-csv its shared requests lane by lane
// (rungs "bank_map_unpadded", ...), from which the docs build draws the page's bank map.
void profile_bank_map() {
  std::cout << "Eq. (3), recorded: one ldmatrix .x4 of a 16 x 64 fp16 tile's A fragment (4 "
               "matrices of 8 rows x 16 bytes):\n";
  Table table({"layout", "row bytes", "ldmatrix wavefronts", "conflict-free", "fragment"});
  DeviceBuffer<std::uint32_t> fragments(Backend::sim, 32 * 4);
  std::vector<std::uint32_t> first;
  const std::string& access_csv = profile_access_csv();
  for (auto [layout, name, row_bytes] : {std::tuple{BankLayout::unpadded, "unpadded", 128},
                                         {BankLayout::padded, "padded", 144},
                                         {BankLayout::swizzled, "swizzled", 128}}) {
    sim::start_profile(/*trace_global=*/true);
    Kernels<Backend::sim>::ldmatrix_bank_map(layout, fragments.data());
    const std::vector<sim::LaunchProfile> launches = sim::stop_profile();
    // The launch's shared loads are the ldmatrix (the tile is written by stores).
    const sim::AccessCounts& loads = launches.at(0).counts.shared_load;
    const std::vector<std::uint32_t> got = fragments.download();
    if (first.empty()) first = got;
    table.add_row({name, std::to_string(row_bytes), std::to_string(loads.units),
                   std::to_string(loads.ideal_units),
                   got == first ? "same registers" : "DIFFERS (wrong address)"});
    if (!access_csv.empty())
      write_access_csv(access_csv, std::string("bank_map_") + name, launches);
  }
  table.print(std::cout);
  std::cout << "  Unpadded, the 8 rows of a matrix are 128 bytes apart, all in banks 0-3: 8 "
               "wavefronts each.\n\n";
}

}  // namespace

int main(int argc, char** argv) {
  bool causal = false;
  std::string dtype = "fp16";
  Cli cli("ch08",
          "Chapter 08: FlashAttention-2 at speed: mma.sync, ldmatrix, swizzle, cp.async and "
          "FA2's schedule, one rung each (fp16 and bf16).");
  AttentionShapeOptions shape_options(cli, {16, 4096, 4096, 64}, {1, 200, 333, 64},
                                      ch04::kMaxBatchHeads, 128, "; the rungs take 64 or 128");
  cli.flag("--causal", &causal,
           "with --bench or --profile: the causal attention (the report runs both)")
      .option("--dtype", &dtype, {"fp16", "bf16"},
              "with --bench or --profile: the element type (default fp16)");
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const AttentionShape shape = shape_options.resolve(options.backend);
  const Dtype type = dtypes_of_option(dtype).front();
  ChapterSteps<AttentionArgs> steps = attention_steps(options, shape, causal, type, report_errors);
  steps.check = [&] {
    if (const int code = check_mode_options(cli, options, causal, dtype != "fp16"); code >= 0)
      return code;
    if (shape.d != 64 && shape.d != 128)
      return cli.error("--d " + std::to_string(shape.d) + ": the rungs take d = 64 or 128");
    return check_attention_size(cli, options, shape, 28, "the fp64 reference stores P, 2 GiB");
  };
  // The ladder's profile, then eq. (3)'s ldmatrix recorded on the three layouts.
  steps.profile = [profile = steps.profile](const Ladder<AttentionArgs>& ladder) {
    const int code = profile(ladder);
    profile_bank_map();
    return code;
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
