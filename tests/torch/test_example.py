"""The example model (examples/tiny_gpt.py) for a few steps: the workbook's attention trains it
as the math attention does, within the example's bound, and generation with a KV cache through
decode gives the tokens generation without one gives (CTest torch/ops, label torch)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import tiny_gpt  # noqa: E402


def test_the_example_trains_as_the_math_attention_and_generates_the_same_with_a_cache(capsys):
    assert tiny_gpt.main(["--steps", "8"]) == 0
    out = capsys.readouterr().out
    assert "the same tokens" in out
