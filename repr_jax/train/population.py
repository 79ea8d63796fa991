"""Populations: K runs that differ only in seed and numeric hyperparameters, trained as one.

The members' states are stacked along a leading axis and one jit-compiled step updates all of them:
the step already reads every numeric hyperparameter (``optim.*``, ``method.*``
:func:`~repr_jax.config.hyper` leaves) from its ``hp`` argument, so a stacked ``hp`` gives each member
its own learning rate, temperature or loss weight, and stacked ``PRNGKey(seed)``-derived states give
each member its own initialisation and augmentation noise. Inside the step the members are
``vmap``-ped — on hardware one small model cannot fill, K members cost about one — or, in chunks
(``train.population_chunk``), mapped one chunk after another (``lax.map``): the CNN on CPU, where
convolutions with per-member weights run slower batched than one by one (its members then cost
what their separate runs do: ``bench/population_vs_sequential.py``).

An integer hyper leaf is a count the method may size a static shape by (an SAE's ``method.k``,
the size of its ``lax.top_k``): the population builds its method at the members' largest value
(:func:`population_base`) and each member reads its own, traced, from its ``hp``. Every other
structural key (an SAE's ``method.latents``, which shapes its parameters) changes the compiled
program: :func:`member_differences` refuses it in one line naming the key, why, and the sweep
that trains those members instead.

Batches are shared (every member sees the batch of the first member's seed) or, with
``shared_batches=False``, drawn per member from its own seed. A member is then the same run as
``repr-jax train`` of its config (with shared batches: when its seed is the first member's), to float
tolerance (tested).

workdir/ after a population run::

    population.json    the members (name, config)
    metrics.jsonl      one row per log step: every metric as a list over members
    checkpoints/       the stacked state: the population checkpoints and resumes as one
    members/<name>/    each member's config.json, run.json, metrics.jsonl and eval/step_<N>.json,
                       as a run's
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.config import Config, ConfigError
from repr_jax.data import BatchStream
from repr_jax.data.source import Prefetcher
from repr_jax.train import sharding
from repr_jax.backend import cpu_tuned
from repr_jax.host_memory import keep_host_memory
from repr_jax.train.checkpoint import restore_latest
from repr_jax.train.evaluation import make_upstream_loss, run_evaluation
from repr_jax.train.loop import Member, Trainee, train_members, write_run_info
from repr_jax.train.run import (build_method, check_buildable, check_resumable, compile_step,
                                load_dataset, load_eval_sets, pretrained_for, resolved_paths,
                                sample_batch, state_init_fn)
from repr_jax.train.step import configured_step, hyperparams

# What members may differ in: the seed, and the numeric leaves the step reads (hyperparams()).
MEMBER_KEYS = ("seed",)
NO_ENCODER = ("sae",)  # methods whose model ignores the encoder section


def member_differences(configs: Sequence[Config]) -> list[str]:
    """The keys in which members differ; raises ConfigError if any is structural (it would
    change the compiled program, so those members cannot share one step): one line naming the
    key, why (a section's ``_population_refusals``, e.g. an SAE's ``method.latents``), and the
    sweep that trains them instead."""
    if not configs:
        raise ConfigError("a population needs at least one member")
    first, varying = configs[0], {}
    leaves = {f"{section}.{f.name}" for section in hyperparams(first)
              for f in dataclasses.fields(getattr(first, section)) if f.metadata.get("hyper")}
    for cfg in configs[1:]:
        varying.update(config_lib.diff(first, cfg))
    bad = sorted(k for k in varying if k not in leaves and k not in MEMBER_KEYS
                 and not k.startswith("eval."))
    if bad:
        flat = [config_lib.flatten(c) for c in configs]
        shared = [k for k in bad if all(k in f for f in flat)] or bad  # not a switched section's
        why = {k: _refusal(first, k) for k in shared}
        key = next((k for k in shared if why[k]), shared[0])
        values = []
        for f in flat:  # in member order, once each
            if key in f and f[key] not in values:
                values.append(f[key])
        listed = ", ".join(f'"{v}"' if isinstance(v, str) else repr(v) for v in values)
        sweep = (f"train them as a sweep: repr-jax sweep --config EXPERIMENT --grid "
                 f"'{key}=[{listed}]' (not --population; in a sweep file, a grid key outside "
                 f"population=(...))")
        if why[key]:
            raise ConfigError(f"{key} {why[key]}, so population members that differ in it cannot "
                              f"share one compiled step; {sweep}")
        raise ConfigError(f"population members may differ only in seed and numeric "
                          f"hyperparameters ({', '.join(sorted(leaves))}); they differ in "
                          f"{', '.join(bad)}: {sweep}")
    return sorted(varying)


def _refusal(cfg: Config, key: str) -> str:
    """Why members may not differ in ``key``, where its section says (``_population_refusals``);
    '' otherwise."""
    section, _, name = key.partition(".")
    return getattr(getattr(cfg, section, None), "_population_refusals", {}).get(name, "")


def population_base(configs: Sequence[Config]) -> Config:
    """The config the population's method is built from: the first member's, with every integer
    hyper leaf at the members' largest value (a count that sizes a static shape, such as an SAE's
    ``method.k``, whose ``lax.top_k`` then fits every member; each member applies its own, read
    from its ``hp``)."""
    first, sets = configs[0], []
    for section in hyperparams(first):
        for f in dataclasses.fields(getattr(first, section)):
            value = getattr(getattr(first, section), f.name)
            if f.metadata.get("hyper") and isinstance(value, int) and not isinstance(value, bool):
                largest = max(getattr(getattr(c, section), f.name) for c in configs)
                if largest != value:
                    sets.append(f"{section}.{f.name}={largest!r}")
    return config_lib.override(first, sets) if sets else first


def stack(trees: Sequence[Any]) -> Any:
    """Stacks pytrees of the same structure along a new leading (member) axis."""
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *trees)


def member(tree: Any, i: int) -> Any:
    """Member ``i`` of a stacked pytree."""
    return jax.tree.map(lambda x: x[i], tree)


def members_per_chunk(cfg: Config) -> int:
    """How many members one step vmaps together (``train.population_chunk``; 0 = all); the chunks
    run one after another inside the one compiled step.

    Auto: one at a time for the cnn where the CPU tricks are on (:func:`repr_jax.backend.cpu_tuned`):
    XLA's CPU convolutions with per-member weights (vmapped: a grouped convolution, or patch
    matmuls) run slower than the same convolutions one by one — and a loop of members keeps the one
    program, its single dispatch and its stacked state. The same for an SAE there (its decoder
    gathers each row's k rows: vmapped over members, the gathers and their scatters ran 2.5x
    slower than one member after another, bench/sae_vs_saelens.py). All at once elsewhere."""
    n = cfg.train.population_chunk
    if n == 0:
        convolves = cfg.encoder.name == "cnn" and cfg.method.name not in NO_ENCODER
        return 1 if cpu_tuned() and (convolves or cfg.method.name == "sae") else 0
    return n


def make_population_step(cfg: Config, method, mesh, *, shared_batches: bool):
    """``step(stacked_state, batch, stacked_hp)``: train_step mapped over members (vmapped in
    chunks of :func:`members_per_chunk`), jitted with the state replicated and the batch split
    along the data axis (per-member batches: ``[K, B, ...]``, split along B)."""
    step, chunk = configured_step(cfg, method), members_per_chunk(cfg)

    def vstep(state, batch, hp):
        if chunk == 0 or chunk >= state.step.shape[0]:
            return jax.vmap(step, in_axes=(0, None if shared_batches else 0, 0))(state, batch, hp)
        def one(args):
            s, b, h = args
            return step(s, batch if shared_batches else b, h)
        return jax.lax.map(one, (state, None if shared_batches else batch, hp),
                           batch_size=None if chunk == 1 else chunk)  # 1: not even a vmap of one

    rep = sharding.replicated(mesh)
    batch_sharding = (sharding.batch_sharding(mesh) if shared_batches else
                      jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
                          None, (sharding.DATA, sharding.FSDP))))
    return jax.jit(vstep, in_shardings=(rep, batch_sharding, rep), out_shardings=(rep, rep),
                   donate_argnums=0)


def member_names(configs: Sequence[Config], varying: Sequence[str]) -> list[str]:
    names = [config_lib.point_name({k: config_lib.flatten(c)[k] for k in varying
                                    if not k.startswith("eval.")}) for c in configs]
    if len(set(names)) != len(names):
        raise ConfigError(f"population members must differ; got {len(names) - len(set(names))} "
                          f"duplicates")
    return names


def _init_population(configs: Sequence[Config], dataset, mesh, *, fresh: bool = True):
    """The population's method and its fresh stacked state (member ``i`` from ``configs[i].seed``;
    every member from ``encoder.init_from`` when ``fresh``, not when a checkpoint follows)."""
    method = build_method(population_base(configs), dataset,
                          population=members_per_chunk(configs[0]) != 1)
    keys = jnp.stack([jax.random.PRNGKey(c.seed) for c in configs])
    init = jax.vmap(state_init_fn(configs[0], method), in_axes=(0, None, None))
    return method, jax.jit(init, out_shardings=sharding.replicated(mesh))(
        keys, sample_batch(dataset), pretrained_for(configs[0], method, dataset) if fresh else {})


def load_population(workdir: str | Path) -> dict[str, Any]:
    """A trained population's ``{"names", "configs", "dataset", "method", "state"}`` (stacked,
    restored from the latest checkpoint; :func:`member` takes one member's state out)."""
    workdir = Path(workdir)
    saved = workdir / "population.json"
    if not saved.exists():
        raise ConfigError(f"{workdir} has no population.json: not a population directory")
    record = files.read_json(saved, fix="it records the population's members")
    configs = [config_lib.from_dict(m["config"]) for m in record["members"]]
    dataset = load_dataset(configs[0])
    method, state = _init_population(configs, dataset,
                                     sharding.make_mesh(configs[0].train.num_devices), fresh=False)
    state = restore_latest(workdir, state, keep=configs[0].train.keep_checkpoints)
    return {"names": [m["name"] for m in record["members"]], "configs": configs,
            "dataset": dataset, "method": method, "state": state}


def train_population(configs: Sequence[Config], workdir: str | Path, *,
                     shared_batches: bool = True, progress: bool = True,
                     names: Sequence[str] | None = None,
                     hparams: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Trains the members in one compiled step (resuming from ``workdir``'s latest checkpoint),
    evaluates each, and returns ``{"state" (stacked), "eval_rows" ({name: rows}), "names",
    "diverged" ({name: step})}``. The loop's NaN policy holds: a member whose loss becomes
    non-finite is recorded (its step), trained on harmlessly and left out of evaluation; the
    others are unaffected. ``names``: the members' directory names (default: from the keys they
    differ in); ``hparams``: what the writers compare each member by (default: its config)."""
    keep_host_memory()
    configs = [resolved_paths(c) for c in configs]  # recorded absolute, as a single run's
    varying = member_differences(configs)
    names = list(names) if names is not None else member_names(configs, varying)
    if len(names) != len(configs) or len(set(names)) != len(names):
        raise ConfigError(f"population member names must be {len(configs)} distinct names")
    cfg, workdir = configs[0], Path(workdir)
    t = cfg.train
    # ---------------------------------------------------------------- checks before compiling
    if t.fsdp != 1:
        raise ConfigError("populations keep every member's state whole on each device: "
                          "train.fsdp must be 1")
    mesh = sharding.make_mesh(t.num_devices)
    cfg.check_devices(mesh.size)
    check_buildable(cfg)
    saved = workdir / "population.json"
    record = {"members": [dict(name=n, config=config_lib.to_dict(c))
                          for n, c in zip(names, configs)], "shared_batches": shared_batches}
    if saved.exists():
        before = files.read_json(saved, fix="it records the population: restore it, or use a "
                                            "new workdir")
        if (before["shared_batches"] != shared_batches
                or [m["name"] for m in before["members"]] != names):
            raise ConfigError(f"{workdir} holds a different population; use a new workdir")
        for n, c in zip(names, configs):
            check_resumable(c, workdir / "members" / n)

    # ---------------------------------------------------------------- assemble
    dataset = load_dataset(cfg)
    eval_sets = load_eval_sets(cfg, dataset)
    method, state = _init_population(configs, dataset, mesh)
    members = [Member(n, c, workdir / "members" / n, None if hparams is None else dict(h))
               for n, c, h in zip(names, configs, hparams or [None] * len(configs))]
    hp = stack([hyperparams(c) for c in configs])
    streams = [BatchStream(dataset.splits["train"], batch_size=t.batch_size, seed=c.seed)
               for c in (configs[:1] if shared_batches else configs)]

    def host_batches(step: int):
        return [s.batch(step, process_index=jax.process_index(),
                        process_count=jax.process_count()) for s in streams]

    read_ahead = Prefetcher(host_batches, stop=t.steps, workers=cfg.data.workers,
                            buffer=cfg.data.prefetch)

    def batch_at(step: int, local=None):
        local = read_ahead(step) if local is None else local
        if shared_batches:
            return sharding.global_batch(local[0], mesh)
        stacked = {k: np.stack([b[k] for b in local]) for k in local[0]}
        spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
            None, (sharding.DATA, sharding.FSDP)))
        return {k: jax.make_array_from_process_local_data(spec, v) for k, v in stacked.items()}

    first = batch_at(0, host_batches(0))
    step_fn = make_population_step(cfg, method, mesh, shared_batches=shared_batches)
    compiled = step_fn.lower(state, first, hp).compile()
    # A member's costs are its separate run's: XLA counts a loop's body once, so the population
    # program's count is no measure of K members.
    _, member_costs = compile_step(cfg, method, mesh, member(state, 0),
                                   first if shared_batches else member(first, 0))
    records = [lambda: files.write_json(saved, record)]
    for m in members:
        records += [functools.partial(config_lib.save_json, m.cfg, m.workdir / "config.json"),
                    functools.partial(write_run_info, m.workdir / "run.json", member_costs,
                                      batch_size=t.batch_size, steps=t.steps,
                                      num_devices=mesh.size, population=len(configs),
                                      train_examples=len(dataset.splits["train"]["label"]))]
    upstream = make_upstream_loss(cfg, method)

    def evaluate(state, m: Member, index: int, final: bool) -> list:
        del final  # reference rows are a single run's (they would be the same K times)
        return run_evaluation(m.cfg, method, dataset, member(state, index), m.workdir,
                              reference=False, eval_sets=eval_sets,
                              upstream_loss=functools.partial(upstream,
                                                              hp=member(hp["method"], index)))

    # ---------------------------------------------------------------- train, evaluate
    trainee = Trainee(members=members, state=state, step_fn=compiled, batch_at=batch_at, hp=hp,
                      evaluate=evaluate, stacked=True, workdir=workdir, records=records,
                      close=read_ahead.close)
    state, rows, diverged = train_members(trainee, progress=progress,
                                          desc=f"population x{len(configs)}")
    return {"state": state, "eval_rows": rows, "names": names, "diverged": diverged}
