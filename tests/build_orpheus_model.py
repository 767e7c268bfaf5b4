"""Build a tiny Orpheus-format model for tests: a Llama Talker whose vocabulary holds
SNAC's codes as added tokens, and a SNAC decoder, both with random weights.

No pretrained codec-TTS weights can be downloaded on these machines, so this builds the
same layout as a real Orpheus checkpoint, small, in seconds, deterministically (seed 0),
and no weights are committed:

- `talker/`: a Llama (hidden 256, 4 layers) with a byte-level BPE trained on the
  project's public-domain texts, then Orpheus's added tokens `<custom_token_N>` right
  after it (N = 0 … 28,681: Orpheus's control tokens 0-9, then 7 positions × 4,096
  SNAC codes), as Orpheus's Llama-3 tokenizer has them from id 128,256.
- `snac/`: SNAC's 24 kHz architecture (`config.json`, `pytorch_model.bin`, as
  `hubertsiuzdak/snac_24khz` comes) with a narrower decoder, so tests run fast, and its
  noise blocks silenced (their gain zero), so that decoding is repeatable.

Its speech is noise; what tests check is the machinery. Runs in the AR environment
(`.venv-ar`, `scripts/setup.sh --tests`): python tests/build_orpheus_model.py TEXT DIRECTORY
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from snac import SNAC
from snac.layers import NoiseBlock
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TEXT_VOCAB = 1024
CUSTOM_TOKENS = 10 + 7 * 4096
SNAC_CONFIG = {
    "sampling_rate": 24000, "encoder_dim": 16, "encoder_rates": [2, 4, 8, 8], "decoder_dim": 128,
    "decoder_rates": [8, 8, 4, 2], "attn_window_size": None, "codebook_size": 4096, "codebook_dim": 8,
    "vq_strides": [4, 2, 1], "noise": True, "depthwise": True,
}


def build_tokenizer(text: Path, directory: Path) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=TEXT_VOCAB, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([str(text)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|begin_of_text|>",
                                   eos_token="<|eot_id|>")
    fast.add_tokens([f"<custom_token_{n}>" for n in range(CUSTOM_TOKENS)], special_tokens=True)
    fast.save_pretrained(directory)
    return fast


def build_talker(text: Path, directory: Path) -> None:
    tokenizer = build_tokenizer(text, directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.convert_tokens_to_ids("<custom_token_2>"),
        tie_word_embeddings=False, torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)


def build_snac(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    model = SNAC(**SNAC_CONFIG)
    with torch.no_grad():  # its noise blocks add nothing, so that decoding is repeatable for tests
        for block in (m for m in model.modules() if isinstance(m, NoiseBlock)):
            block.linear.parametrizations.weight.original0.zero_()
    (directory / "config.json").write_text(json.dumps(SNAC_CONFIG), encoding="utf-8")
    torch.save(model.state_dict(), directory / "pytorch_model.bin")


def main(text: Path, directory: Path) -> None:
    torch.manual_seed(0)
    build_talker(text, directory / "talker")
    build_snac(directory / "snac")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
