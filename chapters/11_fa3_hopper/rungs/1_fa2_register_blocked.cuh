// Chapter 11, rung 1: fa2_register_blocked, chapter 08's last rung, where this ladder starts:
// mma.sync.m16n8k16 per warp, ldmatrix from swizzled tiles, cp.async double buffering, FA2's
// schedule, two row tiles per warp (chapters/08_fa2_at_speed/rungs/7_fa2_register_blocked.cuh
// holds its kernel and launcher). Declared again here, with chapter 08's launcher, limits,
// traffic and facts, so that the chain check holds fa3_wgmma against the kernel it replaces and
// `ch11 --bench` times both in one run.
// Test: ctest --test-dir build -R 11_fa3_hopper --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "chapters/11_fa3_hopper/fa3_hopper.hpp"

namespace wb::ch11 {

template <>
Rung<AttentionArgs> Rungs<kThisBackend>::fa2_register_blocked() {
  Rung<AttentionArgs> r = ch08::Rungs<kThisBackend>::fa2_register_blocked();
  r.change = "chapter 08's last rung: mma.sync per warp, ldmatrix, cp.async, two row tiles a warp";
  return r;
}

}  // namespace wb::ch11
