"""A tiny random BERT masked LM written as transformers saves one (``model.safetensors``,
``config.json``, ``tokenizer.json``, plus a ``vocab.txt`` for ``data.tokenizer``): what the MLM
import and SPLADE tests read instead of a real checkpoint."""

import json
from pathlib import Path

import numpy as np

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far", "away", "##s", "big", "red",
         ",", ".", "!", "?"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
D, F, LAYERS = 8, 16, 2
SAMPLES = ["the cat sat on the mat.", "Dogs ran far, far away!", "red", "the big red dogs ran"]


def write_mlm(folder: Path, *, tied: bool = True, drop=(), legacy_norm_names: bool = False):
    """A random 2-layer BERT masked LM over VOCAB as transformers saves one: returns the tensors."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    rng = np.random.default_rng(0)
    v = len(VOCAB)
    t = {"bert.embeddings.word_embeddings.weight": (v, D),
         "bert.embeddings.position_embeddings.weight": (32, D),
         "bert.embeddings.token_type_embeddings.weight": (2, D),
         "bert.embeddings.LayerNorm.weight": (D,), "bert.embeddings.LayerNorm.bias": (D,),
         "cls.predictions.transform.dense.weight": (D, D),
         "cls.predictions.transform.dense.bias": (D,),
         "cls.predictions.transform.LayerNorm.weight": (D,),
         "cls.predictions.transform.LayerNorm.bias": (D,), "cls.predictions.bias": (v,)}
    for i in range(LAYERS):
        p = f"bert.encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            t[p + name + ".weight"], t[p + name + ".bias"] = (D, D), (D,)
        t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"] = (F, D), (F,)
        t[p + "output.dense.weight"], t[p + "output.dense.bias"] = (D, F), (D,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + ln + ".weight"], t[p + ln + ".bias"] = (D,), (D,)
    if not tied:
        t["cls.predictions.decoder.weight"] = (v, D)
    tensors = {k: (rng.normal(size=s) * (1.0 if k.endswith("bias") else 0.5)).astype(np.float32)
               for k, s in t.items() if k not in drop}
    saved = {(k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                       "LayerNorm.beta")
              if legacy_norm_names else k): a for k, a in tensors.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(saved, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_act": "gelu",
        "hidden_size": D, "intermediate_size": F, "num_attention_heads": 2,
        "num_hidden_layers": LAYERS, "max_position_embeddings": 32, "type_vocab_size": 2,
        "vocab_size": v, "layer_norm_eps": 1e-12, "tie_word_embeddings": tied}))
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "vocab.txt").write_text("".join(w + "\n" for w in VOCAB))
    return tensors
