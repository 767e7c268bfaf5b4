"""The gateway alone: its CPU, its ceiling with Triton replayed, Opus, and fairness beside greedy clients."""
