"""Code2Wav in process (python_backends/ar/code2wav.py), measured in the AR environment by
tests/code2wav_check.py on the locally built test SNAC (random weights): the batch
codebook mapping, and the padding to fixed window sizes that lets each size be a CUDA
graph on a GPU (padding runs here too; the graphs need a GPU and were not run here)."""


import pytest

from python_backends.ar import orpheus
from tests.voices import ar_check, build_orpheus_model


@pytest.fixture(scope="module")
def figures():
    return ar_check("code2wav_check.py", str(build_orpheus_model() / "snac"))


def test_a_batch_maps_to_snac_codebooks_as_orpheus_reads_each_window(figures):
    assert figures["books_match"]


def test_padding_to_a_window_bucket_changes_nothing_short_of_the_right_context(figures):
    assert figures["shapes"] == [[3, 11 * orpheus.SAMPLES_PER_FRAME]] * 2  # padding cut off again
    assert figures["bucketed_snr_db"] >= 60
    # The last frames hear the padding: that is where the connector's right context is cut.
    assert figures["bucketed_tail_snr_db"] < figures["bucketed_snr_db"]


def test_a_batch_decodes_as_its_windows_alone(figures):
    assert figures["batched_snr_db"] >= 60
