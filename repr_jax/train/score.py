"""``repr-jax score --workdir CE_RUN --data pairs:FILE --out FILE``: a teacher's scores for a
``pairs:`` file, for distillation.

A trained model that scores pairs (a ``cross_encoder`` run) reads each line's query with its
positive and with each of its negatives; the output is the same lines with ``positive_score`` and
``negative_scores`` set (the names ``repr-jax mine`` writes), every other field kept. A bi-encoder
then trains on it with ``method.objective=margin_mse`` or ``kl_distill`` and
``method.negatives_per_query=K`` (the MS MARCO MarginMSE recipe: Hofstätter et al. 2020).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

CHUNK = 4096  # lines tokenised and scored together


def _lines(path: Path):
    """``(where, row, query, positive, negatives)`` of each non-blank line."""
    from repr_jax import files
    from repr_jax.data.text_pairs import parse_line
    for number, line in files.text_lines(path):
        if line.strip():
            where = f"{path}:{number}"
            yield (where, files.json_object(line, where), *parse_line(line, where))


def score_file(*, workdir: str | Path, data: str, out: str | Path, batch_size: int = 64,
               progress: bool = True) -> dict[str, Any]:
    """Writes ``out`` (atomically): ``data``'s lines with the run's scores; returns a summary.
    Cost: ``L (1 + K)`` pair passes for L lines of K negatives; memory ``O(L)`` for the lines
    kept until the file is written, one chunk of token ids."""
    from repr_jax import files
    from repr_jax.data import text_pairs
    from repr_jax.data.tokenizer import Sides, make_tokenizer, pad_id_of
    from repr_jax.eval.rerank import score_pairs
    from repr_jax.train.mine import check_text_run
    from repr_jax.train.run import load_trained
    if not data.startswith(text_pairs.PAIRS):
        raise ValueError(f"--data {data}: score reads a pairs:FILE.jsonl (its queries, positives "
                         f"and negatives)")
    source = text_pairs.path_of(data, flag="--data")
    if not (Path(workdir) / "config.json").is_file():
        raise ValueError(f"--workdir {workdir}: not a run directory (no config.json)")
    out = files.check_output(out, flag="--out", inputs=(source,))
    check_text_run(workdir)
    cfg, _, method, state = load_trained(workdir, text_only=True)
    if not method.scores_pairs:
        raise ValueError(f"--workdir {workdir}: its method {cfg.method.name!r} does not score a "
                         f"query with a document; score needs a cross_encoder run")
    tokenizer = make_tokenizer(cfg.data.tokenizer)
    sides, pad_id = Sides.of_section(cfg.data), pad_id_of(tokenizer.vocab)
    written, pairs, lines = 0, 0, []
    rows = _lines(source)
    while chunk := list(itertools.islice(rows, CHUNK)):
        queries = sides.encode(tokenizer, [c[2] for c in chunk], "query")
        docs = sides.encode(tokenizer, [d for c in chunk for d in (c[3], *c[4])], "doc")
        counts = np.asarray([1 + len(c[4]) for c in chunk])
        q_of = np.repeat(np.arange(len(chunk)), counts)
        scores = score_pairs(method.score, state.variables, queries, docs, q_of,
                             np.arange(len(docs)), pad_id=pad_id, batch_size=batch_size,
                             progress=f"score lines {written + 1:,}-{written + len(chunk):,}"
                             if progress else "")
        for (_, row, *_), s in zip(chunk, np.split(scores, np.cumsum(counts)[:-1])):
            row = {**row, "positive_score": round(float(s[0]), 6),
                   "negative_scores": [round(float(v), 6) for v in s[1:]]}
            lines.append(json.dumps(row, ensure_ascii=False) + "\n")
        written, pairs = written + len(chunk), pairs + len(docs)
    if not lines:
        raise ValueError(f"--data {data}: no lines to score")
    files.write_text(out, "".join(lines))
    print(f"score: {written:,} lines, {pairs:,} query-document pairs scored by {workdir} -> "
          f"{out}", file=sys.stderr)
    return dict(lines=written, pairs=pairs, out=str(out))
