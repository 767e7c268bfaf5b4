"""Checks the embedded chat model's conversion (python_backends.thinker.gguf_model) in
the vLLM environment, where tests/test_thinker.py runs it: the converted directory's
logits, through Hugging Face's Llama, against a forward pass written here from the GGUF's
own tensors as llama.cpp computes it (its interleaved rotary embedding on its permuted
Q/K rows). Prints one JSON line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from python_backends.thinker import gguf_model as g

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_interleaved(x: np.ndarray, theta: float) -> np.ndarray:
    """llama.cpp's LLAMA rope: rotate each adjacent pair (x[2i], x[2i+1]). x: [tokens, heads, dim]."""
    n, _, dim = x.shape
    freqs = theta ** (-np.arange(0, dim, 2) / dim)
    angles = np.arange(n)[:, None] * freqs[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def gguf_logits(path: Path, ids: list[int], permuted: bool = True) -> np.ndarray:
    """The last position's logits, from the GGUF as llama.cpp reads it (permuted=False:
    as if the conversion had forgotten to put the rows back, the control)."""
    reader = g.read(path)
    cfg = g.hf_config(reader)
    w = g.tensors(reader)
    heads, kv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    x = w["token_embd.weight"][ids].astype(np.float64)
    n = len(ids)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for b in range(cfg["num_hidden_layers"]):
        t = lambda name: w[f"blk.{b}.{name}.weight"].astype(np.float64)  # noqa: E731
        h = rms_norm(x, t("attn_norm"), eps)
        wq, wk = t("attn_q"), t("attn_k")
        if not permuted:
            wq, wk = g.unpermute(wq, heads), g.unpermute(wk, kv)
        q = (h @ wq.T).reshape(n, heads, -1)
        k = (h @ wk.T).reshape(n, kv, -1)
        v = (h @ t("attn_v").T).reshape(n, kv, -1)
        q, k = rope_interleaved(q, cfg["rope_theta"]), rope_interleaved(k, cfg["rope_theta"])
        k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(q.shape[-1]) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attn = np.einsum("hqk,khd->qhd", scores / scores.sum(-1, keepdims=True), v).reshape(n, -1)
        x = x + attn @ t("attn_output").T
        h = rms_norm(x, t("ffn_norm"), eps)
        gate, up = h @ t("ffn_gate").T, h @ t("ffn_up").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ t("ffn_down").T
    x = rms_norm(x[-1], w["output_norm.weight"], eps)
    return x @ w.get("output.weight", w["token_embd.weight"]).astype(np.float64).T


def main() -> None:
    directory = g.embedded_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    ids = tokenizer.encode(tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False),
                           add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    with torch.no_grad():
        ours = model(torch.tensor([ids])).logits[0, -1].double().numpy()
        reply = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):]
    reference = gguf_logits(g.embedded_gguf(), ids)
    control = gguf_logits(g.embedded_gguf(), ids, permuted=False)
    text = "Numbers like 12345, don't split badly!"
    print(json.dumps({
        "prompt_tokens": len(ids), "starts": tokenizer.convert_ids_to_tokens(ids[:3]),
        "max_abs_diff": float(np.abs(ours - reference).max()), "logit_scale": float(np.abs(reference).max()),
        "control_max_abs_diff": float(np.abs(ours - control).max()),
        "same_argmax": int(ours.argmax()) == int(reference.argmax()),
        "round_trip": tokenizer.decode(tokenizer.encode(text)) == text,
        "digits": tokenizer.tokenize("2024"),
        "eos": tokenizer.eos_token, "reply": tokenizer.decode(reply, skip_special_tokens=True),
    }))


if __name__ == "__main__":
    sys.exit(main())
