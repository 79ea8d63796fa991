"""The bad-input batteries through the CLI: each case's exit code, its one line, whether it left a
run folder behind, and what it did to the files around it.

    python bench/bad_inputs.py                # both batteries, ~12 min; prints a markdown table
    python bench/bad_inputs.py --battery 34   # the first battery (configs, images, sweeps): ~2 min
    python bench/bad_inputs.py --battery 38   # the text surfaces (pairs:, beir:, mine, fit)
    python bench/bad_inputs.py --battery 40   # decoder LLM weights, LoRA, attention, prefixes
    python bench/bad_inputs.py --battery 41   # rerankers, teacher scores, ColBERT
    python bench/bad_inputs.py --battery 49   # README commands, first stages, metric cut-offs,
                                              # line endings, empty texts, GGUF sizes, wording
    python bench/bad_inputs.py --battery 50   # activations and sparse autoencoders
    python bench/bad_inputs.py --battery 51   # features, steer, concepts: ~2 min
    python bench/bad_inputs.py --battery 52   # SPLADE, expand, hybrid fusion: ~2 min
    python bench/bad_inputs.py --case 41,44   # those cases (numbered across both batteries)

Every case should exit 2 with one ``repr-jax: error:`` line (or argparse's ``error:`` line) and
write nothing, or (the "silently wrong" cases) give the right number: the last column says what a
case did to the files it must not touch, or the number it printed. Not part of pytest (the tests
cover each class: ``tests/test_cli.py``, ``tests/test_text_surfaces.py``, ...); this re-runs the
batteries whole, as a new user would meet them.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

QUICK = ["--config", "simclr_mnist1d:quick"]


@dataclasses.dataclass
class Case:
    what: str
    argv: list[str]
    check: Callable[[Path, str], str] | None = None  # (tmp, stderr) -> what happened
    env: dict[str, str | None] = dataclasses.field(default_factory=dict)  # None: unset it
    cwd: Path | None = None
    timeout: int = 300
    battery: int = 34


def cases(tmp: Path) -> list[Case]:
    """The cases in order; folders they need are made under ``tmp`` by :func:`_prepare`."""
    w = ["--workdir", str(tmp / "w")]
    sweep = ["sweep", *QUICK, "--grid", "seed=[0,1]", *w]
    first = [Case(what, argv) for what, argv in [
        ("view probability 2.0", ["train", *QUICK, *w, "--set", "data.views.flip_p=2.0"]),
        ("view probability -0.5", ["train", *QUICK, *w, "--set", "data.views.grayscale_p=-0.5"]),
        ("crop range high-to-low", ["train", *QUICK, *w, "--set",
                                    "data.views.crop_scale=(0.9,0.1)"]),
        ("negative local crops", ["train", *QUICK, *w, "--set", "data.views.local_crops=-5"]),
        ("few-shot shots -1", ["train", *QUICK, *w, "--set", "eval.fewshot.shots=(-1,)"]),
        ("few-shot shots 0", ["train", *QUICK, *w, "--set", "eval.fewshot.shots=(0,)"]),
        ("sweep --jobs 0", [*sweep, "--jobs", "0"]),
        ("sweep --jobs -1", [*sweep, "--jobs", "-1"]),
        ("knn.k above the train split", ["train", *QUICK, *w, "--set", "eval.knn.k=100000"]),
        ("tokenizer for data without text", ["train", *QUICK, *w, "--set",
                                             "data.tokenizer=minilm"]),
        ("--config NAME:bogus", ["train", "--config", "simclr_mnist1d:bogus", *w]),
        ("--config NAME:quick:extra", ["train", "--config", "simclr_mnist1d:quick:extra", *w]),
        ("export --out a non-empty folder", ["export", "--workdir", str(tmp / "run"), "--format",
                                             "safetensors", "--out", str(tmp / "full")]),
        ("imagefolder: with no path", ["train", "--config", "simclr_shapes:quick", *w, "--set",
                                       "data.name=imagefolder:"]),
        ("image folder with one class", _folder(tmp, "one", w)),
        ("a class with no readable image", _folder(tmp, "half", w)),
        ("train.steps=1e20", ["train", *QUICK, *w, "--set", "train.steps=99999999999999999999"]),
        ("image folder without images", _folder(tmp, "junk", w)),
        ("config file with a syntax error", ["train", "--config", str(tmp / "syntax.py"), *w]),
        ("config file whose get_config raises", ["train", "--config", str(tmp / "raises.py"),
                                                 *w]),
        ("--workdir an existing file", ["train", *QUICK, "--workdir", str(tmp / "afile")]),
        ("--workdir a dangling symlink", ["train", *QUICK, "--workdir", str(tmp / "dangling")]),
        ("export --out an existing file", ["export", "--workdir", str(tmp / "run"), "--format",
                                           "safetensors", "--out", str(tmp / "afile")]),
        ("--print-config | head -1", ["train", "--print-config"]),
        ("ray cluster unreachable", [*sweep, "--executor", "ray", "--ray-address",
                                     "127.0.0.1:1"]),
        ("optim.lr=1e300", ["train", *QUICK, *w, "--set", "optim.lr=1e300"]),
        ("method.temperature=1e-300", ["train", *QUICK, *w, "--set",
                                       "method.temperature=1e-300"]),
        ("data.num_examples=5", ["train", *QUICK, *w, "--set", "data.num_examples=5"]),
        ("--executor slurm without SLURM", [*sweep, "--executor", "slurm"]),
        ("--slurm-time -5", [*sweep, "--executor", "slurm", "--slurm-time", "-5"]),
    ]]
    return (first + text_cases(tmp) + llm_cases(tmp) + second_stage_cases(tmp)
            + readme_cases(tmp) + sae_cases(tmp) + interp_cases(tmp) + sparse_cases(tmp))


def sae_cases(tmp: Path) -> list[Case]:
    """Issue 50's battery: activations and sparse autoencoders — a layer that does not exist, a
    store rewritten from a model of another width under a trained SAE, k and latents out of
    range, a tampered store, an SAE on text, stores that are not there."""
    w = ["--workdir", str(tmp / "w")]

    def sae(store: str, *more: str) -> list[str]:
        return ["train", *QUICK, *w, "--no-progress", "--set", "method.name=sae", "--set",
                f"data.name=activations:{store}", "--set", "train.steps=3", "--set",
                "method.latents=64", "--set", "method.k=8",
                *[a for m in more for a in ("--set", m)]]

    acts = ["activations", "--workdir", str(tmp / "text_run"), "--no-progress",
            "--data", f"pairs:{tmp / 'pairs.jsonl'}"]
    rows = [
        Case("activations --layer 5 of a one-block model", [*acts, "--layer", "5", "--out",
                                                            str(tmp / "w")]),
        Case("an SAE's store rewritten from a model of another width, then eval",
             ["eval", "--workdir", str(tmp / "sae_run"), "--no-progress"],
             _kept_checkpoint(tmp / "sae_run")),
        Case("method.k=64 with method.latents=64", sae(str(tmp / "store32"), "method.k=64")),
        Case("method.latents=-1", sae(str(tmp / "store32"), "method.latents=-1")),
        Case("a tampered vectors.npy", sae(str(tmp / "tampered"))),
        Case("method.name=sae on a pairs: file", [
            "train", *QUICK, *w, "--no-progress", "--set", "method.name=sae", "--set",
            f"data.name=pairs:{tmp / 'pairs.jsonl'}"]),
        Case("data.name=activations: with no folder", sae("")),
        Case("data.name=activations: a folder that is not there", sae(str(tmp / "nowhere"))),
        Case("activations --out the pairs file it reads", [*acts, "--layer", "0", "--out",
                                                           str(tmp / "pairs.jsonl")]),
        Case("activations --skip-first 1 of the pooled embedding",
             [*acts, "--layer", "embedding", "--skip-first", "1", "--out", str(tmp / "w")]),
        Case("activations --skip-first -1", [*acts, "--layer", "0", "--skip-first", "-1",
                                             "--out", str(tmp / "w")]),
    ]
    for r in rows:
        r.battery = 50
    return rows


def interp_cases(tmp: Path) -> list[Case]:
    """Issue 51's battery: reading an SAE's features, steering a decoder, WordNet concept
    directions — a category of fewer than 2 words (of its own), layers that do not exist, a
    direction of another width or from a run that is no SAE, alpha not finite, prompts not UTF-8,
    a run that is no SAE, outputs inside the run, on an input or in a folder of other files.
    Every output goes to ``w`` (the "run folder left" column says whether a refusal made it)."""
    gguf, sae, store = str(tmp / "tiny.gguf"), str(tmp / "llm_sae"), str(tmp / "llm_store")

    def concepts(*more: str, out: Path = tmp / "w") -> list[str]:
        return ["concepts", "--init-from", gguf, "--out", str(out), "--no-progress",
                "--categories", "animal.n.01,mammal.n.01,bird.n.01,fish.n.01", "--max-words",
                "8", "--bootstrap", "0", *more]

    def steer(**change: str) -> list[str]:
        flags = {"layer": "1", "direction": str(tmp / "ones.npy"), "alpha": "1,4",
                 "prompts": str(tmp / "prompts.txt"), "words": "the", "random": "2",
                 "new-tokens": "1", "max-len": "16", "out": str(tmp / "w" / "steer.json"),
                 **change}
        return ["steer", "--init-from", gguf, "--no-progress",
                *[a for k, v in flags.items() for a in (f"--{k}", v)]]

    def features(workdir: str, out: str) -> list[str]:
        return ["features", "--workdir", workdir, "--out", out, "--no-progress"]

    rows = [
        Case("concepts: a synset of 1 single-word lemma (dalmatian.n.02)",
             concepts("--categories", "animal.n.01,dalmatian.n.02")),
        Case("concepts: hit.n.01 above base_hit.n.01 (1 word of its own)",
             concepts("--categories", "hit.n.01,base_hit.n.01")),
        Case("concepts --layers 0,5 of a two-block model", concepts("--layers", "0,5")),
        Case("concepts --out a folder of other files", concepts(out=tmp / "foreign"),
             _tree_unchanged("foreign")),
        Case("steer --layer 5 of a two-block model", steer(layer="5")),
        Case("steer --direction a .npy of width 33 (model 32)",
             steer(direction=str(tmp / "wide.npy"))),
        Case("steer --alpha nan", steer(alpha="1,nan")),
        Case("steer --alpha inf", steer(alpha="inf")),
        Case("steer --prompts a Latin-1 file", steer(prompts=str(tmp / "latin1.txt"))),
        Case("steer --direction latent: of a run that is no SAE",
             steer(direction=f"latent:{tmp / 'llm_run'}:3")),
        Case("steer --direction latent: of a folder that is no run",
             steer(direction=f"latent:{tmp / 'nowhere'}:3")),
        Case("steer --direction latent:SAE:64 of 64 latents", steer(direction=f"latent:{sae}:64")),
        Case("steer --layer 0 with an SAE of layer 1", steer(layer="0",
                                                             direction=f"latent:{sae}:3")),
        Case("features --workdir a decoder_lm biencoder run",
             features(str(tmp / "llm_run"), str(tmp / "w"))),
        Case("features --workdir the store, not a run", features(store, str(tmp / "w"))),
        Case("features --out inside the SAE run", features(sae, f"{sae}/browser"),
             _absent("llm_sae/browser")),
        Case("features --out the SAE's store", features(sae, store),
             _tree_unchanged("llm_store")),
    ]
    for r in rows:
        r.battery = 51
    return rows


def sparse_cases(tmp: Path) -> list[Case]:
    """Issue 52's battery: learned sparse retrieval and hybrid fusion — a BERT checkpoint with no
    MLM head (expand and encoder.init_from), FLOPS weights below 0, a splade run on image data,
    expand --workdir of a run that is not splade or no run, fusion of runs over different query
    sets and malformed fusion arms, a run's own search that does not fit its features (a dense
    run's 'sparse' part or sparse_retrieval, a splade run's 'dense' part), a tampered or
    unfinished index (repr-jax search), an index of a dense run. Every output goes to ``w``."""
    w = ["--workdir", str(tmp / "w"), "--no-progress"]
    coll = f"beir:{tmp / 'sp_coll'}"

    def splade(*more: str) -> list[str]:
        return ["train", "--config", str(tmp / "splade_cfg.py"), *w,
                *[a for m in more for a in ("--set", m)]]

    def expand(*source: str) -> list[str]:
        return ["expand", *source, "the cat sat"]

    def compare(*arms: str) -> list[str]:
        return ["compare", *arms, "--set", coll, "--no-progress"]

    rows = [
        Case("expand --init-from a BERT checkpoint with no MLM head",
             expand("--init-from", str(tmp / "headless"))),
        Case("splade encoder.init_from a BERT checkpoint with no MLM head",
             splade(f"encoder.init_from={tmp / 'headless'}")),
        Case("splade method.flops_query=-1", splade("method.flops_query=-1")),
        Case("splade method.flops_doc=-0.5", splade("method.flops_doc=-0.5")),
        Case("method.name=splade on mnist1d", ["train", *QUICK, *w, "--set",
                                               "method.name=splade"]),
        Case("method.name=splade on digits", ["train", "--config", "simclr_digits:quick", *w,
                                              "--set", "method.name=splade"]),
        Case("expand --workdir a biencoder run", expand("--workdir", str(tmp / "sp_dense"))),
        Case("expand --workdir a folder that is no run", expand("--workdir", str(tmp / "sp_coll"))),
        Case("compare rrf:bm25+bm25 over different query sets (a part's query texts altered, "
             "as tests/train/test_compare.py does)", compare("bm25", "rrf:bm25+bm25"),
             env={"PYTHONPATH": f"{tmp / 'sp_patch'}{os.pathsep}"
                                f"{Path(__file__).resolve().parents[1]}"}),
        Case("compare rrf:bm25 (one part)", compare("bm25", "rrf:bm25")),
        Case("compare convex:bm25+RUN of an image run",
             compare("bm25", f"convex:bm25+{tmp / 'sp_image'}")),
        Case("eval.evaluators=('sparse_retrieval',) of a biencoder run",
             ["train", "--config", str(tmp / "text_cfg.py"), *w, "--set",
              "eval.evaluators=('sparse_retrieval',)", "--set", f"eval.sets=('{coll}',)"]),
        Case("eval.fusion.parts=('dense','sparse') of a biencoder run",
             ["train", "--config", str(tmp / "text_cfg.py"), *w, "--set",
              "eval.evaluators=('fusion',)", "--set", "eval.fusion.parts=('dense','sparse')",
              "--set", f"eval.sets=('{coll}',)"]),
        Case("eval.fusion.parts=('sparse','bm25') of a biencoder run",
             ["train", "--config", str(tmp / "text_cfg.py"), *w, "--set",
              "eval.evaluators=('fusion',)", "--set", "eval.fusion.parts=('sparse','bm25')",
              "--set", f"eval.sets=('{coll}',)"]),
        Case("eval.fusion.parts=('dense','bm25') of a splade run",
             splade("eval.evaluators=('fusion',)", "eval.fusion.parts=('dense','bm25')")),
        Case("search an index whose weights.npy was truncated",
             ["search", str(tmp / "sp_index_cut"), "cat"]),
        Case("search an index whose documents.txt was edited",
             ["search", str(tmp / "sp_index_edited"), "cat"]),
        Case("search an index whose building was killed (no meta.json)",
             ["search", str(tmp / "sp_index_killed"), "cat"]),
        Case("index --workdir a biencoder run",
             ["index", str(tmp / "sp_docs.txt"), "--workdir", str(tmp / "sp_dense"), "--out",
              str(tmp / "w" / "ix"), "--no-progress"]),
    ]
    for r in rows:
        r.battery = 52
    return rows


def _kept_checkpoint(run: Path):
    def check(tmp: Path, err: str) -> str:
        moved = [p.name for p in run.iterdir() if p.name.startswith("checkpoints.")]
        return f"MOVED ASIDE: {moved}" if moved else "checkpoint left in place"
    return check


def readme_cases(tmp: Path) -> list[Case]:
    """Issue 49's battery: a switched method's kept value, first stages that are not one, checks
    on values (metric cut-offs, --max-len), line endings, empty texts, GGUF sizes, the wording of
    --data and of paths that are not files, and what a newcomer is told (cuts, drops, warmup)."""
    w = ["--workdir", str(tmp / "w")]
    run, ce, coll = str(tmp / "text_run"), str(tmp / "ce_run"), f"beir:{tmp / 'coll'}"
    text = ["train", "--config", str(tmp / "text_cfg.py"), *w, "--no-progress"]

    def train_on(source: str, *more: str) -> list[str]:
        return [*text, "--set", f"data.name={source}", *[a for m in more for a in ("--set", m)]]

    def eval_on(collection: str) -> list[str]:
        return ["eval", "--workdir", run, "--no-progress", "--set",
                f"eval.sets=('beir:{tmp / collection}',)"]

    def rerank_after(first: str) -> list[str]:
        return ["eval", "--workdir", ce, "--no-progress", "--set", "eval.rerank.depth=20",
                "--set", f"eval.rerank.first_stage={first}"]

    mine = ["mine", "--workdir", run, "--data", coll, "--no-progress"]
    rows = [
        Case("README reranker: method.name=cross_encoder after info_nce", [
            "train", "--config", "finetune_minilm_wordnet", *w, "--set",
            f"data.name=pairs:{tmp / 'pairs.jsonl'}", "--set", "method.name=cross_encoder",
            "--set", "method.negatives_per_query=2", "--print-config"],
            _said("reset to its default")),
        Case("which warmup wins, in --print-config", [
            "train", "--config", "finetune_minilm_wordnet", "--print-config"], _said("warmup:")),
        Case("eval.rerank.first_stage= the cross-encoder run itself", rerank_after(ce)),
        Case("eval.rerank.first_stage= an image run", rerank_after(str(tmp / "img_run"))),
        Case("compare --metrics ndcg@0", ["compare", run, "bm25", "--set", coll, "--metrics",
                                          "ndcg@0"]),
        Case("compare a cross-encoder run", ["compare", run, ce, "--set", coll]),
        Case("compare: a DEBUG:bm25s line", ["compare", "bm25", "bm25", "--set", coll],
             _not_said("DEBUG")),
        Case("compare minilm (the untrained start) as an arm", [
            "compare", run, "minilm", "--set", coll], _printed("minilm")),
        Case("mine --max-len 100000", [*mine, "--out", str(tmp / "m" / "out.jsonl"),
                                       "--max-len", "100000"]),
        Case("mine: how many pairs the filters dropped", [
            *mine, "--out", str(tmp / "m49" / "out.jsonl"), "--margin", "0.01"],
            _said("left out")),
        Case("pairs: CR-only line endings", train_on(f"pairs:{tmp / 'cr.jsonl'}")),
        Case("beir: CR-only line endings", eval_on("coll_cr")),
        Case("beir: a blank query text", eval_on("coll_emptyq")),
        Case("pairs: /dev/zero", train_on("pairs:/dev/zero")),
        Case("pairs: a FIFO", train_on(f"pairs:{tmp / 'fifo.jsonl'}"), timeout=60),
        Case("pairs: a dangling symlink", train_on(f"pairs:{tmp / 'dangling.jsonl'}")),
        Case("beir: a symlinked qrels file", eval_on("coll_link"), _not_said("alice")),
        Case("score --data a missing pairs: file", [
            "score", "--workdir", ce, "--data", f"pairs:{tmp / 'none.jsonl'}", "--out",
            str(tmp / "s" / "out.jsonl")]),
        Case("GGUF width 32, encoder.width=64", train_on(
            f"pairs:{tmp / 'pairs.jsonl'}", "encoder.name=decoder_lm",
            f"encoder.init_from={tmp / 'tiny.gguf'}", "encoder.width=64"), _recorded_width),
        Case("preparing pairs: says what it cut", train_on(f"pairs:{tmp / 'pairs.jsonl'}"),
             _said("prepared pairs:"), env={"REPR_JAX_DATA_DIR": str(tmp / "dd49")}),
        Case("export --help", ["export", "--help"], _help_towers),
    ]
    for r in rows:
        r.battery = 49
    return rows


def second_stage_cases(tmp: Path) -> list[Case]:
    """Issue 41's battery: rerank depths and first stages, teacher-score files, ColBERT and the
    cross-encoder on data they cannot read, score on a run that does not score pairs."""
    w = ["--workdir", str(tmp / "w")]

    def second(kind: str, *more: str) -> list[str]:
        return ["train", "--config", f"{tmp / 'second_cfg.py'}:{kind}", *w,
                *[a for m in more for a in ("--set", m)]]

    rows = [Case(what, argv) for what, argv in [
        ("eval.rerank.depth=5000, corpus of 600", second("colbert", "eval.rerank.depth=5000")),
        ("eval.rerank.first_stage a missing run", second(
            "colbert", f"eval.rerank.first_stage={tmp / 'no_such_run'}")),
        ("margin_mse on a file without scores", second(
            "margin", f"data.name=pairs:{tmp / 'pairs.jsonl'}")),
        ("margin_mse on a file with a score 'high'", second(
            "margin", f"data.name=pairs:{tmp / 'badscore.jsonl'}")),
        ("colbert on data without text", second("colbert_mlp")),
        ("cross_encoder on data without text", second("cross_encoder_mlp")),
        ("score --workdir a bi-encoder run", [
            "score", "--workdir", str(tmp / "text_run"), "--data",
            f"pairs:{tmp / 'pairs.jsonl'}", "--out", str(tmp / "m" / "scored.jsonl")]),
    ]]
    for r in rows:
        r.battery = 41
    return rows


def llm_cases(tmp: Path) -> list[Case]:
    """Issue 40's battery: decoder LLM weights, LoRA, attention and instruction settings."""
    w = ["--workdir", str(tmp / "w")]
    pairs = f"data.name=pairs:{tmp / 'pairs.jsonl'}"

    def decoder(weights: str, *more: str) -> list[str]:
        return ["train", "--config", str(tmp / "text_cfg.py"), *w, "--set", pairs, "--set",
                "encoder.name=decoder_lm", "--set", f"encoder.init_from={tmp / weights}",
                *[a for m in more for a in ("--set", m)]]

    rows = [Case(what, argv) for what, argv in [
        ("GGUF of another architecture (gpt2)", decoder("gpt2.gguf")),
        ("truncated GGUF", decoder("truncated.gguf")),
        ("a zip renamed .gguf", decoder("zip.gguf")),
        ("GGUF without a tokenizer", decoder("notok.gguf")),
        ("GGUF tensor of a type gguf cannot dequantise (Q8_1)", decoder("q81.gguf")),
        ("optim.lora_rank=64 > width 32", decoder("tiny.gguf", "optim.lora_rank=64")),
        ("optim.lora_targets=('qproj',)", decoder("tiny.gguf", "optim.lora_rank=4",
                                                  "optim.lora_targets=('qproj',)")),
        ("optim.lora_rank=8 on a cnn", ["train", *QUICK, *w, "--set", "optim.lora_rank=8"]),
        ("encoder.attention=bidirectonal", decoder("tiny.gguf",
                                                   "encoder.attention=bidirectonal")),
        ("data.query_prefix on data without text", ["train", *QUICK, *w, "--set",
                                                    "data.query_prefix='Query: '"]),
    ]]
    for r in rows:
        r.battery = 40
    return rows


def text_cases(tmp: Path) -> list[Case]:
    """Issue 38's battery: the text surfaces (pairs:, beir:, mine, fit) and the files they write."""
    w = ["--workdir", str(tmp / "w")]
    text = ["--config", str(tmp / "text_cfg.py")]
    run = str(tmp / "text_run")
    pairs = f"pairs:{tmp / 'pairs.jsonl'}"
    mine = ["mine", "--workdir", run, "--data", pairs, "--no-progress"]
    out = ["--out", str(tmp / "m" / "out.jsonl")]
    fit = ["fit", "--law", "power", "--x", "N", "--y", "loss", "--bootstrap", "20"]
    table = ["--table", str(tmp / "fit" / "results.csv")]
    ray = [*QUICK, "--grid", "seed=[0,1]", *w, "--executor", "ray", "--ray-address",
           "127.0.0.1:1"]

    def train_on(file: str) -> list[str]:
        return ["train", *text, *w, "--set", f"data.name=pairs:{tmp / file}"]

    def eval_on(collection: str) -> list[str]:
        return ["eval", "--workdir", run, "--no-progress", "--set",
                f"eval.sets=('beir:{tmp / collection}',)"]

    no_bars = {"TQDM_DISABLE": None}
    rows = [
        Case("mine --out is its --data file", [
            "mine", "--workdir", run, "--data", f"pairs:{tmp / 'victim.jsonl'}", "--out",
            str(tmp / "victim.jsonl"), "--no-progress"], _unchanged("victim.jsonl")),
        Case("mine --out RUN/config.json", [*mine, "--out", str(tmp / "victim_run" /
                                                                "config.json")],
             _unchanged("victim_run/config.json")),
        Case("fit --name ../../x", [*fit, *table, "--out", str(tmp / "fit" / "out"), "--name",
                                    "../../../escaped"], _written_outside),
        Case("fit --out an existing file", [*fit, *table, "--out", str(tmp / "afile")]),
        Case("nDCG with grades -1 (TREC junk)", eval_on("neg"), _ndcg_range),
        Case("qrels without a header, first score 1.0", eval_on("hdr"), _judgements("hdr", 45)),
        Case("every test grade -1", eval_on("allneg")),
        Case("pairs: a non-UTF-8 byte", train_on("bad_byte.jsonl")),
        Case("pairs: a Latin-1 file", train_on("latin1.jsonl")),
        Case("pairs: a gzipped file", train_on("pairs.jsonl.gz")),
        Case("pairs: a lone surrogate escape", train_on("surrogate.jsonl")),
        Case("pairs: a line without query", train_on("noquery.jsonl")),
        Case("method.negatives_per_query=100000", [*train_on("pairs.jsonl"), "--set",
                                                   "method.negatives_per_query=100000"],
             timeout=150),
        Case("mine --margin nan", [*mine, *out, "--margin", "nan"]),
        Case("mine --max-score nan", [*mine, *out, "--max-score", "nan"]),
        Case("mine --seed -1", [*mine, *out, "--seed", "-1", "--sampling", "random"]),
        Case("mine --out under a file", [*mine, "--out", str(tmp / "afile" / "out.jsonl")]),
        Case("mine: a file at <out>.cache", [*mine, "--out", str(tmp / "c" / "out.jsonl")]),
        Case("mine --workdir an image run", [
            "mine", "--workdir", str(tmp / "img_run"), "--data", pairs, *out, "--no-progress"],
            _absent("m/out.jsonl")),
        Case("mine --workdir a 1-D signal run", [
            "mine", "--workdir", str(tmp / "run"), "--data", pairs, *out, "--no-progress"],
            _absent("m/out.jsonl")),
        Case("sweep --max-retries -1", ["sweep", *ray, "--max-retries", "-1"]),
        Case("sweep --point-cpus -2", ["sweep", *ray, "--point-cpus", "-2"]),
        Case("study --point-gpus -1", ["study", "finetune_minilm_wordnet", *w, "--executor",
                                       "ray", "--ray-address", "127.0.0.1:1", "--point-gpus",
                                       "-1"]),
        Case("fit: x <= 0 for a power law", [*fit, "--table", str(tmp / "fit" / "zero.csv")]),
        Case("fit: a duplicate column name", [*fit, "--table", str(tmp / "fit" / "dup.csv")]),
        Case("fit --holdout-above nan", [*fit, *table, "--holdout-above", "nan"]),
        Case("eval.sets=('beir:',)", ["train", *text, *w, "--set", "eval.sets=('beir:',)"],
             cwd=tmp / "coll"),
        Case("--workdir under an unwritable path", ["train", *QUICK, "--workdir",
                                                    "/sys/repr_jax_run"]),
        Case("a symlinked <out>.cache", [*mine, "--out", str(tmp / "s" / "out.jsonl")],
             _empty("elsewhere")),
        Case("a symlinked BEIR token cache", eval_on("coll"), _empty("elsewhere2"),
             env={"REPR_JAX_DATA_DIR": str(tmp / "dd")}),
        Case("a symlinked preparation lock", ["train", *QUICK, *w, "--set", "train.steps=2"],
             _absent("lock_target"), env={"REPR_JAX_DATA_DIR": str(tmp / "dd2")}),
        Case("cached features replaced", [*mine, "--out", str(tmp / "r" / "out.jsonl")],
             _same_as("r/out.jsonl", "r/first.jsonl")),
        Case("mine --no-progress, run data not prepared", [*mine, *out], _bars,
             env={**no_bars, "REPR_JAX_DATA_DIR": str(tmp / "dd3")}),
        Case("an error after a progress bar", train_on("late_bad.jsonl"), _error_after_bar,
             env=no_bars),
        Case("a relative pairs: path, evaluated elsewhere",
             ["eval", "--workdir", str(tmp / "relrun"), "--no-progress"], cwd=Path("/")),
        Case("eval --dry-run on a beir: set", ["eval", "--workdir", run, "--dry-run", "--set",
                                              f"eval.sets=('beir:{tmp / 'coll'}',)"],
             _dry_run_sizes),
        Case("umask 022: a run's files", ["train", *QUICK, *w, "--set", "train.steps=2",
                                          "--no-progress"], _modes("w")),
    ]
    for r in rows:
        r.battery = 38
    return rows


# --------------------------------------------------------------------------------------------------
# What a case did (tmp, its stderr) -> a few words; "" when there is nothing to say
# --------------------------------------------------------------------------------------------------

def _digest(path: Path) -> str:
    """A file's SHA-1; a folder's over its files' relative paths and contents."""
    import hashlib
    if path.is_dir():
        h = hashlib.sha1()
        for p in sorted(q for q in path.rglob("*") if q.is_file()):
            h.update(str(p.relative_to(path)).encode() + b"\0" + p.read_bytes())
        return h.hexdigest()
    return hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def _unchanged(rel: str):
    def check(tmp: Path, err: str) -> str:
        return ("intact" if _digest(tmp / rel) == (tmp / f"{rel}.sha1").read_text()
                else f"{rel} OVERWRITTEN")
    return check


def _tree_unchanged(rel: str):
    def check(tmp: Path, err: str) -> str:
        return ("intact" if _digest(tmp / rel) == (tmp / f"{rel}.sha1").read_text()
                else f"{rel}/ CHANGED")
    return check


def _written_outside(tmp: Path, err: str) -> str:
    out = tmp / "fit" / "out"
    found = [p for p in [*tmp.rglob("*escaped*"), *tmp.parent.glob("*escaped*")]
             if out not in p.parents]
    for p in found:
        p.unlink()
    return (f"WROTE OUTSIDE --out: {', '.join(str(p.relative_to(tmp.parent)) for p in found)}"
            if found else "nothing outside --out")


def _eval_rows(run: Path) -> list[dict]:
    newest = max((run / "eval").glob("step_*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(newest.read_text())


def _ndcg_range(tmp: Path, err: str) -> str:
    try:
        rows = [r for r in _eval_rows(tmp / "text_run") if "beir_neg/ndcg@10" in r["metric"]]
    except (OSError, ValueError):
        return "no eval file"
    refs = json.loads((tmp / "text_run" / "eval" / "reference.json").read_text())
    rows += [r for r in (refs if isinstance(refs, list) else refs.get("rows", []))
             if "beir_neg/ndcg@10" in r.get("metric", "")]
    if not rows:
        return "no nDCG row"
    values = [r["value"] for r in rows]
    ok = all(0 <= v <= 1 for v in values)
    return (f"nDCG@10 {min(values):.3f} to {max(values):.3f}"
            + ("" if ok else " (OUTSIDE [0, 1])"))


def _judgements(name: str, expected: int):
    def check(tmp: Path, err: str) -> str:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from repr_jax.data import beir
        try:
            got = len(beir.read_collection(tmp / name).qrels["test"]["grade"])
        except ValueError as e:
            return f"read: {str(e)[:60]}"
        return f"{got} of {expected} judgements read" + ("" if got == expected else " (LOST)")
    return check


def _absent(rel: str):
    def check(tmp: Path, err: str) -> str:
        return f"WROTE {rel}" if (tmp / rel).exists() else "nothing written"
    return check


def _empty(rel: str):
    def check(tmp: Path, err: str) -> str:
        found = list((tmp / rel).rglob("*"))
        return f"WROTE {len(found)} files through the link" if found else "nothing through it"
    return check


def _same_as(a: str, b: str):
    def check(tmp: Path, err: str) -> str:
        if not (tmp / a).exists():
            return "nothing written"
        return ("same negatives as before" if _digest(tmp / a) == _digest(tmp / b)
                else "DIFFERENT negatives, silently" if "cached" not in err
                else "different negatives, warned")
    return check


def _said(text: str):
    def check(tmp: Path, err: str) -> str:
        said = [line for line in err.splitlines() if text in line]
        return said[0][:160] if said else f"NOT SAID: {text!r}"
    return check


def _not_said(text: str):
    def check(tmp: Path, err: str) -> str:
        return f"SAID {text!r}" if text in err else f"no {text!r} in its output"
    return check


def _printed(text: str):
    def check(tmp: Path, err: str) -> str:
        said = [line for line in (tmp / "stdout.txt").read_text().splitlines() if text in line]
        return said[0][:160] if said else f"NOT PRINTED: {text!r}"
    return check


def _recorded_width(tmp: Path, err: str) -> str:
    width = json.loads((tmp / "w" / "config.json").read_text())["encoder"]["width"]
    note = next((line for line in err.splitlines() if " taken" in line), "NO NOTE")
    return f"config.json records encoder.width={width}; {note[:120]}"


def _help_towers(tmp: Path, err: str) -> str:
    out = (tmp / "stdout.txt").read_text()
    return ("says 'first tower'" if "first tower" in out else
            "names encode_query/encode_document" if "encode_query" in out else "no word of towers")


def _bars(tmp: Path, err: str) -> str:
    return "BARS SHOWN" if ("it/s" in err or "/s]" in err) else "no bars"


def _error_after_bar(tmp: Path, err: str) -> str:
    for line in err.split("\n"):  # a terminal shows what follows the last carriage return
        if "error:" in line and not line.split("\r")[-1].startswith(("repr-jax:", "usage")):
            return "ERROR ON THE BAR'S LINE"
    return "error on a line of its own"


def _dry_run_sizes(tmp: Path, err: str) -> str:
    import re
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in
            (tmp / "stdout.txt").read_text().splitlines() if "retrieval" in ln]
    return ("; ".join(f"{r[1]} sized {r[2]} x {r[3]}" for r in rows) + " (corpus 600 x 40)"
            if rows else "no retrieval line")


def _modes(rel: str):
    def check(tmp: Path, err: str) -> str:
        modes = {}
        for p in (tmp / rel).rglob("*"):
            if p.is_file() and not p.is_symlink():
                modes.setdefault(oct(stat.S_IMODE(p.stat().st_mode)), []).append(p.name)
        return ", ".join(f"{m}: {len(v)} files" + (f" (e.g. {v[0]})" if m != "0o644" else "")
                         for m, v in sorted(modes.items()))
    return check


# --------------------------------------------------------------------------------------------------
# Preparing the files the cases read
# --------------------------------------------------------------------------------------------------

def _folder(tmp: Path, name: str, w: list[str]) -> list[str]:
    return ["train", "--config", "simclr_shapes:quick", *w, "--set",
            f"data.name=imagefolder:{tmp / name}", "--set", "train.batch_size=4"]


TEXT_CONFIG = '''\
from repr_jax import config as C


def get_config(arg=None):
    return C.Config(
        seed=0, data=C.DataConfig(name="pairs:{pairs}", max_len=24),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                              proj_dim=16),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), bootstrap=0))
'''


SECOND_CONFIG = '''\
from repr_jax import config as C


def get_config(arg=None):
    text = C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                           mlp_dim=64, depth=1)
    data = C.DataConfig(name="beir:{coll}", max_len=24)
    method = {{"colbert": C.MethodConfig(name="colbert", dim=8),
              "colbert_mlp": C.MethodConfig(name="colbert", dim=8),
              "cross_encoder_mlp": C.MethodConfig(name="cross_encoder"),
              "cross_encoder": C.MethodConfig(name="cross_encoder"),
              "margin": C.MethodConfig(name="biencoder", objective="margin_mse", proj_dim=0,
                                       negatives_per_query=1)}}[arg]
    if arg.endswith("_mlp"):
        data, text = C.DataConfig(name="latent_modalities"), C.EncoderConfig(name="mlp")
    return C.Config(
        seed=0, data=data, encoder=text, method=method,
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("rerank",), bootstrap=0,
                          sets=() if arg.endswith("_mlp") else ("beir:{coll}",)))
'''


def _pairs(n: int, start: int = 0) -> list[dict]:
    return [{"query": f"what is item {i}?", "positive": f"item {i} is a thing of kind {i % 7}",
             "negatives": [f"item {i + 1} is other", f"item {i + 2} differs"]}
            for i in range(start, start + n)]


def _lines(rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def _cli(argv: list[str], **kw) -> None:
    subprocess.run([sys.executable, "-m", "repr_jax.cli", *argv], check=True,
                   capture_output=True, env={**os.environ, "TQDM_DISABLE": "1"}, **kw)


def _prepare(tmp: Path, battery: int) -> None:
    if battery == 51:  # its own inputs only: the tiny GGUF, a store, an SAE and a decoder run
        _prepare_llm(tmp)
        _prepare_interp(tmp)
        return
    if battery == 52:  # its own inputs only: tiny BERT MLMs, a collection, two short runs
        _prepare_sparse(tmp)
        return
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for name, classes, readable in (("one", ("a",), True), ("half", ("a", "b"), False),
                                    ("junk", ("a", "b"), None)):
        for c in classes:
            (tmp / name / c).mkdir(parents=True)
            for i in range(12):
                path = tmp / name / c / f"{i}.png"
                good = readable or (readable is False and c == "a")
                if good:
                    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(path)
                else:
                    path.write_bytes(b"not an image")
    (tmp / "syntax.py").write_text("def get_config(arg=None):\n    x = 1 +\n")
    (tmp / "raises.py").write_text("def get_config(arg=None):\n    return {}['k']\n")
    (tmp / "afile").write_text("x")
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    (tmp / "full").mkdir()
    (tmp / "full" / "old.txt").write_text("x")
    _cli(["train", *QUICK, "--workdir", str(tmp / "run"), "--no-progress", "--set",
          "train.steps=2", "--set", "eval.evaluators=('knn',)", "--set",
          "eval.reference_rows=False"])
    if battery == 34:
        return
    _prepare_text(tmp)
    _prepare_llm(tmp)
    _prepare_interp(tmp)
    _prepare_sparse(tmp)


def _prepare_llm(tmp: Path) -> None:
    """The tiny decoder as GGUF files, good and broken (tests/tiny_llm.py writes them)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_llm import tiny_params, write_gguf, write_odd_gguf
    write_gguf(tmp / "tiny.gguf", tiny_params())
    write_gguf(tmp / "gpt2.gguf", tiny_params(), arch="gpt2")
    (tmp / "truncated.gguf").write_bytes((tmp / "tiny.gguf").read_bytes()[:5000])
    (tmp / "zip.gguf").write_bytes(b"PK\x03\x04" + bytes(100))
    write_odd_gguf(tmp / "notok.gguf", tokenizer=False, q8_1=False)
    write_odd_gguf(tmp / "q81.gguf")


def _prepare_text(tmp: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from repr_jax.data import beir
    rows = _pairs(400)
    (tmp / "pairs.jsonl").write_text(_lines(rows))
    (tmp / "text_cfg.py").write_text(TEXT_CONFIG.format(pairs=tmp / "pairs.jsonl"))
    shutil.copy(tmp / "pairs.jsonl", tmp / "victim.jsonl")
    (tmp / "victim.jsonl.sha1").write_text(_digest(tmp / "victim.jsonl"))
    (tmp / "bad_byte.jsonl").write_bytes(_lines(rows[:30]).encode() + b'{"query": "caf\xff", '
                                         b'"positive": "x"}\n')
    (tmp / "latin1.jsonl").write_bytes((_lines(rows[:30]) + json.dumps(
        {"query": "café au lait", "positive": "a drink"}, ensure_ascii=False) + "\n"
    ).encode("latin-1"))
    (tmp / "pairs.jsonl.gz").write_bytes(gzip.compress(_lines(rows).encode()))
    (tmp / "surrogate.jsonl").write_text(_lines(rows[:30]) + '{"query": "a \\ud800 b", '
                                         '"positive": "x"}\n')
    (tmp / "noquery.jsonl").write_text(_lines(rows[:30] + [{"positive": "x"}]))
    (tmp / "late_bad.jsonl").write_text(_lines(_pairs(5000)) + "{not json\n")
    env = {**os.environ, "TQDM_DISABLE": "1"}
    _cli(["train", "--config", str(tmp / "text_cfg.py"), "--workdir", str(tmp / "text_run"),
          "--no-progress"])
    shutil.copytree(tmp / "text_run", tmp / "victim_run")
    (tmp / "victim_run" / "config.json.sha1").write_text(_digest(tmp / "victim_run" /
                                                                 "config.json"))
    _cli(["train", "--config", "simclr_digits:quick", "--workdir", str(tmp / "img_run"),
          "--no-progress", "--set", "train.steps=2", "--set", "eval.evaluators=('knn',)",
          "--set", "eval.reference_rows=False"])
    (tmp / "rel").mkdir()
    shutil.copy(tmp / "pairs.jsonl", tmp / "rel" / "pairs.jsonl")
    _cli(["train", "--config", str(tmp / "text_cfg.py"), "--workdir", str(tmp / "relrun"),
          "--no-progress", "--set", "data.name=pairs:pairs.jsonl"], cwd=tmp / "rel")
    # collections: a clean one, one with TREC junk grades, one without a qrels header, all -1
    beir.synthetic_collection(tmp / "coll", num_docs=600, num_queries=40, num_train=200)
    (tmp / "second_cfg.py").write_text(SECOND_CONFIG.format(coll=tmp / "coll"))
    scored = [dict(r, positive_score=1.0, negative_scores=[0.5, 0.2]) for r in rows]
    scored[7]["negative_scores"] = ["high", 0.2]
    (tmp / "badscore.jsonl").write_text(_lines(scored))
    corpus = {f"d{i}": ("", f"item {i} is a thing of kind {i % 7}") for i in range(60)}
    queries = {f"q{i}": f"what is item {i}?" for i in range(15)}
    junk = [(f"q{i}", f"d{(i + j) % 60}", g) for i in range(15)
            for j, g in ((0, 2), (30, 2), (1, -1), (2, -1))]
    beir.write_collection(tmp / "neg", corpus, queries, {"test": junk})
    beir.write_collection(tmp / "hdr", corpus, queries, {"test": [
        (f"q{i}", f"d{(i + j) % 60}", 1) for i in range(15) for j in range(3)]})
    qrels = tmp / "hdr" / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()[1:]  # no header; the first score written 1.0
    lines[0] = lines[0].rsplit("\t", 1)[0] + "\t1.0"
    qrels.write_text("\n".join(lines) + "\n")
    beir.write_collection(tmp / "allneg", corpus, queries, {"test": [
        (f"q{i}", f"d{i}", -1) for i in range(15)]})
    # fit tables
    (tmp / "fit").mkdir()
    (tmp / "fit" / "results.csv").write_text("N,loss\n" + "".join(
        f"{n},{3 * n ** -0.3:.6f}\n" for n in (10, 30, 100, 300, 1000, 3000, 10000)))
    (tmp / "fit" / "zero.csv").write_text("N,loss\n" + "".join(
        f"{n},{3 * max(n, 1) ** -0.3:.6f}\n" for n in (0, -5, 100, 300, 1000, 3000, 10000)))
    (tmp / "fit" / "dup.csv").write_text("N,loss,loss\n" + "".join(
        f"{n},{3 * n ** -0.3:.6f},{n}\n" for n in (10, 30, 100, 300, 1000, 3000, 10000)))
    # a file where mine's cache folder goes; symlinks where caches and locks go
    (tmp / "c").mkdir()
    (tmp / "c" / "out.jsonl.cache").write_text("x")
    (tmp / "s").mkdir()
    (tmp / "elsewhere").mkdir()
    (tmp / "s" / "out.jsonl.cache").symlink_to(tmp / "elsewhere")
    (tmp / "dd").mkdir()
    (tmp / "elsewhere2").mkdir()
    (tmp / "dd" / "beir").symlink_to(tmp / "elsewhere2")
    (tmp / "dd2").mkdir()
    (tmp / "dd2" / ".mnist1d.prepare.lock").symlink_to(tmp / "lock_target")
    # mined once; then its cached features replaced by random arrays of the same shapes
    subprocess.run([sys.executable, "-m", "repr_jax.cli", "mine", "--workdir",
                    str(tmp / "text_run"), "--data", f"pairs:{tmp / 'pairs.jsonl'}", "--out",
                    str(tmp / "r" / "out.jsonl"), "--no-progress"], check=True,
                   capture_output=True, env=env)
    shutil.copy(tmp / "r" / "out.jsonl", tmp / "r" / "first.jsonl")
    import numpy as np
    rng = np.random.default_rng(1)
    for npz in (tmp / "r").rglob("*.npz"):
        with np.load(npz) as z:
            arrays = {k: rng.normal(size=z[k].shape).astype(z[k].dtype) for k in z.files}
        with open(npz, "wb") as f:
            np.savez(f, **arrays)
    _prepare_readme(tmp, rows)
    _prepare_sae(tmp)


def _prepare_sae(tmp: Path) -> None:
    """Issue 50's inputs: layer-0 stores of the text run and of a wider one, an SAE trained on a
    store that is then rewritten at the other width, a store with a flipped byte."""
    pairs = f"pairs:{tmp / 'pairs.jsonl'}"
    _cli(["train", "--config", str(tmp / "text_cfg.py"), "--workdir", str(tmp / "text48"),
          "--no-progress", "--set", "encoder.width=48"])
    for run, store in (("text_run", "store32"), ("text48", "store48")):
        _cli(["activations", "--workdir", str(tmp / run), "--layer", "0", "--data", pairs,
              "--out", str(tmp / store), "--no-progress"])
    shutil.copytree(tmp / "store32", tmp / "swapped")
    _cli(["train", *QUICK, "--workdir", str(tmp / "sae_run"), "--no-progress", "--set",
          "method.name=sae", "--set", f"data.name=activations:{tmp / 'swapped'}", "--set",
          "train.steps=3", "--set", "method.latents=64", "--set", "method.k=8", "--set",
          "eval.sae.downstream=False"])
    shutil.rmtree(tmp / "swapped")
    shutil.copytree(tmp / "store48", tmp / "swapped")
    shutil.copytree(tmp / "store32", tmp / "tampered")
    with open(tmp / "tampered" / "vectors.npy", "r+b") as f:
        f.seek(-7, os.SEEK_END)
        byte = f.read(1)
        f.seek(-7, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))


def _prepare_interp(tmp: Path) -> None:
    """Issue 51's inputs: layer 1 of the tiny GGUF written as a store, a TopK SAE (64 latents)
    trained 3 steps on it, a decoder_lm biencoder run (2 steps), prompts (UTF-8 and Latin-1),
    directions of the model's width and of one more, and a folder of other files."""
    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_llm import TINY
    pairs = tmp / "llm_pairs.jsonl"
    pairs.write_text(_lines(_pairs(60)))
    (tmp / "llm_cfg.py").write_text(TEXT_CONFIG.format(pairs=pairs))
    _cli(["activations", "--init-from", str(tmp / "tiny.gguf"), "--layer", "1", "--data",
          f"pairs:{pairs}", "--out", str(tmp / "llm_store"), "--max-len", "16",
          "--no-progress"])
    _cli(["train", *QUICK, "--workdir", str(tmp / "llm_sae"), "--no-progress", "--set",
          "method.name=sae", "--set", f"data.name=activations:{tmp / 'llm_store'}", "--set",
          "train.steps=3", "--set", "method.latents=64", "--set", "method.k=8", "--set",
          "eval.evaluators=()"])
    _cli(["train", "--config", str(tmp / "llm_cfg.py"), "--workdir", str(tmp / "llm_run"),
          "--no-progress", "--set", "encoder.name=decoder_lm", "--set",
          f"encoder.init_from={tmp / 'tiny.gguf'}", "--set", "eval.evaluators=()"])
    (tmp / "prompts.txt").write_text("the thing\na cat sat on the\nhello\nthen there\n",
                                     encoding="utf-8")
    (tmp / "latin1.txt").write_bytes("the caf\xe9 was\nhello\n".encode("latin-1"))
    np.save(tmp / "ones.npy", np.ones(TINY["width"], np.float32))
    np.save(tmp / "wide.npy", np.ones(TINY["width"] + 1, np.float32))
    (tmp / "foreign").mkdir()
    (tmp / "foreign" / "notes.txt").write_text("mine\n")
    for rel in ("foreign", "llm_store"):
        (tmp / f"{rel}.sha1").write_text(_digest(tmp / rel))


SPLADE_CONFIG = '''\
from repr_jax import config as C


def get_config(arg=None):
    return C.Config(
        seed=0, data=C.DataConfig(name="pairs:{pairs}", max_len=16, tokenizer="{mlm}/vocab.txt"),
        encoder=C.EncoderConfig(name="text_transformer", width=8, depth=2, num_heads=2,
                                mlp_dim=16, init_from="{mlm}"),
        method=C.MethodConfig(name="splade"),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("sparse_retrieval",), bootstrap=0))
'''

# compare's _rankings with the second part's first query text changed: two parts that answer
# different queries (what tests/train/test_compare.py does by monkeypatching)
ALTERED_QUERIES = '''\
import dataclasses

import repr_jax.train.compare as cmp

_real, _calls = cmp._rankings, []


def _altered(name, sets, depth):
    out = _real(name, sets, depth)
    _calls.append(name)
    if len(_calls) == 2:
        out = {{k: (dataclasses.replace(r, queries=("another",) + r.queries[1:]), q)
               for k, (r, q) in out.items()}}
    return out


cmp._rankings = _altered
'''


def _prepare_sparse(tmp: Path) -> None:
    """Issue 52's inputs: a tiny random BERT masked LM and one without its MLM head
    (tests/tiny_mlm.py), pairs in its words and a splade config on them, a small BEIR collection,
    a 2-step biencoder run, a 2-step image run, and the sitecustomize that alters a fusion part's
    queries."""
    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tiny_mlm import WORDS, write_mlm

    from repr_jax.data import beir
    from repr_jax.encoders.mlm import HEAD_TENSORS
    write_mlm(tmp / "mlm")
    write_mlm(tmp / "headless", drop=HEAD_TENSORS)
    rng = np.random.default_rng(0)
    words = [x for x in WORDS if x.isalpha()]
    (tmp / "sp_pairs.jsonl").write_text(_lines(
        {"query": " ".join(q), "positive": " ".join([*q, *rng.choice(words, 3)])}
        for q in (rng.choice(words, 3) for _ in range(64))))
    (tmp / "splade_cfg.py").write_text(SPLADE_CONFIG.format(pairs=tmp / "sp_pairs.jsonl",
                                                            mlm=tmp / "mlm"))
    beir.synthetic_collection(tmp / "sp_coll", num_docs=60, num_queries=12, seed=2)
    if not (tmp / "text_cfg.py").exists():  # battery 52 alone (else _prepare_text's)
        (tmp / "pairs.jsonl").write_text(_lines(_pairs(200)))
        (tmp / "text_cfg.py").write_text(TEXT_CONFIG.format(pairs=tmp / "pairs.jsonl"))
    _cli(["train", "--config", str(tmp / "text_cfg.py"), "--workdir", str(tmp / "sp_dense"),
          "--no-progress", "--set", "eval.evaluators=()"])
    _cli(["train", *QUICK, "--workdir", str(tmp / "sp_image"), "--no-progress", "--set",
          "train.steps=2", "--set", "eval.evaluators=()"])
    (tmp / "sp_patch").mkdir()
    (tmp / "sp_patch" / "sitecustomize.py").write_text(ALTERED_QUERIES.format())
    (tmp / "sp_docs.txt").write_text(_lines(" ".join(rng.choice(words, 6)) for _ in range(30)))
    for name in ("sp_index_cut", "sp_index_edited", "sp_index_killed"):
        _cli(["index", str(tmp / "sp_docs.txt"), "--init-from", str(tmp / "mlm"), "--out",
              str(tmp / name), "--no-progress"])
    weights = tmp / "sp_index_cut" / "weights.npy"
    weights.write_bytes(weights.read_bytes()[:-4])
    (tmp / "sp_index_edited" / "documents.txt").write_text("another text\n")
    (tmp / "sp_index_killed" / "meta.json").unlink()


def _prepare_readme(tmp: Path, rows: list[dict]) -> None:
    """Issue 49's inputs: a cross-encoder run, CR-only files, a blank query, a FIFO, a dangling
    link and a symlinked qrels file."""
    _cli(["train", "--config", f"{tmp / 'second_cfg.py'}:cross_encoder", "--workdir",
          str(tmp / "ce_run"), "--no-progress"])
    (tmp / "cr.jsonl").write_bytes(_lines(rows).replace("\n", "\r").encode())
    shutil.copytree(tmp / "coll", tmp / "coll_cr")
    for f in (tmp / "coll_cr").rglob("*.*"):
        f.write_bytes(f.read_bytes().replace(b"\n", b"\r"))
    shutil.copytree(tmp / "coll", tmp / "coll_emptyq")
    queries = (tmp / "coll_emptyq" / "queries.jsonl").read_text().splitlines()
    queries[2] = json.dumps({"_id": json.loads(queries[2])["_id"], "text": "  "})
    (tmp / "coll_emptyq" / "queries.jsonl").write_text("\n".join(queries) + "\n")
    os.mkfifo(tmp / "fifo.jsonl")
    (tmp / "dangling.jsonl").symlink_to(tmp / "nowhere.jsonl")
    shutil.copytree(tmp / "coll", tmp / "coll_link")
    (tmp / "secret.tsv").write_text("user\tpassword\tuid\nalice\thunter2\t1000\n")
    (tmp / "coll_link" / "qrels" / "test.tsv").unlink()
    (tmp / "coll_link" / "qrels" / "test.tsv").symlink_to(tmp / "secret.tsv")


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------

def run(case: Case, tmp: Path) -> dict:
    shutil.rmtree(tmp / "w", ignore_errors=True)
    cmd = [sys.executable, "-m", "repr_jax.cli", *case.argv]
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(Path(__file__).resolve()
                                                                .parents[1])}
    for k, v in case.env.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    if case.what.startswith("--print-config"):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.close()  # the reader leaves before the output comes
        err, rc = proc.stderr.read(), proc.wait()
    else:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=case.timeout,
                                  env=env, cwd=case.cwd, errors="replace")
            err, rc = proc.stderr, proc.returncode
            (tmp / "stdout.txt").write_text(proc.stdout)
        except subprocess.TimeoutExpired:
            err, rc = f"(killed after {case.timeout} s)", "killed"
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    said = [line for line in lines if "error:" in line] or lines[-1:] or ["(nothing)"]
    return {"case": case.what, "exit": rc, "line": said[-1][:160], "lines": len(lines),
            "traceback": "Traceback" in err, "left": (tmp / "w").exists(),
            "did": case.check(tmp, err) if case.check else ""}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", type=lambda t: {int(n) for n in t.split(",")}, default=set(),
                   help="run these cases only (1-based, comma-separated)")
    p.add_argument("--battery", type=int, choices=(34, 38, 40, 41, 49, 50, 51, 52), default=0,
                   help="one battery only (default: both)")
    args = p.parse_args(argv)
    os.umask(0o022)
    with tempfile.TemporaryDirectory(prefix="repr_jax_bad_") as t:
        tmp = Path(t)
        all_cases = cases(tmp)
        chosen = [(i, c) for i, c in enumerate(all_cases, 1)
                  if (not args.case or i in args.case)
                  and (not args.battery or c.battery == args.battery)]
        print("preparing the inputs (a few trained runs)...", file=sys.stderr, flush=True)
        batteries = {c.battery for _, c in chosen}
        _prepare(tmp, 34 if batteries == {34} else 51 if batteries == {51} else
                 52 if batteries == {52} else 38)
        rows = []
        for i, case in chosen:
            rows.append(dict(run(case, tmp), number=i))
            r = rows[-1]
            print(f"{i:2d} {case.what}: exit {r['exit']}, {r['line']} {r['did']}",
                  file=sys.stderr, flush=True)
    print("| # | case | exit | traceback | run folder left | what it says | what it did |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    yes = {True: "yes", False: "no"}
    for r in rows:
        text = r["line"].replace("|", "\\|")
        print(f"| {r['number']} | {r['case']} | {r['exit']} | {yes[r['traceback']]} | "
              f"{yes[r['left']]} | {text} | {r['did']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
