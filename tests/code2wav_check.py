"""Measures python_backends/ar/code2wav.py in the AR environment (torch and SNAC are not
in the test environment) and prints the figures as JSON for tests/vllm/test_ar_code2wav.py:

    .venv-ar/bin/python tests/code2wav_check.py SNAC_DIRECTORY

Random codes, the test model's SNAC with its noise off (decoding repeatable).
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from python_backends.ar import orpheus  # noqa: E402
from python_backends.ar.code2wav import Code2WavEngine, snac_books  # noqa: E402
from tests.audio import snr_db  # noqa: E402

REACH = 2  # frames of SNAC's receptive field, as the contract's AR_CHUNK_PARAMS context


def main(directory: str) -> dict:
    rng = np.random.default_rng(0)
    windows = rng.integers(0, orpheus.CODEBOOK_SIZE, (3, 11, orpheus.POSITIONS)).astype(np.int32)
    # Frame f's position p holds 7f + p; orpheus_tts reads codes_0 ← i; codes_1 ← i+1, i+4;
    # codes_2 ← i+2, i+3, i+5, i+6 (i = 7·frame), and a batch's rows are its windows.
    numbered = torch.arange(2 * 2 * 7).reshape(2, 2, 7)
    orpheus_books = [[0, 7], [1, 4, 8, 11], [2, 3, 5, 6, 9, 10, 12, 13]]
    books_match = all(snac_books(numbered)[k][row].tolist() == [14 * row + i for i in orpheus_books[k]]
                      for row in range(2) for k in range(3))

    plain = Code2WavEngine(directory, noise=False, buckets=False)
    padded = Code2WavEngine(directory, noise=False, buckets=True)  # 11 frames → 12, 3 rows → 4
    whole, bucketed = plain.decode(windows), padded.decode(windows)
    alone = np.concatenate([plain.decode(w[None]) for w in windows])
    kept = (11 - REACH) * orpheus.SAMPLES_PER_FRAME
    return {
        "books_match": books_match,
        "shapes": [list(whole.shape), list(bucketed.shape)],
        "bucketed_snr_db": min(snr_db(whole[i, :kept], bucketed[i, :kept]) for i in range(3)),
        "bucketed_tail_snr_db": min(snr_db(whole[i, kept:], bucketed[i, kept:]) for i in range(3)),
        "batched_snr_db": min(snr_db(alone[i], whole[i]) for i in range(3)),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
