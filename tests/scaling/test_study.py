"""Studies: the runner writes its table, claim and plots; analyses read trained runs; the LIMIT
free-embedding search; a reproduction runs end to end in its quick setting."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config

from repr_jax.eval.limit import all_retrievable, solvable, top2_pairs
from repr_jax.scaling import Study, embedded, load_study, probe_accuracy, run_study
from repr_jax.train import train_and_evaluate


def test_run_study_without_runs_writes_rows_claim_and_refuses_overrides(tmp_path):
    def analyze(workdir, table):
        assert table == []
        return [{"a": 1, "b": 0.5}, {"a": 2, "c": "x"}]

    rows = run_study(Study("a claim", analyze), tmp_path)
    assert rows[1]["c"] == "x"
    assert (tmp_path / "study.csv").read_text().splitlines() == ["a,b,c", "1,0.5,", "2,,x"]
    assert json.loads((tmp_path / "study.json").read_text())[0] == {"a": 1, "b": 0.5, "c": None}
    assert (tmp_path / "claim.txt").read_text() == "a claim\n"
    from repr_jax.config import ConfigError
    with pytest.raises(ConfigError, match="trains nothing"):
        run_study(Study("c", analyze), tmp_path, overrides=["seed=1"])


@pytest.mark.slow
def test_embedded_reads_a_trained_run_every_split_layers_and_its_initial_state(tmp_path,
                                                                               mnist1d_small):
    train_and_evaluate(tiny_config(), tmp_path, progress=False, verbose=False)
    feats = embedded(tmp_path)
    assert set(feats) >= {"train", "validation", "test"}
    assert feats["test"][0].shape == (len(mnist1d_small.splits["test"]["label"]), 16)
    layers = embedded(tmp_path, which="layers")["test"][0]
    assert [f.shape[1] for f in layers] == [8, 16, 16]
    initial = embedded(tmp_path, initial=True)["test"][0]
    assert not np.allclose(initial, feats["test"][0])
    acc = probe_accuracy(feats)
    assert 0.1 < acc <= 1.0
    assert probe_accuracy(feats, lambda f: f[:, :2]) <= acc + 0.05


def test_all_retrievable_is_exact():
    docs = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    pairs = jnp.asarray(top2_pairs(3))
    # scores: query (1, 1) -> 1, 1, -2; (1, -1) -> 1, -1, 0; (-1, 1) -> -1, 1, 0
    good = jnp.asarray([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0]])
    assert bool(all_retrievable(good, docs, pairs))
    assert not bool(all_retrievable(good.at[0].set([1.0, -1.0]), docs, pairs))  # ranks 0, 2
    assert not bool(all_retrievable(good.at[0].set([1.0, -0.5]), docs, pairs))  # tie 1 vs 2


def test_free_embeddings_hit_the_dimension_limit():
    """Four documents in 2-D: every pair can be a top-2 set (found by the optimiser); six cannot
    (points in the plane have far fewer than 15 distinct top-2 sets)."""
    assert top2_pairs(6).shape == (15, 2)
    assert solvable(4, 2, max_steps=2000)
    assert not solvable(6, 2, max_steps=1000)
    assert solvable(6, 4, max_steps=2000)


def test_maxsim_of_free_multi_vectors_passes_where_one_vector_fails():
    """Six documents in 2-D fail with one vector a text; two vectors a text scored by MaxSim
    retrieve every top-2 set (a query's two vectors can each point at one of its documents)."""
    from repr_jax.eval.limit import scores
    rng = np.random.default_rng(0)
    q, d = rng.normal(size=(3, 2, 4)), rng.normal(size=(5, 2, 4))
    want = [[sum(max(q[i, a] @ d[j, b] for b in range(2)) for a in range(2)) for j in range(5)]
            for i in range(3)]
    np.testing.assert_allclose(scores(jnp.asarray(q), jnp.asarray(d)), want, rtol=1e-5)
    assert solvable(6, 2, max_steps=2000, vectors=2)


def test_every_study_file_loads():
    from repr_jax.config import list_experiments
    names = [n for n in list_experiments()
             if "get_study" in (load_study.__globals__["config_lib"].experiments_dir()
                                / f"{n}.py").read_text()]
    assert len(names) >= 10
    for n in names:
        study = load_study(f"{n}:quick")
        assert study.claim.strip() and callable(study.analyze)
        if study.sweep is not None:
            assert study.sweep.points()  # every point's config builds


@pytest.mark.slow
def test_repr_jax_study_runs_a_study_file_given_by_path(tmp_path, capsys):
    from repr_jax.cli import main
    path = tmp_path / "tiny_study.py"
    path.write_text("from repr_jax.scaling import Study\n\n\n"
                    "def get_study(arg=None):\n"
                    "    return Study('claim ' + str(arg), lambda workdir, table: [{'x': 1.5}])\n")
    assert main(["study", f"{path}:quick", "--workdir", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "study.csv").read_text().splitlines() == ["x", "1.5"]
    assert (tmp_path / "out" / "claim.txt").read_text() == "claim quick\n"
    assert "study.csv" in capsys.readouterr().out
    assert main(["study", "no_such_study", "--workdir", str(tmp_path / "x")]) == 2
