"""The pieces of bench/bench_vs_torch.py: what is counted, the plan, the torch side, the output."""
