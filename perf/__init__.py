"""The benchmarks and the soak, a package each by what it measures; their results in perf/results/<topic>/."""
