"""The command-line options that `speechstream-triton`, `speechstream-serve` and the perf
tools share: what Triton serves, and whether on the GPU."""

from __future__ import annotations

import argparse
import os

from contract.voices import AR_MODEL_ENV, CHAT_MODEL_ENV, EMBEDDED_CHAT, VOICES_ENV
from operations.environment import GPU_CONFIG

GPU_ENV = "SPEECHSTREAM_GPU"
LISTEN_ENV = "SPEECHSTREAM_LISTEN"


def add_voices_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--voices", default=os.environ.get(VOICES_ENV),
        help=f"a directory of Piper voices (NAME.onnx beside NAME.onnx.json) to serve besides the embedded one "
             f"(env {VOICES_ENV})",
    )
    parser.add_argument(
        "--ar-model", default=os.environ.get(AR_MODEL_ENV),
        help=f"an Orpheus-format model directory (talker/ and snac/) to serve the autoregressive family from "
             f"(env {AR_MODEL_ENV})",
    )
    add_chat_arguments(parser)


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chat-model", default=os.environ.get(CHAT_MODEL_ENV),
        help=f"a chat model directory (Hugging Face, Llama- or Qwen-style) for the voice chat's Thinker, or "
             f"'{EMBEDDED_CHAT}' for the embedded SmolLM2-135M-Instruct (env {CHAT_MODEL_ENV})",
    )
    add_chat_flag(parser)


def add_chat_flag(parser: argparse.ArgumentParser) -> None:
    """--chat, the embedded chat model: a shorthand for --chat-model embedded."""
    parser.add_argument("--chat", dest="chat_model", action="store_const", const=EMBEDDED_CHAT,
                        help=f"voice chat on the embedded chat model: --chat-model {EMBEDDED_CHAT}")


def add_listen_flag(parser: argparse.ArgumentParser) -> None:
    """--listen: serve the speech recognizer (listen mode); --chat brings it too."""
    parser.add_argument("--listen", action="store_true", default=os.environ.get(LISTEN_ENV) == "1",
                        help=f"serve the speech recognizer (Triton's `asr` model) for listen mode; a chat model "
                             f"serves it too (env {LISTEN_ENV}=1)")


def add_gpu_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", action="store_true", default=os.environ.get(GPU_ENV) == "1",
                        help=f"load each model's configs/{GPU_CONFIG}.pbtxt where it has one: the AR family's Talker "
                             f"and Code2Wav on the GPU (env {GPU_ENV}=1)")
