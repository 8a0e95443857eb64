// The warp, as every chapter's kernels and their host-side plans count it.
#pragma once

namespace wb {

/// Threads of a warp: the lanes that execute together and exchange registers by shuffles.
inline constexpr int kWarpSize = 32;
/// The member mask naming every lane of a warp (the shuffles' and votes' first argument).
inline constexpr unsigned kAllLanes = 0xffffffffu;

}  // namespace wb
