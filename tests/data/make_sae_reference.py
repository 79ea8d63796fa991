"""Writes ``tests/data/sae_reference.npz``: sae-lens's encode, decode, training losses and
gradients for its four SAE kinds, the reference of ``tests/objectives/test_sae.py``. Needs torch and
sae-lens, which CI does not install; made with sae-lens 6.54.12 and torch 2.13.0+cpu (Python 3.11)::

    python3 -m venv /tmp/saevenv
    /tmp/saevenv/bin/pip install torch==2.13.0 sae-lens==6.54.12
    /tmp/saevenv/bin/python tests/data/make_sae_reference.py

Sizes D=16, L=64, B=32, k=4. For each case the weights (float32, untied ``W_enc``, decoder rows of
norm 0.5 to 1.5 so decoder-norm conventions matter), the inputs, sae-lens's latents (``encode``),
reconstruction (``decode``), loss parts, total loss and the gradients of the total loss with
respect to every parameter are stored under ``<case>/<name>``; coefficients under
``<case>/cfg_<name>``. sae-lens runs in float64 on the float32 inputs (its JumpReLU threshold stays
float32, as sae-lens keeps it); a case is redrawn (next seed) until no pre-activation lies within
1e-4 of a discontinuity (ReLU at 0, a top-k boundary, the JumpReLU threshold or its STE window
edges), so float32 rounding on the JAX side cannot flip a selection.

Cases: ``relu`` (``StandardTrainingSAE``, ``l1_coefficient`` 0.3), ``topk`` (``TopKTrainingSAE``,
rescale_acts_by_decoder_norm=True as its default, AuxK with 5 dead latents < k_aux=8, coefficient
0.25), ``topk_norescale`` (the same with rescale off, 20 dead latents), ``batchtopk``
(``BatchTopKTrainingSAE``, k=4 per row on average, 20 dead latents, AuxK coefficient 1),
``jumprelu`` (``JumpReLUTrainingSAE``, step L0 loss, ``l0_coefficient`` 0.2, bandwidth 0.05).
Also stored: sae-lens's explained variance (as ``fvu = 1 - ev``), ``l0``, the activation
``scaling_factor``, the folded weights of ``fold_W_dec_norm`` (relu, jumprelu) and one BatchTopK
threshold update.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "sae_reference.npz"
D, L, B, K = 16, 64, 32, 4
MARGIN = 1e-4
BANDWIDTH = 0.05


class Redraw(Exception):
    pass


def _gap_check(sorted_desc, n, what):
    """The n-th and (n+1)-th largest must differ by MARGIN (along the last axis)."""
    if n < sorted_desc.shape[-1] and np.min(sorted_desc[..., n - 1] - sorted_desc[..., n]) < MARGIN:
        raise Redraw(what)


def _draw(rng, jumprelu):
    w_dec = rng.normal(size=(L, D))
    w_dec *= rng.uniform(0.5, 1.5, size=(L, 1)) / np.linalg.norm(w_dec, axis=1, keepdims=True)
    p = {"W_enc": rng.normal(size=(D, L)) / np.sqrt(D), "b_enc": 0.1 * rng.normal(size=L),
         "W_dec": w_dec, "b_dec": 0.3 * rng.normal(size=D)}
    if jumprelu:
        p["threshold"] = rng.uniform(0.05, 0.6, size=L)
    x = rng.normal(size=(B, D)) + 0.5
    return {n: v.astype(np.float32) for n, v in p.items()}, x.astype(np.float32)


def _build(kind, rescale):
    from sae_lens.saes.batchtopk_sae import BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig
    from sae_lens.saes.jumprelu_sae import JumpReLUTrainingSAE, JumpReLUTrainingSAEConfig
    from sae_lens.saes.standard_sae import StandardTrainingSAE, StandardTrainingSAEConfig
    from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
    common = dict(d_in=D, d_sae=L, dtype="float64")
    if kind == "relu":
        return StandardTrainingSAE(StandardTrainingSAEConfig(l1_coefficient=0.3, **common)), \
            {"l1": 0.3}, {"l1_coefficient": 0.3}
    if kind == "topk":
        cfg = TopKTrainingSAEConfig(k=K, aux_loss_coefficient=0.25,
                                    rescale_acts_by_decoder_norm=rescale, **common)
        return TopKTrainingSAE(cfg), {}, {"k": K, "aux_k_coefficient": 0.25}
    if kind == "batchtopk":
        cfg = BatchTopKTrainingSAEConfig(k=K, aux_loss_coefficient=1.0, topk_threshold_lr=0.01,
                                         **common)
        return BatchTopKTrainingSAE(cfg), {}, {"k": K, "aux_k_coefficient": 1.0}
    cfg = JumpReLUTrainingSAEConfig(l0_coefficient=0.2, jumprelu_bandwidth=BANDWIDTH,
                                    jumprelu_sparsity_loss_mode="step", **common)
    return JumpReLUTrainingSAE(cfg), {"l0": 0.2}, {"l0_coefficient": 0.2, "bandwidth": BANDWIDTH}


def _check_margins(kind, pre, dead, k_aux, thr):
    if np.min(np.abs(pre)) < MARGIN:
        raise Redraw("a pre-activation at ReLU's kink")
    srt = -np.sort(-pre, axis=-1)
    if kind == "topk":
        _gap_check(srt, K, "top-k boundary")
    if kind == "batchtopk":
        _gap_check(-np.sort(-np.maximum(pre, 0).ravel()), K * B, "batch top-k boundary")
    if dead is not None and kind in ("topk", "batchtopk") and dead.sum() > k_aux:
        _gap_check(-np.sort(-pre[:, dead], axis=-1), k_aux, "AuxK boundary")
    if kind == "jumprelu":
        u = (pre - thr) / BANDWIDTH
        if min(np.min(np.abs(pre - thr)), np.min(np.abs(np.abs(u) - 0.5))) < MARGIN:
            raise Redraw("a pre-activation at the threshold or the STE window edge")
        if not np.any(np.abs(u) < 0.5):
            raise Redraw("no pre-activation inside the STE window")


def case(kind, seed, n_dead, rescale=True):
    import torch
    from sae_lens.evals import ExplainedVarianceCalculator
    from sae_lens.saes.sae import TrainStepInput
    from sae_lens.training.activation_scaler import ActivationScaler

    for s in range(seed, seed + 100):
        rng = np.random.default_rng(s)
        params, x = _draw(rng, kind == "jumprelu")
        dead = np.zeros(L, bool)
        dead[rng.choice(L, n_dead, replace=False)] = True
        sae, coefficients, cfg = _build(kind, rescale)
        with torch.no_grad():
            for n, v in params.items():
                getattr(sae, n).data = torch.from_numpy(v).to(getattr(sae, n).dtype)
        xt = torch.from_numpy(x)
        _, pre = sae.encode_with_hidden_pre(xt.double())
        try:
            _check_margins(kind, pre.detach().numpy(), dead if n_dead else None, D // 2,
                           params.get("threshold"))
        except Redraw as why:
            print(f"{kind}: seed {s} redrawn ({why})")
            continue
        break
    else:
        raise RuntimeError(f"{kind}: no seed without near-discontinuities")

    out = sae.training_forward_pass(TrainStepInput(
        sae_in=xt.double(), coefficients=coefficients,
        dead_neuron_mask=torch.from_numpy(dead) if n_dead else None, n_training_steps=0,
        is_logging_step=False))
    out.loss.backward()
    res = {f"param_{n}": v for n, v in params.items()}
    res.update(x=x, dead_mask=dead, seed=np.int64(s),
               z=out.feature_acts.detach().numpy(), x_hat=out.sae_out.detach().numpy(),
               loss=out.loss.detach().numpy(),
               **{f"loss_{n}": v.detach().numpy() for n, v in out.losses.items()},
               **{f"grad_{n}": getattr(sae, n).grad.detach().numpy() for n in params})
    res.update({f"cfg_{n}": np.asarray(v) for n, v in cfg.items()})
    res["cfg_rescale_acts_by_decoder_norm"] = np.asarray(kind in ("topk", "batchtopk") and rescale)
    with torch.no_grad():
        res["decode"] = sae.decode(out.feature_acts).numpy()   # decode alone, same as x_hat
        ev = ExplainedVarianceCalculator()
        ev.add_batch(sae_output=out.sae_out.detach(), hidden_acts=xt.double())
        res["fvu"] = np.asarray(1.0 - ev.compute())
        res["l0"] = (out.feature_acts != 0).sum(dim=-1).double().numpy()
        scaler = ActivationScaler()
        scaler.estimate_scaling_factor(D, iter([xt.double()]), n_batches_for_norm_estimate=1)
        res["scaling_factor"] = np.asarray(scaler.scaling_factor)
        if kind in ("relu", "jumprelu"):
            sae.fold_W_dec_norm()
            res.update({f"folded_{n}": getattr(sae, n).detach().numpy() for n in params})
        if kind == "batchtopk":
            sae.topk_threshold = torch.tensor(0.1, dtype=torch.double)
            sae.update_topk_threshold(out.feature_acts)
            res["topk_threshold_after"] = np.asarray(sae.topk_threshold.item())
    return {f"{kind if rescale else kind + '_norescale'}/{n}": v for n, v in res.items()}


def main():
    import sae_lens
    import torch
    torch.manual_seed(0)
    data = {"versions": np.asarray(f"sae-lens {sae_lens.__version__}, torch {torch.__version__}")}
    data.update(case("relu", 0, 0))
    data.update(case("topk", 100, 5))
    data.update(case("topk", 200, 20, rescale=False))
    data.update(case("batchtopk", 300, 20))
    data.update(case("jumprelu", 400, 0))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **data)
    print(f"wrote {OUT} ({os.path.getsize(OUT) / 1e3:.0f} kB), {data['versions']}")
    for n in sorted(data):
        if n.endswith("/loss") or "/loss_" in n:
            print(f"  {n} = {float(data[n]):.6f}")


if __name__ == "__main__":
    main()
