// Chapter 11 program: FlashAttention-3 on Hopper, one idea per rung. `--help` lists the options.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/08_fa2_at_speed/fast_report.hpp"
#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "chapters/11_fa3_hopper/fa3_trace.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_profile.hpp"
#include "common/attention_report.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"

namespace {

using namespace wb;
using namespace wb::ch11;

void print_intro() {
  std::cout
      << "Chapter 11: FlashAttention-3 on Hopper\n"
         "  Chapter 08's kernel runs on Ampere's instructions: each warp feeds its tensor cores\n"
         "  from registers it loaded itself, and every thread also copies tiles and waits at\n"
         "  barriers. Hopper's instructions are asynchronous: wgmma reads both operands from\n"
         "  shared memory for a warpgroup of 4 warps, TMA copies a whole tile on one thread's\n"
         "  word, and mbarriers count the bytes as they land. This chapter keeps FA2's algorithm\n"
         "  and rebuilds its kernel on them, one idea per rung, each proven equal to the one\n"
         "  before: wgmma, TMA, a producer warpgroup with setmaxnreg (warp specialization), two\n"
         "  consumer warpgroups taking turns on the tensor cores (ping-pong), and the next tile's\n"
         "  Q K^T issued before this tile's softmax (intra-warpgroup pipelining). The rungs from\n"
         "  fa3_wgmma on are sm_90a code: on the GPU an H100 or H200; the simulator runs them\n"
         "  anywhere.\n\n";
}

// The chapter after this one, printed last.
void print_next() {
  std::cout << "Next: chapter 12, ring attention: the sequence split across GPUs, its K/V "
               "blocks passed\n  around a ring and merged by chapter 09's monoid (docs page "
               "\"Chapter 12: ring attention\").\n";
}

// The report: the CPU step and every rung, fp16 and bf16, with and without the mask
// (fast_report.hpp), the CPU step with the tiles of the Hopper rungs (128 x 128).
void report_errors(Backend backend, const Ladder<AttentionArgs>& ladder, AttentionShape shape,
                   std::uint64_t seed) {
  ch08::report_tensor_core_errors(backend, ladder, shape, seed, fa3_tiles(shape.d));
}

}  // namespace

int main(int argc, char** argv) {
  bool causal = false;
  std::string dtype = "fp16";
  Cli cli("ch11",
          "Chapter 11: FlashAttention-3 on Hopper: wgmma, TMA, warp specialization, ping-pong "
          "and intra-warpgroup pipelining, one rung each (fp16 and bf16).");
  AttentionShapeOptions shape_options(cli, {16, 4096, 4096, 128}, {1, 200, 333, 64},
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
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
