"""Intermediate layers: is the last layer the best representation? (layer-wise probing)

Claim (the seed papers, after Skean et al. 2025, "Layer by Layer"): in language encoders trained
with token-level objectives, mid-depth layers often give better downstream features than the last
layer, which specialises in the pre-training task; their geometry (effective rank, anisotropy)
changes along the depth with it.

Setup: masked language modelling (`mlm_latent_topics`) with a deeper BERT-style encoder (4
layers, width 64), 3,000 steps; every layer's mean-pooled token states (valid tokens only) from
`method.embed_layers` (its last entry, the pooled output, equals layer 4 here); per layer:
linear-probe accuracy for the sentence's topic (ridge, penalty chosen on validation), RankMe
effective rank and anisotropy (mean cosine of different sentences) on the test split, also for
the randomly initialised encoder.
Command:   repr-jax study intermediate_layers_mlm --workdir runs/intermediate_layers
           (append :quick for a 100-step smoke test)
Hardware:  2 CPU cores.
Runtime:   5 min 22 s for the whole command, measured 2026-12-02.
Result (test split, 1,200 sentences; probe 95% half-width ~0.010):
    layer        MLM: probe   eff. rank   anisotropy     random init: probe   eff. rank   anisotropy
    1                0.9700       41.98       0.156                  0.7925       21.93        0.933
    2                0.9642       40.22       0.177                  0.7233       19.33        0.936
    3                0.9650       39.77       0.285                  0.6733       17.05        0.938
    4 (output)       0.9658       33.29       0.559                  0.6458       14.49        0.940
Outcome: the geometry reproduces — with depth the trained encoder's representations become
sharply more anisotropic (0.16 -> 0.56) and lower-rank (42 -> 33), the last layer specialising
in the token-prediction task. The accuracy claim only weakly: the first layer is best, but by 0.4
points, inside the probe's interval (on this topic data a bag-of-words-like first layer is already
at the ceiling, 0.973 for raw bag of words). At random initialisation depth only hurts.
"""

from pathlib import Path

from mlm_latent_topics import get_config as base_config

from repr_jax.config import override
from repr_jax.eval import anisotropy, effective_rank
from repr_jax.scaling import Study, Sweep, embedded, probe_accuracy, runs_by_point
from repr_jax.train.log import figure, save_figure


def get_config(arg=None):
    quick = arg == "quick"
    return override(base_config(arg), [
        "encoder.depth=4", f"train.steps={100 if quick else 3000}",
        "eval.evaluators=('linear_probe',)", "eval.reference_rows=False"])


def get_sweep(arg=None):
    return Sweep(get_config(arg), grid={"seed": (0,)})


def _rows(feats, model: str) -> list[dict]:
    test = feats["test"][0]
    rows = []
    for i in range(len(test)):
        name = f"layer_{i + 1}" if i < len(test) - 1 else "embedding (pooled last layer)"
        rows.append(dict(model=model, layer=name,
                         probe_accuracy=probe_accuracy(feats, lambda f, i=i: f[i]),
                         effective_rank=float(effective_rank(test[i])),
                         anisotropy=float(anisotropy(test[i]))))
    return rows


def analyze(workdir: Path, table: list[dict]) -> list[dict]:
    del table
    run = runs_by_point(workdir)["seed=0"]
    rows = _rows(embedded(run, which="layers"), "mlm")
    rows += _rows(embedded(run, which="layers", initial=True), "random init")
    _plot(rows, workdir / "plots" / "layers.png")
    return rows


def _plot(rows, path: Path) -> None:
    fig, axes = figure(1, 3, figsize=(13, 3.8))
    for ax, key in zip(axes, ("probe_accuracy", "effective_rank", "anisotropy")):
        for model in ("mlm", "random init"):
            pts = [r for r in rows if r["model"] == model]
            ax.plot(range(1, len(pts) + 1), [r[key] for r in pts], "o-", label=model)
        ax.set(xlabel="layer (last = pooled output)", ylabel=key.replace("_", " "))
        ax.legend()
    fig.suptitle("layer-wise representation quality and geometry (MLM, latent_topics)")
    save_figure(fig, path)


def get_study(arg=None):
    return Study(claim=__doc__.split("\n\n")[1], analyze=analyze, sweep=get_sweep(arg))
