// The launch dispatch of the 16-bit tile kernels (chapter 08's rungs, chapter 09's mma_kv,
// chapter 10's tensor-core backward): their checks before launch, and the element type and head
// dimension as template arguments. Host code (this file compiles to nothing by itself).
#pragma once

#include "common/kernel.cuh"

#include <cstdint>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/dtype.hpp"

namespace wb {

/// Refuses, in one line naming `rung`, any of `rows` (the matrices a kernel loads in 16-byte
/// vectors, named in the refusal by `rows_named`) that is not 16-byte aligned.
inline void require_16_byte_rows(const char* rung, std::initializer_list<const void*> rows,
                                 const char* rows_named) {
  constexpr std::uintptr_t kLoadBytes = 16;
  for (const void* p : rows)
    if (reinterpret_cast<std::uintptr_t>(p) % kLoadBytes != 0)
      throw std::invalid_argument(std::string(rung) + ": " + rows_named +
                                  " must be 16-byte aligned");
}

/// Calls launch(T{}, std::integral_constant<int, D>{}) with T the 16-bit type of `dtype` and D
/// the head dimension `d`, after what the 16-bit tile kernels (chapters 08 to 10) need: `rows` (the
/// matrices they load, named in the refusal by `rows_named`) 16-byte aligned, as the tile loads
/// move 16 bytes at a time; fp16 or bf16; d = 64 or 128, the tile shapes compiled (any other d
/// would index past them). Each refusal is one line naming `rung`.
template <typename Launch>
void with_tile_shape(const char* rung, Dtype dtype, int d, std::initializer_list<const void*> rows,
                     const char* rows_named, Launch&& launch) {
  require_16_byte_rows(rung, rows, rows_named);
  if (dtype != Dtype::fp16 && dtype != Dtype::bf16)
    throw std::invalid_argument(std::string(rung) + ": takes fp16 or bf16 elements");
  const auto with_d = [&](auto t) {
    if (d == 64) return launch(t, std::integral_constant<int, 64>{});
    if (d == 128) return launch(t, std::integral_constant<int, 128>{});
    throw std::invalid_argument(std::string(rung) + ": head dimension d = " + std::to_string(d) +
                                " is not one it takes (64 or 128)");
  };
  if (dtype == Dtype::fp16) return with_d(__half{});
  with_d(__nv_bfloat16{});
}

}  // namespace wb
