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


def test_no_line_when_another_representation_has_rows(capsys, monkeypatch):
    """latent_modalities has pairs of unequal widths: raw inputs cannot be retrieved with, a
    representation with a pair embedding can; the table's '-' is the answer, not a line."""
    from repr_jax import data
    from repr_jax.train import evaluation
    monkeypatch.setattr(evaluation, "SAID_EMPTY", set())
    dataset = data.load("latent_modalities", num_examples=600)
    capsys.readouterr()  # a first load says it prepares the data
    cfg = tiny_config(eval=EvalConfig(evaluators=("retrieval",), bootstrap=0))
    raw = Representation(lambda variables, x: x.reshape(x.shape[0], -1), None)
    width = dataset.splits["test"]["x_pos"].shape[-1]
    paired = Representation(raw.embed, None, embed_query=lambda v, x: x[:, :width],
                            embed_pos=lambda v, x: x)
    rows = evaluate(cfg, dataset, {"raw": raw, "paired": paired}, step=0)
    assert {r["representation"] for r in rows} == {"paired"}
    assert capsys.readouterr().err == ""


def test_a_metric_that_fails_keeps_the_rows_before_it_and_says_why_in_one_line(
        mnist1d_small, capsys, monkeypatch):
    from repr_jax.eval import EVALUATORS
    from repr_jax.train.log import format_table

    class HalfWay:
        def __init__(self, embedder, **options):
            del embedder, options

        def run(self, variables):
            yield "first", 0.5
            raise MemoryError("RESOURCE_EXHAUSTED: Out of memory allocating 96.6 GiB\n"
                              "  while running replica 0 ...\n" * 5)

    monkeypatch.setitem(EVALUATORS, "geometry", HalfWay)
    cfg = tiny_config(eval=EvalConfig(evaluators=("geometry", "knn"), bootstrap=0))
    raw = Representation(lambda variables, x: x.reshape(x.shape[0], -1), None)
    rows = evaluate(cfg, mnist1d_small, {"raw": raw}, step=0)
    assert [(r["evaluator"], r["metric"]) for r in rows] == [
        ("geometry", "first"), ("geometry", "error"), ("knn", "accuracy")]
    assert rows[1]["error"] == ("MemoryError: RESOURCE_EXHAUSTED: Out of memory allocating "
                                "96.6 GiB")
    assert capsys.readouterr().err.count("\n") == 1
    table = format_table(rows).splitlines()
    assert table[-1] == ("failed: geometry on raw: MemoryError: RESOURCE_EXHAUSTED: Out of memory "
                         "allocating 96.6 GiB")


def test_the_default_battery_says_nothing_of_evaluators_that_do_not_apply(mnist1d_small, capsys,
                                                                         monkeypatch):
    from repr_jax.train import evaluation
    monkeypatch.setattr(evaluation, "SAID_EMPTY", set())
    cfg = tiny_config(eval=EvalConfig(bootstrap=0))  # the default evaluators
    assert "retrieval" in cfg.eval.evaluators and "sts" in cfg.eval.evaluators
    raw = Representation(lambda variables, x: x.reshape(x.shape[0], -1), None)
    rows = evaluate(cfg, mnist1d_small, {"raw": raw}, step=0)
    assert {"retrieval", "sts"}.isdisjoint(r["evaluator"] for r in rows)
    assert "nothing to evaluate" not in capsys.readouterr().err
