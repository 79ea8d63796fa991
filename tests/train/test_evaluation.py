"""Running the evaluators: an evaluator with nothing to evaluate on a dataset says so, once a
process."""

from conftest import tiny_config

from repr_jax.config import EvalConfig
from repr_jax.train.evaluation import Representation, evaluate


def test_an_evaluator_with_nothing_to_evaluate_says_why_once(mnist1d_small, capsys,
                                                             monkeypatch):
    from repr_jax.train import evaluation
    monkeypatch.setattr(evaluation, "SAID_EMPTY", set())
    cfg = tiny_config(eval=EvalConfig(evaluators=("knn", "retrieval", "sts"), bootstrap=10))
    raw = Representation(lambda variables, x: x.reshape(x.shape[0], -1), None)
    rows = evaluate(cfg, mnist1d_small, {"raw": raw, "raw again": raw}, step=0)
    evaluate(cfg, mnist1d_small, {"raw": raw}, step=1)  # a later evaluation says nothing again
    assert {r["evaluator"] for r in rows} == {"knn"}
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "repr-jax: evaluator 'retrieval' has nothing to evaluate on 'mnist1d': it needs a paired "
        "test split (x, x_pos) or a retrieval set in eval.sets",
        "repr-jax: evaluator 'sts' has nothing to evaluate on 'mnist1d': it needs a similarity "
        "set (rated pairs) in eval.sets"]
