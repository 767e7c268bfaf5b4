"""Shared by the benchmarks: texts, the simulated player, arrival-time figures, host load, plots, perf_analyzer."""
