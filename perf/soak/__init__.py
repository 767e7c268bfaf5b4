"""Soak: mixed WebSocket load at about half of capacity; errors, leaks and memory growth.
How it runs and its goals: docs/benchmarks.md, "Soak"; its flags: --help; its faults: perf.soak.chaos."""
