"""Audio comparisons shared by the tests."""

import numpy as np


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """Signal-to-noise ratio of `test` against `reference`, equal lengths required."""
    assert reference.shape == test.shape, (reference.shape, test.shape)
    noise = np.sum((reference.astype(np.float64) - test) ** 2)
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(noise, 1e-30)))
