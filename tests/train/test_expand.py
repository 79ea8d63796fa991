"""``repr-jax expand --workdir RUN``: a trained splade run's top terms of a text (its latest
checkpoint, the text tokenised as the run read queries) equal its embedder's term weights; a run
that is not splade, a folder that is not a run and both sources at once are one line."""

import json

import jax
import numpy as np
import pytest
from tiny_mlm import VOCAB, WORDS, write_mlm

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data.tokenizer import Sides, make_tokenizer
from repr_jax.train import train_and_evaluate
from repr_jax.train.run import load_trained

TEXT = "the big red cat sat"


def _config(root):
    """A tiny random BERT masked LM and pairs in its words under ``root``; a 2-step splade
    config on them (the MLM head loaded)."""
    write_mlm(root / "mlm")
    rng = np.random.default_rng(0)
    words = [w for w in WORDS if w.isalpha()]
    with open(root / "pairs.jsonl", "w") as f:
        for _ in range(64):
            q = " ".join(rng.choice(words, 3))
            f.write(json.dumps({"query": q, "positive": q + " " + " ".join(rng.choice(words, 3))})
                    + "\n")
    return C.Config(
        seed=0,
        data=C.DataConfig(name=f"pairs:{root / 'pairs.jsonl'}", max_len=16,
                          data_dir=str(root / "tfds"), tokenizer=str(root / "mlm" / "vocab.txt")),
        encoder=C.EncoderConfig(name="text_transformer", width=8, depth=2, num_heads=2,
                                mlp_dim=16, init_from=str(root / "mlm")),
        method=C.MethodConfig(name="splade", flops_query=0.1, flops_doc=0.05),
        optim=C.OptimConfig(lr=1e-2, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=()))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("expand")
    train_and_evaluate(_config(root), root / "run", progress=False, verbose=False)
    return root / "run"


def _printed(capsys, argv):
    assert cli.main(["expand", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    count = int(lines[0].split()[0])
    assert lines[0] == f"{count} non-zero terms of {len(VOCAB)}"
    return count, [(t, float(w)) for t, w in (line.split("\t") for line in lines[1:])]


@pytest.mark.slow  # trains 2 steps: ~15 s on 2 busy cores
@pytest.mark.parametrize("pooling", [None, "sum"])
def test_expand_workdir_prints_the_runs_term_weights(run, capsys, pooling):
    more = ["--pooling", pooling] if pooling else []
    count, got = _printed(capsys, ["--workdir", str(run), TEXT, "--top", "5", *more])
    cfg, _, method, state = load_trained(run, text_only=True,
                                         overrides=[f"method.pooling={pooling}"] if pooling
                                         else [])
    ids = Sides.of_section(cfg.data).encode(make_tokenizer(cfg.data.tokenizer), [TEXT], "query")
    w = np.asarray(jax.device_get(method.embed(state.variables, ids)))[0]
    order = np.lexsort((np.arange(len(w)), -w))
    assert count == int((w > 0).sum()) > 0
    want = [(VOCAB[i], float(w[i])) for i in order[:min(5, count)]]
    assert [t for t, _ in got] == [t for t, _ in want]
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], atol=6e-5)


def test_expand_workdir_bad_inputs_are_one_line(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    C.save_json(C.override(_config(tmp_path), ["method.name=biencoder"]), other / "config.json")
    cases = [(["--workdir", str(other), "x"], "its method 'biencoder' gives no vocabulary"),
             (["--workdir", str(tmp_path), "x"], "not a run directory (no config.json)"),
             (["--workdir", str(tmp_path / "absent"), "x"], "not a run directory")]
    for argv, message in cases:
        assert cli.main(["expand", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as e:  # argparse: one source
        cli.main(["expand", "--workdir", str(other), "--init-from", "splade_tiny", "x"])
    assert e.value.code == 2
