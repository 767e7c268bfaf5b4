"""Plots for the benchmarks' reports: matplotlib, imported only to draw."""

from __future__ import annotations


def pyplot():
    """matplotlib, imported only to draw, so the numbers and goals need no plotting stack."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt
