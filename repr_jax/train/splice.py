"""What a sparse autoencoder keeps downstream: the model its activations came from (the store's
``model``), run with the SAE's reconstruction spliced in at the store's layer, against the model
as it is (``clean``) and with that layer's output replaced by zeros (``zero_ablation``) or by its
mean over the store (``mean_ablation``). The ``sae`` evaluator's downstream rows.

Splicing replaces the output of block ``layer`` (the module the store read: ``layer_<L>`` of a
text_transformer or decoder_lm, ``block<L>`` of a vit; a Flax method interceptor, so the model's
code is not changed) at the tokens the store kept (padding, a decoder's instruction tokens, the
first tokens the store skipped and tokens whose norm is above the store's ``max_norm`` are left
as they are: the SAE never saw them), and every later block reads the replacement. For a
store of ``--layer embedding``, the pooled embedding itself is replaced.

Tasks, by the store's source (``meta["data"]``):

* a text source (``beir:DIR``, ``pairs:FILE``) and a model with an embedding: retrieval, nDCG@10
  of up to ``max_queries`` judged queries (a fixed random sample, seed 0) over a sub-corpus of
  their relevant documents and random others, up to ``max_corpus`` documents (one corpus for
  every mode, so the modes are compared on the same search). BEIR's test qrels (dev when there is
  no test); a pairs file's queries and their positives. Rows ``ndcg@10_<mode>``.
* a decoder_lm on a text source: next-token cross-entropy (nats per token) over up to
  ``max_texts`` texts of the store's test examples (index 0 mod 10), predicting each text token
  from the ones before. Rows ``ce_<mode>``.
* a labelled ``data.name`` source (images for a vit): a logistic probe on the store's train and
  test examples (the store's split rule), up to ``max_texts`` of each. Rows
  ``probe_accuracy_<mode>``.

Each task also gives ``<metric>_recovered``: ``(spliced - zero) / (clean - zero)``, the share of
what zero-ablating the layer loses that the SAE's reconstruction gives back (sae-lens's
``ce_loss_score`` for cross-entropy); 1 when splicing loses nothing. Intervals resample queries,
texts or test examples jointly across the modes (the project's percentile bootstrap).

Cost: four model passes (one per mode) over ``max_queries + max_corpus`` texts, ``max_texts``
texts or ``2 max_texts`` examples: time ``O(4 E T model + E T D L)`` for E inputs of T tokens
and an SAE of L latents, memory ``O(B T (D + L))`` a batch (``O(B T V)`` for a decoder's
next-token logits over its vocabulary V).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.data.activations import open_store
from repr_jax.encoders.decoder_lm import next_token_cross_entropy_chunked
from repr_jax.encoders.intervene import replacing_block
from repr_jax.eval.linear_probe import linear_probe
from repr_jax.eval.retrieval import retrieve, topk_metrics
from repr_jax.eval.stats import with_ci
from repr_jax.train.activations import load_model, texts_of, trim_columns

MODES = ("clean", "spliced", "zero_ablation", "mean_ablation")
MEAN_SAMPLE = 16384  # store vectors read for the mean-ablation vector (train split, seed 0)
BATCH = 32  # inputs a model pass


def replaced(h, kept, mode: str, reconstruct: Callable, mean_D, max_norm: float | None = None):
    """``h [..., D]`` with its ``kept`` (``[...]`` bool) vectors replaced as ``mode`` says; of
    them, those whose norm is above ``max_norm`` (the store's limit) are left as they are."""
    if mode == "clean":
        return h
    if max_norm is not None:
        kept = kept & (jnp.linalg.norm(h.astype(jnp.float32), axis=-1) <= max_norm)
    if mode == "spliced":
        new = reconstruct(h.reshape(-1, h.shape[-1])).reshape(h.shape).astype(h.dtype)
    elif mode == "zero_ablation":
        new = jnp.zeros_like(h)
    else:
        new = jnp.broadcast_to(mean_D.astype(h.dtype), h.shape)
    return jnp.where(kept[..., None], new, h)


# --------------------------------------------------------------------------------------------------
# The host: the store's model, its inputs and tasks
# --------------------------------------------------------------------------------------------------

class Host:
    """The store's model (``repr_jax.train.activations.load_model``), the layer its vectors came
    from and their mean; ``rows(reconstruct_fn, variables)`` runs every task that applies."""

    def __init__(self, folder: str | Path, *, max_queries: int = 500, max_corpus: int = 5000,
                 max_texts: int = 500, bootstrap: int = 1000):
        store = open_store(folder, verify=False)  # the dataset verified it when it opened it
        self.meta, self.folder = store.meta, Path(folder)
        self.max_queries, self.max_corpus, self.max_texts = max_queries, max_corpus, max_texts
        self.bootstrap = bootstrap
        rows = store.split_rows()["train"]
        if len(rows) > MEAN_SAMPLE:
            rows = np.sort(np.random.default_rng(0).choice(rows, MEAN_SAMPLE, replace=False))
        self.mean_D = np.asarray(store.vectors[rows], np.float32).mean(axis=0)
        self._model = self._cfg = None

    @property
    def text(self) -> bool:
        return str(self.meta["data"]).startswith(("pairs:", "beir:"))

    def model(self):
        if self._model is None:
            m = self.meta
            run = m["step"] is not None
            self._model, self._cfg = load_model(workdir=m["model"] if run else None,
                                        init_from=None if run else m["model"],
                                        max_len=m["max_len"] if self.text else 0,
                                        text=self.text,
                                        skip_first=m.get("skip_first", 0))
        return self._model

    def missing(self) -> str:
        """Why the host cannot be run ("" when it can): its run or model folder is gone."""
        m = self.meta
        if m["step"] is not None and not Path(m["model"]).is_dir():
            return f"its model's run {m['model']} is not there"
        return ""

    def rows(self, reconstruct: Callable, variables: Any) -> Iterator[tuple[str, Any]]:
        """``(metric, value)`` of every task that applies (module docstring)."""
        why = self.missing()
        if why:
            print(f"repr-jax: sae: no downstream rows for activations:{self.folder}: {why}",
                  file=sys.stderr)
            return
        model = self.model()
        fns = {mode: self._pass(model, mode, reconstruct) for mode in MODES}
        if self.text:
            if model.family == "decoder_lm":
                yield from self._cross_entropy(model, {
                    mode: self._pass(model, mode, reconstruct, "tokens") for mode in MODES},
                    variables)
            yield from self._retrieval(model, fns, variables)
        else:
            yield from self._probe(model, fns, variables)

    # -- one model pass, with the layer replaced -------------------------------------------------

    def _pass(self, model, mode: str, reconstruct: Callable, what: str = "embedding"):
        """``f(sae_variables, x, kept)`` of ``mode``, jitted: the model's embedding ``[B, E]``
        (``what="embedding"``) or a decoder's final token states ``[B, T, D]`` (``"tokens"``)."""
        layer, mean_D = self.meta["layer"], jnp.asarray(self.mean_D)

        def sub(sae_variables, kept):
            return functools.partial(replaced, kept=kept, mode=mode, mean_D=mean_D,
                                     max_norm=self.meta.get("max_norm"),
                                     reconstruct=lambda x: reconstruct(sae_variables, x))

        def f(host_variables, sae_variables, x, kept):  # weights are arguments, not constants
            if layer == "embedding":
                emb = model.embed(host_variables, x)
                return sub(sae_variables, jnp.ones(emb.shape[:1], bool))(emb)
            with replacing_block(model.family, layer, sub(sae_variables, kept)):
                if what == "tokens":
                    return model.module.apply(host_variables, x)[1]["tokens"]
                return model.embed(host_variables, x)
        jitted = jax.jit(f)
        host = model.variables if what == "tokens" else model.embed_variables
        return lambda sae_variables, x, kept: jitted(host, sae_variables, x, kept)

    def _batches(self, model, x):
        """``(rows, x[rows] trimmed, kept)`` in batches of ``BATCH``, shortest texts first (a
        batch is cut to its longest text: few shapes compile, padding costs nothing)."""
        x = np.asarray(x)
        order = np.arange(len(x))
        if model.valid is not None:
            order = np.argsort(np.asarray(model.valid(x)).sum(axis=1), kind="stable")
        for start in range(0, len(x), BATCH):
            rows = order[start:start + BATCH]
            ids = x[rows]
            if model.valid is not None:
                ids = trim_columns(ids, np.asarray(model.valid(ids)))
            yield rows, ids, self._kept(model, ids)

    def _embed(self, model, fn, variables, x) -> np.ndarray:
        out = None
        for rows, ids, kept in self._batches(model, x):
            emb = np.asarray(fn(variables, ids, kept), np.float32)
            if out is None:
                out = np.empty((len(x),) + emb.shape[1:], np.float32)
            out[rows] = emb
        return out

    @staticmethod
    def _kept(model, x):
        if model.kept is None:  # images: every token
            return np.ones(np.asarray(x).shape[:1] + (1,), bool)
        return np.asarray(model.kept(np.asarray(x)))

    # -- the tasks --------------------------------------------------------------------------------

    def _retrieval(self, model, fns, variables):
        queries, corpus, qrels = retrieval_task(self.meta["data"], max_queries=self.max_queries,
                                                max_corpus=self.max_corpus)
        q_ids = model.sides.encode(model.tokenizer, queries, "query")
        d_ids = model.sides.encode(model.tokenizer, corpus, "doc")
        per_query = {}
        for mode in MODES:
            q = self._embed(model, fns[mode], variables, q_ids)
            d = self._embed(model, fns[mode], variables, d_ids)
            _, idx = retrieve(q, d, k=10)
            per_query[mode] = np.asarray(topk_metrics(idx, qrels, (10,), per_query=True)
                                         ["ndcg@10"])
        yield from self._summary("ndcg@10", per_query)

    def _cross_entropy(self, model, fns, variables):
        texts = texts_of(self.meta["data"])
        held_out = np.arange(0, len(texts), 10)[:self.max_texts]  # the store's test examples
        ids = model.sides.encode(model.tokenizer, [texts[i] for i in held_out], "doc")
        params, head_VxD = model.variables["params"], self._output_head()
        per_text = {mode: np.zeros(len(ids), np.float32) for mode in MODES}

        @jax.jit
        def summed(params, head_VxD, tokens, ids, kept):
            return jnp.sum(next_token_cross_entropy_chunked(params, tokens, ids, kept,
                                                            head_VxD=head_VxD), axis=1)

        def ce(tokens, ids, kept):
            return summed(params, head_VxD, tokens, ids, kept)

        count = np.zeros(len(ids), np.float32)
        for rows, batch, kept in self._batches(model, ids):
            text = np.asarray(model.text(batch))  # every text token is predicted, skipped or not
            for mode in MODES:
                per_text[mode][rows] = np.asarray(ce(fns[mode](variables, batch, kept), batch,
                                                     text))
            count[rows] = (text[:, :-1] & text[:, 1:]).sum(axis=1)
        keep = count > 0
        yield from self._summary("ce", {mode: v[keep] for mode, v in per_text.items()},
                                 counts=count[keep])

    def _output_head(self):
        """A decoder's untied output head ``[V, D]`` from the weights its run started from, or
        None when it ties it to the input embedding (SmolLM2) or was trained from scratch."""
        from repr_jax.encoders.decoder_lm_weights import output_head
        if self._cfg is None:  # --init-from decoder weights
            return output_head(self.meta["model"])
        spec = getattr(self._cfg.encoder, "init_from", "")
        return output_head(spec) if spec else None

    def _probe(self, model, fns, variables):
        x, labels = self._labelled()
        if x is None:
            return
        train, test = _split_rows(len(labels), self.max_texts)
        rows = np.concatenate([train, test])
        x, labels, n = np.asarray(x[rows]), labels[rows], len(train)
        correct = {}
        for mode in MODES:
            f = self._embed(model, fns[mode], variables, x)
            correct[mode] = np.asarray(linear_probe(
                f[:n], labels[:n], f[n:], labels[n:], kind="logistic",
                per_example=True)["correct"])
        yield from self._summary("probe_accuracy", correct)

    def _labelled(self):
        from repr_jax import config as config_lib
        from repr_jax.train.run import load_dataset, run_config_path
        cfg = config_lib.load_json(run_config_path(Path(self.meta["model"])))
        dataset = load_dataset(config_lib.override(cfg, [f"data.name={self.meta['data']}"]))
        split = dataset.splits[self.meta["split"]]
        labels = np.asarray(split["label"])
        if dataset.num_classes < 2:
            return None, None
        return split["x"], labels

    def _summary(self, metric: str, values: dict[str, np.ndarray], *,
                 counts: np.ndarray | None = None):
        """Each mode's mean with its interval, then the share recovered (module docstring).
        ``counts``: the values are sums over that many tokens each (a token-weighted mean)."""
        n = np.ones(len(values["clean"]), np.float32) if counts is None else counts

        def mean(v, n):
            return jnp.sum(v) / jnp.sum(n)

        for mode in MODES:
            yield f"{metric}_{mode}", with_ci((values[mode], n), mean, bootstrap=self.bootstrap)

        def recovered(clean, spliced, zero, n):
            c, s, z = mean(clean, n), mean(spliced, n), mean(zero, n)
            return (s - z) / (c - z)
        yield f"{metric}_recovered", with_ci(
            (values["clean"], values["spliced"], values["zero_ablation"], n), recovered,
            bootstrap=self.bootstrap)


def _split_rows(n: int, most: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test example rows by the store's rule (index 0 mod 10 is test, 1 validation),
    up to ``most`` of each (a fixed random sample, seed 0)."""
    rule = np.arange(n) % 10
    rng = np.random.default_rng(0)
    out = []
    for rows in (np.flatnonzero(rule >= 2), np.flatnonzero(rule == 0)):
        out.append(np.sort(rng.choice(rows, most, replace=False)) if len(rows) > most else rows)
    return out[0], out[1]


def retrieval_task(source: str, *, max_queries: int, max_corpus: int
                   ) -> tuple[list[str], list[str], np.ndarray]:
    """``(queries, corpus, qrels [Q, N] int)`` of a text source (module docstring): up to
    ``max_queries`` judged queries and a sub-corpus of their relevant documents plus random
    others, up to ``max_corpus`` (more only when the relevant ones alone are more). Time
    ``O(J + N)`` in judgements and documents."""
    if source.startswith("beir:"):
        from repr_jax.data import beir
        c = beir.read_collection(source[len("beir:"):])
        r = c.qrels[c.test_split]
        keep = r["grade"] >= 1
        judged = zip(r["query"][keep], r["doc"][keep], r["grade"][keep])
        query_texts, doc_texts = c.query_texts, c.doc_texts
    else:
        from repr_jax.train.mine import mining_data
        d = mining_data(source)
        judged = ((q, p, 1) for q, p in d.pairs)
        query_texts, doc_texts = d.queries, d.corpus
    grades: dict[int, dict[int, int]] = {}
    for q, doc, g in judged:
        grades.setdefault(int(q), {})[int(doc)] = int(g)
    rng = np.random.default_rng(0)
    chosen = sorted(grades)
    if len(chosen) > max_queries:
        chosen = sorted(rng.choice(chosen, max_queries, replace=False).tolist())
    relevant = sorted({doc for q in chosen for doc in grades[q]})
    others = np.setdiff1d(np.arange(len(doc_texts)), relevant)
    room = max(0, max_corpus - len(relevant))
    if len(others) > room:
        others = rng.choice(others, room, replace=False)
    docs = sorted(relevant + [int(i) for i in others])
    column = {doc: j for j, doc in enumerate(docs)}
    qrels = np.zeros((len(chosen), len(docs)), np.int8)
    for i, q in enumerate(chosen):
        for doc, g in grades[q].items():
            qrels[i, column[doc]] = g
    return [query_texts[q] for q in chosen], [doc_texts[i] for i in docs], qrels
