// Chapter 08, rung 1: fa2_tensor_core, chapter 06's last rung, where this ladder starts: wmma
// 16x16x16 tiles, S~ and P~ through shared memory (chapters/06_fa2_rescaled/rungs/
// 2_fa2_tensor_core.cuh holds its kernel and launcher). Declared again here, with chapter 06's
// launcher, limits, traffic and facts, so that the chain check holds fa2_mma against the kernel
// it replaces and `ch08 --bench` times both in one run.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"

namespace wb::ch08 {

template <>
Rung<AttentionArgs> Rungs<kThisBackend>::fa2_tensor_core() {
  Rung<AttentionArgs> r = ch06::Rungs<kThisBackend>::fa2_tensor_core();
  r.change = "chapter 06's last rung: wmma 16x16x16, S~ and P~ through shared memory";
  return r;
}

}  // namespace wb::ch08
