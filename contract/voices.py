"""The voices a server speaks: the embedded default voice, and every Piper voice (a
`NAME.onnx` beside its `NAME.onnx.json`) in a voices directory.

Only the voices' JSON configs are read here, no model, so the gateway and the Triton
models list the same voices from the same files: the directory is given to both
(`--voices DIR`, passed on as $SPEECHSTREAM_VOICES).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from contract.models import AR_SAMPLE_RATE, DEFAULT_VOICE, ORPHEUS_VOICES, TTS_AR_MODEL, TTS_MODEL

VOICES_ENV = "SPEECHSTREAM_VOICES"
# An Orpheus-format model directory: its voices are served by the autoregressive family.
AR_MODEL_ENV = "SPEECHSTREAM_AR_MODEL"
# The voice chat's chat model: a Hugging Face directory, or EMBEDDED_CHAT for the
# embedded SmolLM2 (python_backends.thinker.gguf_model).
CHAT_MODEL_ENV = "SPEECHSTREAM_CHAT_MODEL"
EMBEDDED_CHAT = "embedded"
PIPER, AR = "piper", "ar"  # the families a voice may belong to


class VoiceError(ValueError):
    """A voices directory the server cannot speak from; the message says what to fix."""


@dataclass(frozen=True)
class VoiceInfo:
    """What every process needs to know of a voice, without loading it."""

    name: str
    sample_rate: int
    language: str  # Piper's language code, e.g. "en_US"
    espeak: str  # espeak-ng's voice for the phonemes, e.g. "en-us"
    length_scale: float  # the voice's own pace: speed 1
    model: Path | None = None  # None: the embedded voice, whose files come in its wheel
    speakers: int = 1  # a multi-speaker voice speaks as any id from 0 to speakers - 1
    speaker_names: tuple[tuple[str, int], ...] = ()  # (name, id), Piper's speaker_id_map
    family: str = PIPER  # PIPER: a Piper voice (tts); AR: an Orpheus voice (tts_ar)

    @property
    def tts_model(self) -> str:
        """The Triton model that speaks with this voice."""
        return TTS_AR_MODEL if self.family == AR else TTS_MODEL

    @property
    def word_timestamps(self) -> bool:
        """Whether its audio comes with word timings (Piper's durations give them)."""
        return self.family == PIPER

    def speaker_problem(self, speaker: int) -> str | None:
        """Why `speaker` is not one of this voice's speaker ids; None when it is."""
        if 0 <= speaker < self.speakers:
            return None
        ids = f"{self.speakers} speakers, 0 to {self.speakers - 1}" if self.speakers > 1 else "one speaker, 0"
        return f"speaker {speaker}: voice {self.name} has {ids}"

    @property
    def language_family(self) -> str:
        """ISO 639-1 code of the language ("en"): which sentence rules cut its text."""
        return self.language.replace("-", "_").split("_")[0].lower()


# The embedded voice's facts, so that processes without its wheel (the gateway, clients)
# know them; a test compares them with the wheel's config.
EMBEDDED = VoiceInfo(DEFAULT_VOICE, 22050, "en_US", "en-us", 1.0)
EMBEDDED_ONLY = MappingProxyType({EMBEDDED.name: EMBEDDED})


def voice_info(name: str, config: dict, model: Path | None = None) -> VoiceInfo:
    """A voice's facts from its Piper config; VoiceError naming what is missing."""
    try:
        language = config.get("language", {}).get("code") or config["espeak"]["voice"]
        info = VoiceInfo(
            name, int(config["audio"]["sample_rate"]), language, config["espeak"]["voice"],
            float(config.get("inference", {}).get("length_scale", 1.0)), model, int(config.get("num_speakers", 1)),
            tuple(sorted(((str(k), int(v)) for k, v in (config.get("speaker_id_map") or {}).items()), key=lambda kv: kv[1])),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise VoiceError(f"voice {name}: its config lacks or garbles {e} (a Piper .onnx.json has audio.sample_rate "
                         "and espeak.voice)") from None
    if info.speakers < 1 or any(not 0 <= i < info.speakers for _, i in info.speaker_names):
        raise VoiceError(f"voice {name}: num_speakers {info.speakers} does not cover its speaker_id_map")
    return info


# The Orpheus format's voices (its prompt is "voice: text"); English, 24 kHz.
ORPHEUS = {name: VoiceInfo(name, AR_SAMPLE_RATE, "en_US", "", 1.0, family=AR) for name in ORPHEUS_VOICES}


def find_voices(directory: str | Path | None, ar: bool = False) -> dict[str, VoiceInfo]:
    """The embedded voice (the default, first), the Piper voices in `directory` by name,
    then, with `ar`, the Orpheus voices of the autoregressive family."""
    voices = dict(EMBEDDED_ONLY) | (find_piper_voices(directory) if directory else {})
    return voices | (ORPHEUS if ar else {})


def find_piper_voices(directory: str | Path) -> dict[str, VoiceInfo]:
    voices: dict[str, VoiceInfo] = {}
    root = Path(directory)
    if not root.is_dir():
        raise VoiceError(f"voices directory {root} is not a directory")
    for model in sorted(root.glob("*.onnx")):
        config = model.with_name(model.name + ".json")
        if not config.is_file():
            raise VoiceError(f"voice {model}: no {config.name} beside it (every Piper voice comes with one)")
        name = model.name.removesuffix(".onnx")
        if name == EMBEDDED.name or name in ORPHEUS:
            raise VoiceError(f"voice {model}: the name {name} is taken by the embedded or an Orpheus voice")
        try:
            parsed = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise VoiceError(f"voice {name}: cannot read {config}: {e}") from None
        voices[name] = voice_info(name, parsed, model)
    return voices


def configured_voices() -> dict[str, VoiceInfo]:
    """The Piper voices of $SPEECHSTREAM_VOICES (the embedded one alone when unset): what
    the Piper chain's models serve."""
    return find_voices(os.environ.get(VOICES_ENV))
