// Chapter 06's measurement of what FA2 saves: the extra memory and time of the naive
// attention and of FA2 on the CPU, one head. Host code only, used by the chapter program.
//
// Two measures: the peak of live heap bytes during a call, kept by the program's counting
// operator new (HeapCount), and the peak resident set size of the process, read from
// /proc/self/status after resetting it through /proc/self/clear_refs (Linux).
#pragma once

#include <cstddef>
#include <cstdint>

namespace wb::ch06 {

/// The heap bytes live now and their peak since the last reset. The counting operator new
/// and delete that keep them are the chapter program's own (main.cpp): a replaced global
/// operator new in this chapter's library would be linked into every binary that links it,
/// the tests included (the linker takes it from the archive to resolve their operator new).
struct HeapCount {
  std::size_t live = 0;
  std::size_t peak = 0;
};

/// The naive attention (Eigen, S stored) and the CPU FA2 in 64 x 64 tiles on one head of
/// lq = lk = `length`, d = 64: heap peak, peak RSS growth and time of each, as a table.
void report_memory(int length, std::uint64_t seed, HeapCount& heap);

}  // namespace wb::ch06
