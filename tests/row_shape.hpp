// The shape of a row-wise op's input (softmax, LayerNorm): rows x cols.
#pragma once

namespace wb::test {

struct RowShape {
  int rows, cols;
};

}  // namespace wb::test
