"""Regenerate piper_phonemes.json: Piper's own espeak-ng phonemization of test sentences.

Piper (`piper-tts`, GPL) is a reference here, never a dependency of the server. Run it
in an environment of its own:

    python -m venv /tmp/piper && /tmp/piper/bin/pip install piper-tts
    /tmp/piper/bin/python tests/data/make_piper_phonemes.py
"""

import json
from pathlib import Path

from piper.phonemize_espeak import EspeakPhonemizer

HERE = Path(__file__).parent
HARVARD = HERE.parents[1] / "perf" / "data" / "harvard.txt"
EXTRA = [
    "Hello, world! How are you?",
    "Wait: is it really you; or someone else?",
    "Dr. Smith arrived at 5 o'clock.",
    "The price rose 42% in 1984, from 3.5 to 7.25 million.",
    "She said \"yes\" and left.",
    "On the 1st and 2nd of May, we met 12,000 people.",
    "It costs 1 plus 2 equals 3.",
    "Don't stop, won't stop, can't stop!",
    "Call me at 10:30 tomorrow.",
    "The quick brown fox jumps over the lazy dog.",
]


def main() -> None:
    lines = [line.strip() for line in HARVARD.read_text().splitlines()]
    texts = [line for line in lines if line and not line.startswith("#")] + EXTRA
    phonemizer = EspeakPhonemizer()
    cases = [
        {"text": text, "piper": ["".join(s) for s in phonemizer.phonemize("en-us", text)]}
        for text in texts
    ]
    out = HERE / "piper_phonemes.json"
    out.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
