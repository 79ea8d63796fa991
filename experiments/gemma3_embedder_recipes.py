"""Gemma 3 270M made into an embedder by the 2024-25 recipes, against MiniLM and SmolLM2, on the
WordNet BEIR collection, bitext mining in eight languages and a needle set: zero-shot poolings,
causal + last-token LoRA, LLM2Vec's recipe (bidirectional + masked next-token + contrastive +
mean), and an EmbeddingGemma-style arm (bidirectional + mean, Matryoshka dimensions, the
spread-out regulariser, task prompts).

Claim (BehnamGhader et al. 2024, LLM2Vec; Vera et al. 2025, EmbeddingGemma): a decoder switched to
bidirectional attention needs the masked next-token step before contrastive training, after which
bidirectional + mean beats causal + last-token; a multilingual backbone mines translations that an
English model cannot; bidirectional mean pooling keeps a needle anywhere in a long document.

Collection: ``llm_embedder_wordnet_beir``'s (``hardneg_wordnet_beir.write_collection``, 3,000
documents, 300 test queries, 1,600 training pairs). Arms: (1) MiniLM (mean); (2) SmolLM2 mean,
(3-4) Gemma 3 last-token and mean, zero-shot; LoRA fine-tunes from Gemma 3 (rank 16 on q/k/v/o,
alpha 32, tied towers, InfoNCE with in-batch negatives at temperature 0.05, AdamW lr 2e-4, 10%
warmup, 100 steps of 16 pairs, seed 0, 40 tokens a side): (5) causal + last-token with
``INSTRUCTION`` on queries; (6) bidirectional + mean, same; (7) LLM2Vec: 100 masked next-token
steps first (bidirectional, 20% of tokens, BERT's 80/10/10 with ``<mask>``, on the same training
pairs' texts, LoRA folded in after), then (6)'s training; (8) EmbeddingGemma-style: bidirectional +
mean, Matryoshka dims 128/256/512/640, spread-out regulariser weight 1 (its second moment on
queries and on documents), EmbeddingGemma's prompts (``task: search result | query: `` and
``title: none | text: ``), no instruction. Metrics: WordNet BEIR nDCG@10 and Recall@100 per test
query; bitext mining (``iso_3166-1`` country names, English -> each language, the English side's
nearest neighbour by cosine; the paired unit is a name, all languages pooled; MTEB's F1 per
language in ``bitext.csv``); the needle set at 512 and 2,048 tokens (20 documents each; MiniLM
reads the first 512 tokens) nDCG@10 per query. Paired bootstrap intervals (1,000 resamples).

Needs the MiniLM, SmolLM2 and Gemma 3 wheels, Debian's wordnet-base and iso-codes.

Command:   repr-jax study gemma3_embedder_recipes --workdir runs/gemma3
Hardware:  2 CPU cores (AMD EPYC, Zen 4, AVX-512 BF16); the full suite's CI run shared them for
           the last 70 minutes of the analysis.
Runtime:   the five training runs ~66 min on idle cores (2026-12-07: causal+last ~4.4 s/step,
           bidir+mean and mntp ~7.3, LLM2Vec ~5.9, EmbeddingGemma-style ~7), then the analysis
           (eight models over the collection, 8 languages' names, 40 needle documents) 1 h 43 min
           with the runs read back; ``:quick`` (300 documents, 2 steps, 2 languages, needle at
           256 tokens) checks the wiring in 16 min.
Expected (study.csv, bitext.csv; 300 test queries x 3,000 documents; 3,358 names in 8 languages;
20 needle queries a length; difference = arm - baseline with its 95% paired-bootstrap interval,
1,000 resamples):
    arm                   nDCG@10  R@100  bitext acc  needle@512  needle@2048
    MiniLM (mean)          0.613   0.937    0.158       0.316       0.309
    SmolLM2 mean           0.097   0.327    0.107       0.234       0.226
    Gemma last (0-shot)    0.150   0.543    0.116       0.163       0.236
    Gemma mean (0-shot)    0.276   0.563    0.144       0.206       0.171
    causal+last            0.834   0.977    0.268       0.236       0.319
    bidir+mean             0.770   0.973    0.274       0.345       0.305
    LLM2Vec (MNTP first)   0.793   0.977    0.258       0.320       0.234
    EmbeddingGemma-style   0.790   0.977    0.248       0.401       0.326
    comparison                           nDCG@10                  bitext accuracy
    Gemma mean - Gemma last          +0.126 [+0.084, +0.172]   +0.029 [+0.019, +0.038]
    Gemma mean - SmolLM2 mean        +0.179 [+0.134, +0.227]   +0.037 [+0.029, +0.045]
    Gemma mean - MiniLM              -0.337 [-0.390, -0.288]   -0.014 [-0.025, -0.003]
    causal+last - Gemma last         +0.684 [+0.639, +0.728]   +0.152 [+0.140, +0.165]
    bidir+mean - causal+last         -0.064 [-0.091, -0.039]   +0.006 [-0.006, +0.017]
    LLM2Vec - bidir+mean             +0.023 [+0.004, +0.041]   -0.015 [-0.023, -0.007]
    LLM2Vec - causal+last            -0.041 [-0.065, -0.016]   -0.009 [-0.021, +0.002]
    EmbeddingGemma-style - bidir+mean +0.020 [-0.005, +0.048]  -0.025 [-0.038, -0.013]
    LLM2Vec - MiniLM                 +0.179 [+0.130, +0.221]   +0.101 [+0.087, +0.115]
    EmbeddingGemma-style - MiniLM    +0.176 [+0.130, +0.219]   +0.091 [+0.077, +0.104]
    Bitext F1 (MTEB's, English -> language) of MiniLM / Gemma mean / causal+last: fr 0.24 /
    0.24 / 0.36, de 0.23 / 0.33 / 0.44, es 0.45 / 0.27 / 0.39, ru 0.003 / 0.016 / 0.124, zh_CN
    0.003 / 0.023 / 0.166, ar 0.001 / 0.003 / 0.043, ja 0.004 / 0.003 / 0.092, hi 0.003 / 0.003
    / 0.033. Every needle difference's interval spans 0 (20 queries: intervals ~ +-0.15).
Outcome: the claims hold in part. (1) Switched to bidirectional attention without the masked
next-token step, Gemma 3 loses to causal + last-token (-0.064 nDCG@10); MNTP first recovers a
third of that (+0.023, p = 0.01) but bidirectional + mean still ends below causal + last-token
(-0.041, p = 0.002): at 100 MNTP and 100 contrastive steps the step helps, it does not reverse
the order. EmbeddingGemma's choices (Matryoshka, spread-out, its prompts) on top of bidir+mean
do not separate from it (+0.020, p = 0.14). (2) The multilingual backbone mines translations
MiniLM cannot, but only once trained: zero-shot, Gemma's mean pooling is no better than MiniLM on
the names (0.144 against 0.158); after 1,600 English pairs every Gemma arm finds Cyrillic, Han,
Japanese, Arabic and Devanagari translations (F1 0.016-0.17 where MiniLM stays under 0.005).
(3) The needle set is too small to tell poolings apart at 512 or 2,048 tokens. Beyond the
claims: fine-tuned Gemma 3 270M beats MiniLM on this collection by +0.18 nDCG@10 (the same
recipe on SmolLM2-135M reached 0.374, ``llm_embedder_wordnet_beir``), and zero-shot mean pooling
beats last-token by +0.126.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from hardneg_wordnet_beir import per_query, write_collection

DOCS, TEST_QUERIES, STEPS, BATCH, LENGTH = 3000, 300, 100, 16, 40
INSTRUCTION = "Instruct: Given a sentence, retrieve the meaning of the word it uses\nQuery: "
EG_QUERY, EG_DOC = "task: search result | query: ", "title: none | text: "
LANGS = ("fr", "de", "es", "ru", "zh_CN", "ar", "ja", "hi")
NEEDLE_LENGTHS, NEEDLE_QUERIES = (512, 2048), 20
TRAINED = ("causal+last", "bidir+mean", "LLM2Vec", "EmbeddingGemma-style")
COMPARISONS = (("Gemma mean", "Gemma last"), ("Gemma mean", "SmolLM2 mean"),
               ("causal+last", "Gemma last"), ("bidir+mean", "causal+last"),
               ("LLM2Vec", "bidir+mean"), ("LLM2Vec", "causal+last"),
               ("EmbeddingGemma-style", "bidir+mean"), ("LLM2Vec", "MiniLM"),
               ("EmbeddingGemma-style", "MiniLM"), ("Gemma mean", "MiniLM"))


def _config(root: Path, data_dir: Path, *, attention: str, pooling: str, steps: int,
            method: dict, prefixes=(INSTRUCTION, ""), init_from: str = "gemma3"):
    from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                                 OptimConfig, TrainConfig)
    return Config(
        seed=0,
        data=DataConfig(name=f"beir:{root}", tokenizer="gemma3", query_max_len=LENGTH,
                        doc_max_len=LENGTH, query_prefix=prefixes[0], doc_prefix=prefixes[1],
                        data_dir=str(data_dir)),
        encoder=EncoderConfig(name="decoder_lm", init_from=init_from, attention=attention,
                              pooling=pooling),
        method=MethodConfig(**method),
        optim=OptimConfig(lr=2e-4, weight_decay=0.01, warmup_fraction=0.1, lora_rank=16,
                          lora_alpha=32),
        train=TrainConfig(batch_size=BATCH, steps=steps, ckpt_every=25, log_every=10,
                          num_devices=1),
        eval=EvalConfig(evaluators=(), reference_rows=False, bootstrap=0))


CONTRASTIVE = dict(name="biencoder", objective="info_nce", temperature=0.05, proj_dim=0,
                   tied_towers=True)


def _train(workdir: Path, root: Path, data_dir: Path, steps: int) -> dict[str, tuple]:
    """Trains the four Gemma 3 arms (a finished run is read back, a killed one resumes); ``{arm:
    (run dir, (query prefix, document prefix))}``."""
    from repr_jax.train import train_and_evaluate
    runs = workdir / "runs"
    plans = {
        "causal+last": dict(attention="causal", pooling="last_token", method=CONTRASTIVE),
        "bidir+mean": dict(attention="bidirectional", pooling="mean", method=CONTRASTIVE),
        "mntp": dict(attention="bidirectional", pooling="mean", method=dict(
            name="mntp", mask_ratio=0.2, mask_token="<mask>", corruption="bert")),
        "LLM2Vec": dict(attention="bidirectional", pooling="mean", method=CONTRASTIVE,
                        init_from=str(runs / "mntp")),
        "EmbeddingGemma-style": dict(
            attention="bidirectional", pooling="mean", prefixes=(EG_QUERY, EG_DOC),
            method=dict(CONTRASTIVE, matryoshka_dims=(128, 256, 512, 640), spread_out=1.0))}
    for arm, plan in plans.items():  # in order: the LLM2Vec arm starts from the mntp run
        train_and_evaluate(_config(root, data_dir, steps=steps, **plan), runs / arm,
                           verbose=False)
    return {arm: (runs / arm, plans[arm].get("prefixes", (INSTRUCTION, ""))) for arm in TRAINED}


def _bitext_correct(embed, langs) -> tuple[np.ndarray, dict[str, float]]:
    """Whether each English name's nearest translation (cosine) is its own, all languages pooled,
    and MTEB's F1 per language."""
    from repr_jax.eval.bitext import bitext_mining, gettext_pairs
    from repr_jax.eval.retrieval import normalize_rows
    correct, f1 = [], {}
    for lang in langs:
        english, translated = map(list, zip(*gettext_pairs(lang)))
        a, b = np.asarray(normalize_rows(embed(english))), np.asarray(normalize_rows(embed(
            translated)))
        correct.append((a @ b.T).argmax(axis=1) == np.arange(len(a)))
        f1[lang] = float(bitext_mining(a, b)["f1"])
    return np.concatenate(correct).astype(np.float32), f1


def _analyze(workdir: Path, table, *, quick: bool):
    from repr_jax.data import eval_sets
    from repr_jax.data.needle import needle
    from repr_jax.data.tokenizer import Sides, make_tokenizer, minilm_dir
    from repr_jax.encoders.pretrained import load_decoder_lm, load_sentence_transformer
    from repr_jax.eval import Embedder
    from repr_jax.eval.stats import paired_row
    from repr_jax.llm_files import gemma3_file, smollm2_file
    from repr_jax.train import load_trained
    del table  # this study trains its runs itself
    if minilm_dir() is None or smollm2_file() is None or gemma3_file() is None:
        raise FileNotFoundError("this study needs the MiniLM, SmolLM2 and Gemma 3 wheels (see "
                                "the README's test install command)")
    workdir = Path(workdir)
    root, data_dir, features = workdir / "collection", workdir / "tfds", workdir / "features"
    if not (root / "qrels" / "test.tsv").exists():
        write_collection(root, max_docs=300 if quick else DOCS,
                         test_queries=30 if quick else TEST_QUERIES,
                         train_pairs=(2 if quick else STEPS) * BATCH)
    trained = _train(workdir, root, data_dir, 2 if quick else STEPS)
    langs = LANGS[:2] if quick else LANGS
    lengths, n_needle = ((256,), 4) if quick else (NEEDLE_LENGTHS, NEEDLE_QUERIES)

    def measure(name, embed_query, embed_doc, variables, tokenizer, prefixes=("", ""), *,
                pad_id=-1, max_tokens=0):
        """Per-query WordNet metrics, bitext correctness and needle nDCG@10 of one model."""
        sides = Sides(LENGTH, LENGTH, *prefixes)
        s = eval_sets.beir(root, tokenizer=tokenizer, data_dir=str(data_dir), sides=sides)
        out = dict(per_query(embed_query, embed_doc, variables, s, pad_id=pad_id,
                             cache_dir=features / name))
        tok = make_tokenizer(tokenizer)
        embedder = Embedder(embed_doc, {}, batch_size=64, pad_id=pad_id)  # cut to the texts
        held = []  # its cache is keyed by the arrays' ids: none is freed and reused meanwhile

        def embed(texts):
            held.append(Sides(LENGTH, LENGTH, "", prefixes[1]).encode(tok, texts, "doc"))
            return np.asarray(embedder.embed(variables, held[-1]))
        out["bitext accuracy"], f1 = _bitext_correct(embed, langs)
        for length in lengths:
            ns = needle(length, tokenizer=tokenizer, num_queries=n_needle, sides=sides,
                        max_tokens=max_tokens)
            metrics = per_query(embed_query, embed_doc, variables, ns, batch_size=2,
                                pad_id=pad_id)
            out[f"needle@{length} ndcg@10"] = metrics["ndcg@10"]
        return out, f1

    per, f1 = {}, {}
    minilm = load_sentence_transformer(minilm_dir())

    def minilm_embed(params, ids):
        return minilm.module.apply({"params": params}, ids)[0]
    per["MiniLM"], f1["MiniLM"] = measure("MiniLM", minilm_embed, minilm_embed, minilm.params,
                                          "minilm", pad_id=0, max_tokens=512)
    for arm, (spec, pooling) in {"SmolLM2 mean": ("smollm2", "mean"),
                                 "Gemma last": ("gemma3", "last_token"),
                                 "Gemma mean": ("gemma3", "mean")}.items():
        llm = load_decoder_lm(spec)
        module = llm.module(pooling=pooling)

        def embed(params, ids, module=module):
            return module.apply({"params": params}, ids)[0]
        per[arm], f1[arm] = measure(arm, embed, embed, llm.params, spec)
        del llm
    for arm, (run, prefixes) in trained.items():
        _, _, method, state = load_trained(run)
        per[arm], f1[arm] = measure(arm, method.embed_query, method.embed_pos, state.variables,
                                    "gemma3", prefixes)
    from repr_jax import files
    files.write_text(workdir / "bitext.csv", "arm," + ",".join(langs) + "\n" + "".join(
        f"{a}," + ",".join(f"{v[lang]:.4f}" for lang in langs) + "\n" for a, v in f1.items()))
    metrics = ["ndcg@10", "recall@100", "bitext accuracy"] + [
        f"needle@{length} ndcg@10" for length in lengths]
    rows = [dict(metric=m, arm=a, baseline="", value=float(np.mean(per[a][m])))
            for m in metrics for a in per]
    rows += [dict(metric=m, arm=a, baseline=b, **paired_row(per[a][m], per[b][m]))
             for m in metrics for a, b in COMPARISONS]
    return rows


def get_study(arg=None):
    from repr_jax.scaling import Study
    if arg not in (None, "quick"):
        raise ValueError(f"gemma3_embedder_recipes takes :quick or nothing, not :{arg}")
    return Study(claim=__doc__.split("\n\n")[1].replace("\n", " "),
                 analyze=functools.partial(_analyze, quick=arg == "quick"))
