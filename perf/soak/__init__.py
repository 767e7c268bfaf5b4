"""Soak: mixed WebSocket load at about half of capacity; errors, leaks and memory growth.
How it runs, its flags and goals: docs/benchmarks.md, "How the soak runs"."""
