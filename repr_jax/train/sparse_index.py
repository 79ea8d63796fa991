"""``repr-jax index`` and ``repr-jax search``: a collection's SPLADE term weights kept on disk as an
inverted index, and queries run against it.

``index DOCS --out DIR`` encodes each non-empty line of ``DOCS`` (UTF-8, one document a line) with a
splade run (``--workdir``: its latest checkpoint, documents read as its data reads them) or a
BERT masked LM (``--init-from DIR|splade_tiny``: SPLADE's max-pooled ``log(1 + relu(logits))``),
a batch at a time made sparse on the host, and writes the index
(:func:`repr_jax.eval.sparse_retrieval.save_index`), the documents' texts and the model that
made it, every file with its digest. ``search DIR QUERY...`` encodes each query with the same
model (a run's query side: its encoder or, ``method.query_encoder=idf|learned``, its static
table) and prints the exact top ``k`` with scores (impact scoring over the postings the query's
terms touch).

Every file of the folder is checked against its digest before use: a tampered, truncated or
missing file is named in one line and nothing is used; an index built from a run that has
trained on since is refused (its checkpoint step is recorded). A killed ``index`` leaves the
folder without ``meta.json`` (written last), which ``search`` refuses; rerunning ``index``
replaces it and removes the temporaries the kill left.

Cost: ``index`` ``O(N T (P + D V))`` to encode ``N`` documents of ``T`` tokens (memory a batch's
``[B, V]`` plus the ``O(nnz)`` index); ``search`` one query encoding plus ``O(postings touched +
k log k)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from repr_jax import files
from repr_jax.eval import sparse_retrieval as sr

SOURCE, TEXTS = "source.json", "documents.txt"
CHUNK = 1024  # documents encoded (dense [CHUNK, V] at most) before they are made sparse


def _encoders(*, workdir: str | None, init_from: str | None, batch_size: int,
              progress: bool) -> tuple[Callable, Callable, dict]:
    """``(encode_docs, encode_queries, source)``: texts -> CSR ``[N, V]`` term weights, and the
    record of the model (what ``search`` loads again)."""
    import scipy.sparse as sp
    if workdir is not None:
        return _run_encoders(workdir, batch_size, progress)
    from repr_jax.encoders.mlm import splade_encode
    from repr_jax.encoders.pretrained import load_mlm
    loaded = load_mlm(init_from)
    spec = init_from if init_from == "splade_tiny" else str(Path(init_from).absolute())

    def encode(texts: Sequence[str], bar: bool = False):
        starts = range(0, len(texts), CHUNK)
        if bar and progress:
            from tqdm.auto import tqdm
            starts = tqdm(starts, desc="index: encoding", unit="chunk", leave=False)
        return sp.vstack([sp.csr_matrix(splade_encode(loaded, texts[s:s + CHUNK],
                                                      batch_size=batch_size))
                          for s in starts], format="csr", dtype=np.float32)
    return (lambda t: encode(t, True)), encode, {"init_from": spec}


def _run_encoders(workdir: str, batch_size: int, progress: bool):
    import jax

    from repr_jax import config as config_lib
    from repr_jax.data.tokenizer import Sides, make_tokenizer, pad_id_of
    from repr_jax.eval import Embedder
    from repr_jax.train.arms import is_sparse
    from repr_jax.train.mine import check_text_run
    from repr_jax.train.run import load_trained
    path = Path(workdir)
    if not (path / "config.json").is_file():
        raise ValueError(f"--workdir {path}: not a run directory (no config.json)")
    cfg = config_lib.load_json(path / "config.json")
    if not is_sparse(cfg):
        raise ValueError(f"--workdir {path}: a {cfg.method.name} run gives dense vectors, not "
                         f"vocabulary term weights; index reads a method.name=splade run (or "
                         f"--init-from a BERT masked-LM folder or splade_tiny)")
    check_text_run(path)
    cfg, _, method, state = load_trained(path, text_only=True)
    tokenizer, sides = make_tokenizer(cfg.data.tokenizer), Sides.of_section(cfg.data)
    embedder = Embedder(method.embed, {}, batch_size=batch_size, query_fn=method.embed_query,
                        pos_fn=method.embed_pos, pad_id=pad_id_of(tokenizer.vocab),
                        progress="index" if progress else "")

    def encode(side: str, which: str):
        return lambda texts: embedder.embed(state.variables, sides.encode(tokenizer, texts, side),
                                            which, sparse=True)
    step = int(jax.device_get(state.step))
    return encode("doc", "pos"), encode("query", "query"), {"workdir": str(path.absolute()),
                                                            "step": step}


def _check_out(out: str | Path, documents: str | Path) -> Path:
    """``--out``: a new folder or one holding only an index's files."""
    out = files.check_output(out, flag="--out", inputs=(documents,), folder=True)
    ours = {p.name for p in index_files(out)}
    others = sorted(p.name for p in out.iterdir() if p.name not in ours and not (
        p.name.startswith(".") and p.name.endswith(".tmp"))) if out.is_dir() else []
    if others:
        raise ValueError(f"--out {out}: the folder holds other files ({', '.join(others[:3])}"
                         f"{', ...' if len(others) > 3 else ''}); give a new folder or an "
                         f"index's own")
    return out


def index_files(folder: str | Path) -> list[Path]:
    """Every file an index folder holds (with the digests)."""
    folder = Path(folder)
    return sr.index_files(folder) + [folder / n for n in (SOURCE, TEXTS)] + [
        folder / f"{n}.blake2b" for n in (SOURCE, TEXTS)]


def build(documents: str | Path, out: str | Path, *, workdir: str | None = None,
          init_from: str | None = None, batch_size: int = 32,
          progress: bool = True) -> dict[str, float]:
    """Writes the inverted index of ``documents``' lines into ``out`` (module docstring); returns
    its size: ``documents``, ``doc_nnz`` (mean non-zero terms) and ``bytes_per_doc``."""
    from repr_jax.train.steer import read_lines
    if (workdir is None) == (init_from is None):
        raise ValueError("give one of --workdir RUN or --init-from DIR|splade_tiny")
    out = _check_out(out, documents)
    texts = read_lines(documents, flag="documents", what="document")
    encode_docs, _, source = _encoders(workdir=workdir, init_from=init_from,
                                       batch_size=batch_size, progress=progress)
    weights = encode_docs(texts)
    index = sr.build_index(weights)
    (out / sr.META).unlink(missing_ok=True)  # unfinished until save_index writes it last
    files.write_verified(out / TEXTS, "".join(t + "\n" for t in texts).encode())
    files.write_verified(out / SOURCE, json.dumps(source, indent=1).encode())
    sr.save_index(index, out)
    return {"documents": index.num_docs, "doc_nnz": index.nnz / max(index.num_docs, 1),
            "bytes_per_doc": index.nbytes() / max(index.num_docs, 1)}


def open_index(folder: str | Path) -> tuple[sr.SparseIndex, list[str], dict[str, Any]]:
    """``(index, texts, source)`` of a folder :func:`build` wrote, each file checked against its
    digest first (a one-line ValueError naming the first that fails; nothing is used)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such index folder (repr-jax index writes one)")
    if not (folder / sr.META).is_file():
        raise ValueError(f"{folder}: no {sr.META}: not an index, or one whose building was "
                         f"stopped; build it again (repr-jax index)")
    index = sr.load_index(folder)
    texts = sr.read_verified(folder / TEXTS).decode("utf-8").split("\n")[:-1]
    source = json.loads(sr.read_verified(folder / SOURCE))
    if len(texts) != index.num_docs:
        raise ValueError(f"{folder / TEXTS}: {len(texts)} documents, but the index has "
                         f"{index.num_docs}; build the index again")
    return index, texts, source


def search(folder: str | Path, queries: Sequence[str], *, k: int = 10,
           batch_size: int = 32) -> list[list[tuple[int, float, str]]]:
    """Each query's top ``k`` documents it shares a term with, as ``(number, score, text)``,
    best first: ``number`` counts the indexed file's non-empty lines from 1; ties go to the
    lower number."""
    index, texts, source = open_index(folder)
    if not ("workdir" in source) ^ ("init_from" in source):
        raise ValueError(f"{Path(folder) / SOURCE}: names no model (workdir or init_from)")
    _, encode_queries, now = _encoders(workdir=source.get("workdir"),
                                       init_from=source.get("init_from"),
                                       batch_size=batch_size, progress=False)
    if now != source:
        raise ValueError(f"{folder}: built from {source['workdir']} at step {source['step']}, "
                         f"whose latest checkpoint is now step {now['step']}; build the index "
                         f"again")
    found = sr.search(index, encode_queries(list(queries)), k)
    return [[(int(i) + 1, float(s), texts[i]) for i, s in zip(ids, scores) if s > 0]
            for ids, scores in zip(found.ids, found.scores)]


__all__ = ["build", "index_files", "open_index", "search"]
