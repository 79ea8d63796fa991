"""Writes ``gemma3_reference.npz``: transformers' token ids, hidden states and logits of Gemma 3
270M (a Q4_K_M GGUF) for ``TEXTS`` and for one 2048-token text, the reference of our JAX Gemma 3.
Needs torch, transformers (5.x), gguf and accelerate (none of which CI installs; ``torch==2.13.0``
is the CPU wheel); run it in that environment::

    python tests/data/make_gemma3_reference.py --gguf /tmp/gemma/gemma-3-270m-q4_k_m.gguf \\
        [--out tests/data/gemma3_reference.npz]

The model and tokenizer are loaded once: about two minutes on two cores, most of it spent rebuilding
the tokenizer's merges from the vocabulary; the whole run takes about four.

Token ids come from ``AutoTokenizer.from_pretrained(folder, gguf_file=...)``, hidden states and
logits from ``AutoModelForCausalLM.from_pretrained(...)`` (a ``Gemma3ForCausalLM``, float32, eager
attention) in eval mode under ``torch.inference_mode()``, each text run alone (a batch of one, no
padding) with the tokenizer's default special tokens (Gemma prepends BOS, id 2). Arrays aligned
with ``ids`` (``[offsets[i]:offsets[i + 1]]`` is text i's):

- ``ids``/``offsets``: ``tok(text)["input_ids"]`` (with BOS) concatenated text after text;
  ``ids_plain``/``offsets_plain``: ``tok(text, add_special_tokens=False)["input_ids"]``;
- ``states [N, 640]``: ``model.model(...).last_hidden_state``, i.e. after the final norm;
- ``layer5 [N, 640]``: ``hidden_states[6]``, the residual stream after block index 5;
- ``embed0 [N, 640]``: ``hidden_states[0]``, the embeddings times ``sqrt(640)``;
- ``logits_sub [N, 512]``: the causal LM's logits at the vocabulary ids ``vocab_sub`` (512 sorted
  ids drawn with ``np.random.default_rng(0)``);
- ``logsumexp [N]`` (of the full logits row, in float64) and ``argmax [N]``.

In transformers 5.x ``hidden_states`` has 19 entries (embeddings, then after each of the 18
blocks) and its last entry is AFTER the final norm: ``capture_outputs`` overwrites it with
``last_hidden_state`` (checked here: they are equal; ``final_logit_softcapping`` is None).

The long text: the docstrings (``inspect.getdoc``) of every public member (``inspect.getmembers``
order) of ``LONG_MODULES``, split into paragraphs on blank lines, those longer than 40 characters
kept, newlines replaced by spaces, de-duplicated in order and joined by single spaces (repeated if
short). ``long_ids [2048]`` is BOS then its first 2047 tokens (no special tokens); ``long_text``
is the decoding of those 2047 tokens. Docstrings vary with the Python version and even with what
else is imported (importing torch drops one ``inspect`` paragraph, past the 2047 tokens used here):
the ids are what matter. One forward pass of all 2048 tokens (well past the 512-token sliding
window) gives, at ``long_positions`` (``np.r_[0:2048:32, 2047]``), ``long_states``,
``long_layer5``, ``long_logits_sub``, ``long_logsumexp`` and ``long_argmax``. ``config`` is
``json.dumps(model.config.to_dict())``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# English, French (accents), Chinese, Arabic (right to left), emoji and a variation selector,
# Cyrillic.
TEXTS = [
    "The capital of France is Paris, and it is known for the Eiffel Tower.",
    "Le chat dort sur le canapé pendant que la pluie tombe doucement.",
    "北京是中华人民共和国的首都，也是政治和文化中心。",
    "القاهرة هي عاصمة جمهورية مصر العربية وأكبر مدنها.",
    "I love pizza 🍕 and sunshine ☀️ — ça va? 😀👍",
    "Москва — столица России, город на реке Москве.",
]
LONG_MODULES = ["argparse", "collections", "json", "pathlib", "random", "shutil", "inspect", "os"]
LONG_LEN = 2048
LONG_POSITIONS = np.r_[0:LONG_LEN:32, LONG_LEN - 1]
VOCAB = 262144
VOCAB_SUB = np.sort(np.random.default_rng(0).choice(VOCAB, 512, replace=False))
LAYER = 5  # hidden_states[LAYER + 1]


def long_text() -> str:
    import importlib
    seen, paras = set(), []
    for name in LONG_MODULES:
        module = importlib.import_module(name)
        for member, obj in inspect.getmembers(module):
            if member.startswith("_"):
                continue
            doc = inspect.getdoc(obj)
            if not doc:
                continue
            for p in doc.split("\n\n"):
                p = p.strip().replace("\n", " ")
                if len(p) > 40 and p not in seen:
                    seen.add(p)
                    paras.append(p)
    return " ".join(paras)


def load(gguf: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    return tok, model


def forward(model, ids, positions=None):
    """``(states, layer5, embed0, logits)`` of one unpadded sequence, rows at ``positions`` (all
    when None); logits from the causal LM (``logits_to_keep`` = the positions)."""
    import torch
    x = torch.tensor([ids], dtype=torch.long)
    pos = torch.arange(len(ids)) if positions is None else torch.as_tensor(positions)
    out = model.model(input_ids=x, output_hidden_states=True)
    hs = out.hidden_states
    assert len(hs) == model.config.num_hidden_layers + 1, len(hs)
    last = out.last_hidden_state[0]
    gap = (hs[-1][0] - last).abs().max().item()
    logits = model(input_ids=x, logits_to_keep=pos).logits[0].double()
    # the head on our own states reproduces the causal LM's logits (no final softcapping here)
    head = model.lm_head(last[pos]).double()
    cap = model.config.final_logit_softcapping
    if cap is not None:
        head = torch.tanh(head / cap) * cap
    print(f"  {len(ids)} tokens: |hidden_states[-1] - last_hidden_state| max {gap:.2e}, "
          f"|logits - head(states)| max {(logits - head).abs().max().item():.2e}")
    return (last[pos].numpy(), hs[LAYER + 1][0][pos].numpy(), hs[0][0][pos].numpy(),
            logits, gap)


def summarise(logits):
    import torch
    return (logits[:, torch.from_numpy(VOCAB_SUB)].numpy().astype(np.float32),
            torch.logsumexp(logits, -1).numpy().astype(np.float32),
            logits.argmax(-1).numpy().astype(np.int64))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", required=True, help="path of gemma-3-270m-*.gguf")
    parser.add_argument("--out", default=str(HERE / "gemma3_reference.npz"))
    args = parser.parse_args()
    import torch
    torch.manual_seed(0)
    tok, model = load(args.gguf)
    cfg = model.config
    print(f"{type(model).__name__}: {cfg.num_hidden_layers} blocks, width {cfg.hidden_size}, "
          f"vocab {cfg.vocab_size}, sliding window {cfg.sliding_window}")
    assert cfg.vocab_size == VOCAB and cfg.hidden_size == 640
    ids = [tok(t)["input_ids"] for t in TEXTS]
    plain = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    for r, p in zip(ids, plain):
        assert r[0] == tok.bos_token_id and r[1:] == p, (r, p)
    text = long_text()
    chunk = tok(text, add_special_tokens=False)["input_ids"]
    reps = 1
    while len(chunk) * reps < LONG_LEN - 1:
        reps += 1
    text = " ".join([text] * reps)
    long_plain = tok(text, add_special_tokens=False)["input_ids"]
    assert len(long_plain) >= LONG_LEN - 1
    long_ids = [tok.bos_token_id] + long_plain[:LONG_LEN - 1]
    long_cut = tok.decode(long_plain[:LONG_LEN - 1])
    print(f"long text: {len(text)} characters, {len(long_plain)} tokens ({reps} repetition(s))")

    cols = {k: [] for k in ("states", "layer5", "embed0", "logits_sub", "logsumexp", "argmax")}
    gaps = []
    with torch.inference_mode():
        for r in ids:
            s, l5, e0, logits, gap = forward(model, r)
            gaps.append(gap)
            for k, v in zip(cols, (s, l5, e0) + summarise(logits)):
                cols[k].append(v)
        ls, ll5, _, llogits, gap = forward(model, long_ids, LONG_POSITIONS)
        gaps.append(gap)
        long_sub, long_lse, long_argmax = summarise(llogits)
    print(f"hidden_states[-1] is after the final norm: {max(gaps) < 1e-5}")
    offsets = np.cumsum([0] + [len(r) for r in ids]).astype(np.int64)
    offsets_plain = np.cumsum([0] + [len(r) for r in plain]).astype(np.int64)
    arrays = {k: np.concatenate(v).astype(np.float32 if k not in ("argmax",) else np.int64)
              for k, v in cols.items()}
    np.savez_compressed(
        args.out, texts=np.asarray(TEXTS),
        ids=np.concatenate(ids).astype(np.int32), offsets=offsets,
        ids_plain=np.concatenate(plain).astype(np.int32), offsets_plain=offsets_plain,
        vocab_sub=VOCAB_SUB.astype(np.int64), **arrays,
        long_ids=np.asarray(long_ids, dtype=np.int32), long_text=np.asarray(long_cut),
        long_positions=LONG_POSITIONS.astype(np.int64),
        long_states=ls.astype(np.float32), long_layer5=ll5.astype(np.float32),
        long_logits_sub=long_sub, long_logsumexp=long_lse, long_argmax=long_argmax,
        config=np.asarray(json.dumps(cfg.to_dict(), default=str)))
    print(f"wrote {args.out}: {offsets[-1]} + {LONG_LEN} tokens, "
          f"{os.path.getsize(args.out) / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
