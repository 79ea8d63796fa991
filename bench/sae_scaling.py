"""TopK sparse autoencoders over dictionary size x k on WordNet glosses, and Gao et al. 2024's joint
law of normalised MSE in latents n and k (issue 50, "Inside the representations I").

    python bench/sae_scaling.py --workdir runs/sae_scaling                  # MiniLM layer 3
    python bench/sae_scaling.py --workdir runs/sae_scaling --smollm2        # and SmolLM2 layer 15
    python bench/sae_scaling.py --workdir /tmp/sae_small --synsets 1000 --latents 128,256,512 \
        --k 4,8,16 --steps 40 --batch-size 512 --bootstrap 200              # a check in minutes

The defaults are the run recorded in bench/README.md (2026-12-05, 68 min on 2 shared cores with
``--smollm2``). What it does, each stage skipped when its output is there (a rerun resumes; every
file is written atomically, through :mod:`repr_jax.files`):

1. ``glosses_<S>.jsonl``: a pairs file of ``S`` WordNet synsets (a fixed permutation, seed 0, of
   the synsets with a definition): ``{"query": definition, "positive": "lemma, lemma, ..."}``.
2. Activation stores (``repr-jax activations``, itself resumable): MiniLM's layer 3
   (``--init-from minilm``) and, with ``--smollm2``, SmolLM2-135M-Instruct's layer
   ``--smollm2-layer`` over the first ``--smollm2-synsets`` synsets (a separate, smaller file: a
   135M decoder writes 60-120 vectors/s on 2 shared cores), without each text's first token
   and the vectors above 10x the median norm (the command's defaults for a decoder: attention
   sinks, whose norms of ~25,000 against ~184 would leave an SAE nothing else to fit). SmolLM2's
   store reads a ``repr-jax train`` run of it whose one step changes nothing
   (``optim.freeze=('*',)``):
   ``stores/smollm2_host`` (written before ``--init-from smollm2`` existed; kept so that the
   recorded run resumes).
3. Per model, a sweep (:func:`repr_jax.scaling.run_sweep`: one process a point; a failed point is
   recorded and the others go on, and ``--retry-failed`` reruns it from its last checkpoint) of
   TopK SAEs over ``--latents`` x ``--k``, AuxK on at Gao et al.'s weight 1/32. The largest
   dictionary is also spliced into its model (nDCG@10 of the glosses' definition -> lemma
   retrieval, and for SmolLM2 next-token cross-entropy: clean / spliced / zero-ablated, and the
   share recovered); for SmolLM2 only at ``--smollm2-downstream-k`` (each splice a few minutes
   here). A second sweep trains the largest dictionary at every k with AuxK off, for the
   dead-latent comparison.
4. The law (``sae_topk``: ``L(n, k) = exp(alpha + beta_k log k + beta_n log n + gamma log k log n)
   + exp(zeta + eta log k)``) fitted to each model's final test-split FVU (normalised MSE) with
   the project's fitter (sum-Huber on log residuals, the default start grid) and bootstrap
   (percentile intervals), with the law's local slopes in n and k beside the points' own; then
   ``table.md`` (printed) and ``fit_<model>.json``.

Cost: the stores ``O(texts x tokens x model)``; each SAE ``O(steps x batch x D x L)`` (~3,500
vectors/s at L = 4,096, D = 384 on the 2 idle cores, bench/README.md); a fit with 2,000
resamples ~20 s. Gao et al.'s fitted coefficients are not quoted here: they were not found in a
source this project could check (see ``repr_jax.scaling.laws.SAE_TOPK``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from repr_jax import config as config_lib
from repr_jax import files

MODELS = {  # name: title
    "minilm": "all-MiniLM-L6-v2",
    "smollm2": "SmolLM2-135M-Instruct",
}
AUX_K_COEFFICIENT = 1 / 32  # Gao et al. 2024's AuxK weight


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="where everything is written (resumes)")
    p.add_argument("--synsets", type=int, default=10000,
                   help="WordNet synsets in MiniLM's pairs file (10,000: 212,526 token vectors)")
    p.add_argument("--latents", type=_ints, default=[512, 1024, 2048, 4096])
    p.add_argument("--k", type=_ints, default=[8, 16, 32, 64])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--dead-window", type=int, default=50,
                   help="method.dead_feature_window: steps without firing before AuxK counts a "
                        "latent dead")
    p.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M (slow on CPU)")
    p.add_argument("--smollm2-layer", type=int, default=15)
    p.add_argument("--smollm2-synsets", type=int, default=1500)
    p.add_argument("--smollm2-steps", type=int, default=100, help="0: --steps")
    p.add_argument("--smollm2-downstream-k", type=_ints, default=[8, 32, 64],
                   help="the k whose largest dictionary is spliced into SmolLM2 (each splice "
                        "costs ~3-5 min on 2 cores)")
    p.add_argument("--only", default="", help="comma-separated models (default: minilm, and "
                                              "smollm2 with --smollm2)")
    p.add_argument("--jobs", type=int, default=1, help="sweep points trained at once")
    p.add_argument("--retry-failed", action="store_true",
                   help="run the points that failed before again (from their last checkpoint)")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the fit")
    return p.parse_args(argv)


def _cli(*args: str) -> None:
    """``repr-jax ARGS`` in a process of its own (its memory is returned when it ends)."""
    cmd = [sys.executable, "-m", "repr_jax.cli", *args]
    print("+ repr-jax " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True)


# --------------------------------------------------------------------------------------------------
# 1-2. Glosses and activation stores
# --------------------------------------------------------------------------------------------------

def write_glosses(path: Path, synsets: int, seed: int = 0) -> Path:
    """The pairs file of ``synsets`` WordNet glosses (definition -> its lemmas); left alone when
    it already holds exactly these lines."""
    from repr_jax.data.builders import read_wordnet
    all_synsets = sorted((s for s in read_wordnet() if s["definition"]),
                         key=lambda s: s["offset"])
    order = np.random.default_rng(seed).permutation(len(all_synsets))[:synsets]
    text = "".join(json.dumps({"query": all_synsets[i]["definition"],
                               "positive": ", ".join(all_synsets[i]["lemmas"])}) + "\n"
                   for i in order)
    if not (path.exists() and path.read_text() == text):
        files.write_text(path, text)
    return path


def smollm2_host(workdir: Path, pairs: Path) -> Path:
    """A ``decoder_lm`` run of SmolLM2 whose one step trains nothing: what ``repr-jax
    activations --workdir`` and the splice read the model from."""
    host = workdir / "stores" / "smollm2_host"
    done = host / "host_done.json"
    if not done.exists():
        _cli("train", "--config", "biencoder_wordnet", "--workdir", str(host), "--no-progress",
             "--set", f"data.name=pairs:{pairs}", "--set", "encoder.name=decoder_lm",
             "--set", "encoder.init_from=smollm2", "--set", "data.max_len=64",
             "--set", "optim.freeze=('*',)", "--set", "optim.weight_decay=0",
             "--set", "train.steps=1", "--set", "train.batch_size=2",
             "--set", "train.num_devices=1", "--set", "eval.evaluators=()",
             "--set", "eval.sets=()", "--set", "eval.reference_rows=False",
             "--set", "eval.bootstrap=0")
        files.write_json(done, {"pairs": str(pairs)})
    return host


def store(workdir: Path, model: str, pairs: Path, layer: int) -> Path:
    """The activation store of ``model``'s ``layer`` over ``pairs`` (resumed or verified by
    ``repr-jax activations`` itself)."""
    out = workdir / "stores" / f"{model}_l{layer}"
    source = (["--init-from", "minilm"] if model == "minilm"
              else ["--workdir", str(smollm2_host(workdir, pairs))])
    if not (out / "meta.json").exists():
        _cli("activations", *source, "--layer", str(layer), "--data", f"pairs:{pairs}",
             "--out", str(out), "--no-progress")
    return out


# --------------------------------------------------------------------------------------------------
# 3. The sweeps
# --------------------------------------------------------------------------------------------------

def base_config(acts: Path, args, *, steps: int, decoder: bool):
    """The SAE run every point starts from, as ``repr-jax train --set`` overrides."""
    sets = [f"data.name=activations:{acts}", "method.name=sae", "method.activation=topk",
            "method.b_dec_init=mean", "method.scale_inputs=True",
            f"method.aux_k_coefficient={AUX_K_COEFFICIENT!r}",
            f"method.dead_feature_window={args.dead_window}",
            f"optim.lr={args.lr!r}", "optim.weight_decay=0", "optim.warmup_fraction=0.05",
            f"train.steps={steps}", f"train.batch_size={args.batch_size}",
            f"train.ckpt_every={max(1, steps // 2)}", "train.log_every=25",
            "train.num_devices=1", "eval.evaluators=('sae',)", "eval.sets=()",
            "eval.reference_rows=False", "eval.bootstrap=200"]
    if decoder:  # four SmolLM2 passes per mode and text: keep the downstream sample small
        sets += ["eval.sae.max_queries=50", "eval.sae.max_corpus=200", "eval.sae.max_texts=100"]
    return config_lib.override(config_lib.load("simclr_mnist1d"), sets), sets


def sweeps(acts: Path, args, *, steps: int, decoder: bool):
    """``{"grid": Sweep, "auxk_off": Sweep}``: latents x k (the largest latents spliced
    downstream at the k of ``downstream_k``), and the largest latents at every k without
    AuxK."""
    from repr_jax.scaling import Sweep
    base, sets = base_config(acts, args, steps=steps, decoder=decoder)
    top = max(args.latents)
    spliced = set(args.k if not decoder or args.smollm2_downstream_k is None
                  else args.smollm2_downstream_k)
    grid = Sweep(base=base, grid={("method.latents", "method.k", "eval.sae.downstream"): [
        (n, k, n == top and k in spliced) for n in args.latents for k in args.k]})
    off = Sweep(base=base, overrides=[f"method.latents={top}", "method.aux_k_coefficient=0.0",
                                      "eval.sae.downstream=False"],
                grid={"method.k": args.k})
    return {"grid": grid, "auxk_off": off}, sets


def final_rows(rows):
    """The finished points' final-step rows (a failed point's row says why, and is kept)."""
    return [r for r in rows if r.get("final") or r.get("status") != "finished"]


# --------------------------------------------------------------------------------------------------
# 4. The fit and the table
# --------------------------------------------------------------------------------------------------

def fit(rows, *, resamples: int) -> dict | None:
    """Gao et al.'s law on ``rows``' (latents, k, FVU): parameters with bootstrap SEs and 95%
    intervals, as ``repr-jax fit`` writes them; None with fewer points than parameters + 1."""
    import warnings

    from repr_jax.scaling import bootstrap, fit_law, get_law
    from repr_jax.scaling.table import fit_warnings
    ok = [r for r in rows if r.get("status") == "finished" and r.get("sae/fvu") is not None
          and math.isfinite(r["sae/fvu"]) and r["sae/fvu"] > 0]
    law = get_law("sae_topk")
    if len(ok) < len(law.params) + 1:
        return None
    inputs = {"n": np.asarray([r["method.latents"] for r in ok], np.float64),
              "k": np.asarray([r["method.k"] for r in ok], np.float64)}
    y = np.asarray([r["sae/fvu"] for r in ok], np.float64)
    f = fit_law(law, inputs, y)
    with warnings.catch_warnings(record=True):  # counted in `failed` and the warnings below
        warnings.simplefilter("always")
        # Six parameters on 16 points leave flat directions (the irreducible term): at the
        # default 50 Newton steps most refits stop short (1,563 of 2,000 on MiniLM at 200 steps,
        # 3 of 500 at 1,000), and the intervals of the few that converge are too narrow.
        b = bootstrap(law, inputs, y, n=resamples, seed=0, start=f, max_iters=1000)
    slopes = local_exponents(f.theta, b.thetas, sorted(set(inputs["n"])),
                             sorted(set(inputs["k"])))
    return {"law": law.name, "source": law.source, "points": len(y), "local_exponents": slopes,
            "objective": f.objective, "starts_in_best_basin": f.starts_in_best_basin,
            "num_starts": f.num_starts, "bootstrap_resamples": resamples,
            "bootstrap_failed": b.failed,
            "params": {k: {"value": v, "se": b.se[k], "low": b.low[k], "high": b.high[k]}
                       for k, v in f.params.items()},
            "max_abs_log_residual": float(np.abs(f.residuals).max()),
            "warnings": fit_warnings(f, b, len(y), resamples)}


def local_exponents(theta, thetas_Bx6, latents, ks) -> dict[str, dict[str, list[float]]]:
    """What the fitted law says the data do, where they are: ``d log L / d log n`` at each k
    (at the geometric middle of ``latents``) and ``d log L / d log k`` at each n (the middle of
    ``ks``), at the fit (``value``) and the 2.5 / 97.5 percentiles over the bootstrap refits.
    The six parameters trade off against each other; these slopes are what the points fix."""
    def slopes(t_Bx6):
        a, bk, bn, g, z, e = (t_Bx6[:, i:i + 1] for i in range(6))
        mid_n, mid_k = np.mean(np.log(latents)), np.mean(np.log(ks))
        out = {}
        for name, ln, lk in (("n", mid_n, np.log(ks)), ("k", np.log(latents), mid_k)):
            ln, lk = np.broadcast_arrays(ln, lk)
            t1, t2 = np.exp(a + bk * lk + bn * ln + g * lk * ln), np.exp(z + e * lk)
            share = t1 / (t1 + t2)
            out[name] = (share * (bn + g * lk) if name == "n"
                         else share * (bk + g * ln) + (1 - share) * e)
        return out
    at, boot = slopes(np.asarray(theta, np.float64)[None]), slopes(np.asarray(thetas_Bx6))
    return {name: {"at": [float(v) for v in (ks if name == "n" else latents)],
                   "value": [float(v) for v in at[name][0]],
                   "low": [float(v) for v in np.percentile(boot[name], 2.5, axis=0)],
                   "high": [float(v) for v in np.percentile(boot[name], 97.5, axis=0)]}
            for name in ("n", "k")}


def observed_exponents(grid_rows, latents, ks) -> dict[str, list[float]]:
    """Least-squares slopes of log FVU against log n at each k, and against log k at each n,
    from the points alone (NaN where fewer than two finished)."""
    fvu = {(r["method.latents"], r["method.k"]): r.get("sae/fvu") for r in grid_rows
           if r.get("status") == "finished" and "method.latents" in r}

    def slope(pairs):
        pairs = [(x, v) for x, v in pairs if v is not None and v > 0]
        if len(pairs) < 2:
            return math.nan
        x, v = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
        return float(np.polyfit(x, v, 1)[0])
    return {"n": [slope([(n, fvu.get((n, k))) for n in latents]) for k in ks],
            "k": [slope([(k, fvu.get((n, k))) for k in ks]) for n in latents]}


def _fmt(row, key: str, digits: int = 3) -> str:
    if row is None:
        return "—"
    if row.get("status") != "finished":
        return "failed"
    v = row.get(key)
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    text = f"{v:.{digits}f}"
    lo, hi = row.get(f"{key}.ci_low"), row.get(f"{key}.ci_high")
    if lo is not None and hi is not None:
        text += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return text


def model_table(title: str, meta: dict, grid_rows, off_rows, result, args,
                steps: int) -> str:
    """The markdown of one model: FVU per (latents, k), dead fraction with and without AuxK,
    what the largest dictionary keeps downstream per k, and the fit."""
    at = {(r["method.latents"], r["method.k"]): r for r in grid_rows if "method.latents" in r}
    off = {r["method.k"]: r for r in off_rows if "method.k" in r}
    top = max(args.latents)
    train = next((r.get("train_examples") for r in grid_rows if r.get("train_examples")), None)
    lines = [f"### {title}, layer {meta['layer']}", "",
             f"{meta['vectors']:,} vectors of width {meta['width']} from {meta['examples']:,} "
             f"texts ({f'{train:,}' if train else '?'} in the train split). "
             f"TopK SAEs, {steps} steps x {args.batch_size} vectors, lr {args.lr:g}, AuxK "
             f"{AUX_K_COEFFICIENT:g} (dead after {args.dead_window} steps silent). Test-split "
             f"FVU (normalised MSE) with 95% bootstrap intervals:", "",
             "| k \\ latents | " + " | ".join(f"{n:,}" for n in args.latents) + " |",
             "| --- |" + " --- |" * len(args.latents)]
    for k in args.k:
        lines.append(f"| {k} | " + " | ".join(_fmt(at.get((n, k)), "sae/fvu", 4)
                                             for n in args.latents) + " |")
    lines += ["", f"Dead latents (silent on every test vector) at {top:,} latents, and what "
              f"splicing its reconstruction into the model keeps:", ""]
    ce = any(r.get("sae/ce_clean") is not None for r in grid_rows)
    head = ["k", "dead, AuxK 1/32", "dead, no AuxK", "FVU no AuxK", "nDCG@10 clean",
            "spliced", "zero-ablated", "recovered"]
    if ce:
        head += ["CE clean", "CE spliced", "CE zero-abl.", "CE recovered"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for k in args.k:
        r, o = at.get((top, k)), off.get(k)
        cells = [str(k), _fmt(r, "sae/dead_fraction"), _fmt(o, "sae/dead_fraction"),
                 _fmt(o, "sae/fvu", 4), _fmt(r, "sae/ndcg@10_clean"),
                 _fmt(r, "sae/ndcg@10_spliced"), _fmt(r, "sae/ndcg@10_zero_ablation"),
                 _fmt(r, "sae/ndcg@10_recovered")]
        if ce:
            cells += [_fmt(r, "sae/ce_clean"), _fmt(r, "sae/ce_spliced"),
                      _fmt(r, "sae/ce_zero_ablation"), _fmt(r, "sae/ce_recovered")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if result is None:
        lines.append("No fit: fewer finished points than the law has parameters + 1.")
    else:
        lines += [f"Gao et al.'s law fitted to the {result['points']} FVUs ({result['law']}; "
                  f"{result['starts_in_best_basin']} of {result['num_starts']} starts in the "
                  f"best basin; largest |log residual| {result['max_abs_log_residual']:.3f}; "
                  f"{result['bootstrap_resamples']:,} bootstrap resamples, "
                  f"{result['bootstrap_failed']} failed):", "",
                  "| parameter | fitted | SE | 95% interval | Gao et al. 2024 |",
                  "| --- | --- | --- | --- | --- |"]
        for k, p in result["params"].items():
            lines.append(f"| {k} | {p['value']:.4f} | {p['se']:.4f} | [{p['low']:.4f}, "
                         f"{p['high']:.4f}] | not found here |")
        lines += [""] + [f"Warning: {w}" for w in result["warnings"]]
        seen = observed_exponents(grid_rows, args.latents, args.k)
        le = result["local_exponents"]
        lines += ["", "Local exponents: the fitted law's slope (95% bootstrap interval) beside "
                  "the points' own least-squares slope:", "",
                  "| slope | at | law | interval | points |", "| --- | --- | --- | --- | --- |"]
        for name, other in (("n", "k"), ("k", "n")):
            for i, at in enumerate(le[name]["at"]):
                lines.append(f"| d log FVU / d log {name} | {other} = {at:,.0f} | "
                             f"{le[name]['value'][i]:.3f} | [{le[name]['low'][i]:.3f}, "
                             f"{le[name]['high'][i]:.3f}] | {seen[name][i]:.3f} |")
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    args = parse_args(argv)
    from repr_jax.scaling import run_sweep
    from repr_jax.scaling.sweep import collect
    workdir = Path(args.workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    models = [m for m in (args.only.split(",") if args.only else
                          ["minilm"] + (["smollm2"] if args.smollm2 else [])) if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise SystemExit(f"--only: unknown models {unknown}; choose from {', '.join(MODELS)}")
    timings = {}  # seconds per stage, this invocation (a resumed stage counts only its rest)
    sections, summary = [], {}
    for model in models:
        started = time.time()
        try:
            if model == "minilm":
                pairs = write_glosses(workdir / f"glosses_{args.synsets}.jsonl", args.synsets)
                acts, steps = store(workdir, "minilm", pairs, 3), args.steps
            else:
                n = args.smollm2_synsets
                pairs = write_glosses(workdir / f"glosses_{n}.jsonl", n)
                acts = store(workdir, "smollm2", pairs, args.smollm2_layer)
                steps = args.smollm2_steps or args.steps
            timings[f"{model}/store_s"] = round(time.time() - started, 1)
            meta = json.loads((acts / "meta.json").read_text())
            rows = {}
            for part, sweep in sweeps(acts, args, steps=steps,
                                      decoder=model == "smollm2")[0].items():
                t0, where = time.time(), workdir / "sweeps" / f"{model}_{part}"
                try:
                    rows[part] = final_rows(run_sweep(sweep, where, jobs=args.jobs,
                                                      retry_failed=args.retry_failed,
                                                      progress=False))
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # noqa: BLE001 - the other sweeps and the table go on
                    print(f"sae_scaling: {model} {part} sweep: {type(e).__name__}: {e}",
                          flush=True)
                    rows[part] = final_rows(collect(where)) if (where / "sweep.json").exists() \
                        else []
                timings[f"{model}/{part}_s"] = round(time.time() - t0, 1)
            result = fit(rows["grid"], resamples=args.bootstrap)
            if result is not None:
                files.write_json(workdir / f"fit_{model}.json", result)
                summary[model] = {k: v for k, v in result["params"].items()}
            sections.append(model_table(MODELS[model], meta, rows["grid"],
                                        rows["auxk_off"], result, args, steps))
        except (subprocess.CalledProcessError, OSError, ValueError) as e:
            print(f"sae_scaling: {model}: {type(e).__name__}: {e}", flush=True)
            sections.append(f"### {MODELS[model]}\n\nNot run: {type(e).__name__}: {e}\n")
        timings[f"{model}/total_s"] = round(time.time() - started, 1)
        files.write_json(workdir / "timings.json", timings)
    table = "\n".join(sections)
    files.write_text(workdir / "table.md", table)
    print(table)
    print(f"wrote {workdir / 'table.md'}; timings (this invocation, seconds): "
          f"{json.dumps(timings)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
