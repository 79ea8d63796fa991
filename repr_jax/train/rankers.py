"""Texts to rankings for the runs that do not embed a text as one vector: ColBERT (MaxSim over
token vectors, :mod:`repr_jax.eval.late_interaction`), SPLADE (vocabulary term weights searched
through an inverted index, :mod:`repr_jax.eval.sparse_retrieval`) and a cross-encoder (a query and
a document read together, :mod:`repr_jax.eval.rerank`). What a search harness hands a model is
raw texts (mteb's search protocol: :mod:`repr_jax.integrations.mteb`); each run reads them with
its own tokenizer, lengths and instruction prefixes, as its own evaluators read its sets, and
searches them with the same functions, so its numbers are theirs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from repr_jax.data.tokenizer import Sides, make_tokenizer

RANKING_METHODS = ("colbert", "splade", "cross_encoder")
PAIR_CHUNK = 65_536  # SPLADE pairs scored at once (one sparse row product)


@dataclasses.dataclass
class Ranker:
    """A run that ranks documents for queries, from their texts.

    ``search(queries, corpus, k)``: ``(scores [Q, k'], ids [Q, k'])``, ``k' = min(k, N)``, each
    query's best corpus rows first (None for a cross-encoder: it only reorders candidates);
    ``pairs(queries, corpus, q_of, d_of)``: ``[P]`` scores of query ``q_of[p]`` with document
    ``d_of[p]`` (what reranking a first stage's candidates needs)."""
    method: str
    search: Callable[[Sequence[str], Sequence[str], int], tuple[np.ndarray, np.ndarray]] | None
    pairs: Callable[[Sequence[str], Sequence[str], np.ndarray, np.ndarray], np.ndarray]
    identity: str = ""  # the run's path, checkpoint step and lengths
    instructed: bool = False  # its queries or documents carry a prefix (an instruction)
    parameters: int = 0
    max_tokens: int = 0


def method_of(workdir: str | Path) -> str:
    """The method of the run in ``workdir`` (its config alone, no weights read)."""
    from repr_jax import config as config_lib
    from repr_jax.train.run import run_config_path
    return config_lib.load_json(run_config_path(Path(workdir))).method.name


def ranker_of(workdir: str | Path, *, batch_size: int = 64, progress: bool | str = True,
              cache_dir: str | Path | None = None, storage: str = "float16") -> Ranker:
    """The :class:`Ranker` of a colbert, splade or cross_encoder run (any other method: a
    one-line ValueError). ``cache_dir``: SPLADE's term weights kept there, keyed by the run and
    the token ids (:class:`repr_jax.eval.Embedder`'s verified cache); ColBERT's token index is
    built in a scratch folder beside it (``storage`` as ``eval.late_interaction.storage``).

    Cost, Q queries and N documents of T tokens: the encoder over the ``Q + N`` texts; then
    ColBERT ``O(Q Tq N Td d)`` search, SPLADE ``O(postings touched)``; pairs cost one encoder
    pass each (cross-encoder), or the encoder over their distinct texts and then a MaxSim
    (ColBERT, ``O(Tq Td d)`` a pair) or a sparse row product (SPLADE)."""
    import jax

    from repr_jax import files
    from repr_jax.train.mine import check_text_run
    from repr_jax.train.run import load_trained
    check_text_run(workdir)
    kind = method_of(workdir)
    if kind not in RANKING_METHODS:
        raise ValueError(f"--workdir {workdir}: a {kind} run embeds each text as one vector; "
                         f"a ranker is a {', '.join(RANKING_METHODS)} run")
    cfg, _, method, state = load_trained(workdir, text_only=True)
    variables, tokenizer = state.variables, make_tokenizer(cfg.data.tokenizer)
    sides, pad_id = Sides.of_section(cfg.data), tokenizer.pad_id
    label = progress if isinstance(progress, str) else Path(workdir).name
    show = bool(progress)
    identity = f"{Path(workdir).absolute()}|step {int(jax.device_get(state.step))}|{sides}"

    def ids(texts: Sequence[str], side: str) -> np.ndarray:
        return sides.encode(tokenizer, texts, side)

    def read_together(queries, corpus, q_of, d_of) -> np.ndarray:
        from repr_jax.eval.rerank import score_pairs
        qu, q_at = np.unique(np.asarray(q_of, np.int64), return_inverse=True)
        du, d_at = np.unique(np.asarray(d_of, np.int64), return_inverse=True)
        return score_pairs(method.score, variables, ids([queries[i] for i in qu], "query"),
                           ids([corpus[j] for j in du], "doc"), q_at, d_at, pad_id=pad_id,
                           batch_size=batch_size, progress=show and f"{label}: pairs")

    search, pairs = None, read_together
    if kind == "splade":
        from repr_jax.eval import Embedder
        from repr_jax.eval.sparse_retrieval import build_index
        from repr_jax.eval.sparse_retrieval import search as sparse_search
        if cache_dir:
            cache_dir = files.keyed_cache(cache_dir, identity, what="cached term weights")
        embedder = Embedder(method.embed, {}, batch_size=batch_size, query_fn=method.embed_query,
                            pos_fn=method.embed_pos, cache_dir=cache_dir,
                            progress=f"{label}: encoding" if show else "", pad_id=pad_id)

        def weights(texts, side):
            which = "query" if side == "query" else "pos"
            return embedder.embed(variables, ids(texts, side), which, sparse=True)

        def search(queries, corpus, k):
            out = sparse_search(build_index(weights(corpus, "doc")), weights(queries, "query"),
                                min(k, len(corpus)))
            return out.scores, out.ids

        def dot_pairs(queries, corpus, q_of, d_of):  # term weights' dot product
            q, d = weights(queries, "query"), weights(corpus, "doc")
            q_of, d_of = np.asarray(q_of, np.int64), np.asarray(d_of, np.int64)
            return np.concatenate([np.asarray(q[q_of[i:i + PAIR_CHUNK]].multiply(
                d[d_of[i:i + PAIR_CHUNK]]).sum(axis=1), np.float32).ravel()
                for i in range(0, len(q_of), PAIR_CHUNK)] or [np.zeros(0, np.float32)])
        pairs = dot_pairs
    elif kind == "colbert":
        from repr_jax.eval import late_interaction as li

        def search(queries, corpus, k):
            with files.scratch_folder(cache_dir, prefix="repr_jax_tokens_",
                                      what="a token index") as tmp:
                index = li.build_index(method.token_vectors("doc"), variables,
                                       ids(corpus, "doc"), Path(tmp) / "index", storage=storage,
                                       pad_id=pad_id, batch_size=batch_size,
                                       progress=show and f"{label}: index")
                q, qm = li.embed_tokens(method.token_vectors("query"), variables,
                                        ids(queries, "query"), batch_size=batch_size)
                out = li.search(index, q, qm, k=min(k, len(corpus)),
                                progress=show and f"{label}: maxsim")
                del index
            return out

        def maxsim_pairs(queries, corpus, q_of, d_of):  # each text embedded once
            qu, q_at = np.unique(np.asarray(q_of, np.int64), return_inverse=True)
            du, d_at = np.unique(np.asarray(d_of, np.int64), return_inverse=True)
            return li.score_pairs(method.token_vectors("query"), method.token_vectors("doc"),
                                  variables, ids([queries[i] for i in qu], "query"),
                                  ids([corpus[j] for j in du], "doc"), q_at, d_at,
                                  pad_id=pad_id, batch_size=batch_size,
                                  progress=show and f"{label}: pairs")
        pairs = maxsim_pairs
    params = variables["params"] if "params" in variables else variables
    return Ranker(kind, search, pairs, identity,
                  bool(sides.query_prefix or sides.doc_prefix),
                  sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params)),
                  max(sides.query_len, sides.doc_len))
