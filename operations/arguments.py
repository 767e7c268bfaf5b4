"""The command-line options that `speechstream-triton`, `speechstream-serve` and the perf
tools share: what Triton serves, and whether on the GPU."""

from __future__ import annotations

import argparse
import os

from contract.voices import AR_MODEL_ENV, CHAT_MODEL_ENV, EMBEDDED_CHAT, VOICES_ENV
from operations.environment import GPU_CONFIG

GPU_ENV = "SPEECHSTREAM_GPU"
LISTEN_ENV = "SPEECHSTREAM_LISTEN"


def add_env_option(parser: argparse.ArgumentParser, flag: str, env: str, help: str) -> None:
    """An option whose default is the environment variable `env`, which its help names."""
    parser.add_argument(flag, default=os.environ.get(env), help=f"{help} (env {env})")


def add_env_switch(parser: argparse.ArgumentParser, flag: str, env: str, help: str) -> None:
    """A switch that `env`=1 in the environment turns on by default, which its help says."""
    parser.add_argument(flag, action="store_true", default=os.environ.get(env) == "1", help=f"{help} (env {env}=1)")


def add_voices_argument(parser: argparse.ArgumentParser) -> None:
    add_env_option(parser, "--voices", VOICES_ENV,
                   "a directory of Piper voices (NAME.onnx beside NAME.onnx.json) to serve besides the embedded one")
    add_env_option(parser, "--ar-model", AR_MODEL_ENV,
                   "an Orpheus-format model directory (talker/ and snac/) to serve the autoregressive family from")
    add_chat_arguments(parser)


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_option(parser, "--chat-model", CHAT_MODEL_ENV,
                   f"a chat model directory (Hugging Face, Llama- or Qwen-style) for the voice chat's Thinker, or "
                   f"'{EMBEDDED_CHAT}' for the embedded SmolLM2-135M-Instruct")
    add_chat_flag(parser)


def add_chat_flag(parser: argparse.ArgumentParser) -> None:
    """--chat, the embedded chat model: a shorthand for --chat-model embedded."""
    parser.add_argument("--chat", dest="chat_model", action="store_const", const=EMBEDDED_CHAT,
                        help=f"voice chat on the embedded chat model: --chat-model {EMBEDDED_CHAT}")


def add_listen_flag(parser: argparse.ArgumentParser) -> None:
    """--listen: serve the speech recognizer (listen mode); --chat brings it too."""
    add_env_switch(parser, "--listen", LISTEN_ENV,
                   "serve the speech recognizer (Triton's `asr` model) for listen mode; a chat model serves it too")


def add_gpu_argument(parser: argparse.ArgumentParser) -> None:
    add_env_switch(parser, "--gpu", GPU_ENV, f"load each model's configs/{GPU_CONFIG}.pbtxt where it has one: the AR "
                                             f"family's Talker and Code2Wav on the GPU")
