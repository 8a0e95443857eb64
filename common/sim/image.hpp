// What the program's own image tells the instrumented simulator (common/sim/access.cpp):
// where its static data lies, which static objects are there (a kernel's static __shared__
// arrays are function-local statics), and the source line of a code address. Read with
// binutils' nm and addr2line, once, and only by instrumented binaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wb::sim::detail {

/// A static object of the program, from its symbol table.
struct StaticObject {
  std::uintptr_t lo = 0, hi = 0;  ///< its bytes, [lo, hi)
  std::string name;               ///< demangled, e.g. "wb::ch01::f(float*)::tile"
  /// For a function-local static (what a __shared__ array is): its function without the
  /// parameter list and without anonymous namespaces, e.g. "wb::ch01::f"; else empty.
  std::string owner;
  bool writable = false;  ///< in .data or .bss (not read-only constants)
};

/// True when `address` lies in the main program's loaded image (code, constants, statics).
bool in_program_image(std::uintptr_t address);

/// The static object holding `address`, or else the nearest one below it (nullptr: none).
const StaticObject* static_object_near(std::uintptr_t address);

/// The source line of code address `pc` (a return address into instrumented code) with the
/// chain of calls inlined there, innermost first, relative to the project root, e.g.
/// "common/vector_types.cuh:66, inlined into chapters/03_block_merge/x.cuh:91".
std::string source_line(const void* pc);

/// Each pc's innermost frame outside common/ (the kernel's own line that made the access,
/// when a common/ helper performed it), or its innermost frame. One addr2line run for the pcs
/// not looked up before (the answers are kept for the life of the program).
std::vector<std::string> kernel_lines(const std::vector<const void*>& pcs);

/// "wb::ch01::f" of "wb::(anonymous namespace)::f<256>": anonymous namespaces removed.
std::string without_anonymous_namespaces(std::string name);

}  // namespace wb::sim::detail
