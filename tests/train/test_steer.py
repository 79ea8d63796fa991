"""``repr-jax steer`` on a tiny Llama GGUF: alpha 0 is the model's own next-token distribution,
a steered last block equals the final norm of (block output + alpha d) computed by hand, the
greedy loop equals argmax decoding by hand, a direction toward a word's unembedding raises its
log-probability more than random directions of the same norm, and the bad inputs are one line."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.encoders.decoder_lm import next_token_logits
from repr_jax.train import steer as S
from repr_jax.train.activations import load_model

from tiny_llm import TINY, tiny_params, write_gguf

PROMPTS = ["the thing", "then there", "a cat sat on the", "hello", "other", "the the"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("steer")
    gguf = root / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    model, _ = load_model(init_from=str(gguf), max_len=16, skip_first=0)
    return dict(root=root, gguf=gguf, prompts=prompts, model=model)


def _ids(model, texts):
    return model.sides.encode(model.tokenizer, texts, "doc")


def test_alpha_zero_is_the_models_own_next_token_distribution(tiny):
    model = tiny["model"]
    ids = _ids(model, PROMPTS)
    fn = S.steered_logprobs(model)
    got = np.asarray(fn(model.variables, ids, jnp.ones(TINY["width"]), 0.0, layer=0))
    tokens = model.module.apply(model.variables, jnp.asarray(ids))[1]["tokens"]
    logp = jax.nn.log_softmax(next_token_logits(model.variables["params"], tokens), axis=-1)
    last = (ids != -1).sum(axis=1) - 1
    np.testing.assert_allclose(got, np.asarray(logp)[np.arange(len(ids)), last], atol=1e-5)


def test_a_steered_last_block_is_the_final_norm_of_its_output_plus_alpha_d(tiny):
    model = tiny["model"]
    ids = _ids(model, PROMPTS)
    d = S.random_directions(1, TINY["width"], seed=3)[0]
    alpha, last_block = 7.0, TINY["depth"] - 1
    got = np.asarray(S.steered_logprobs(model)(model.variables, ids, jnp.asarray(d), alpha,
                                               layer=last_block))
    params = model.variables["params"]
    h = np.asarray(model.layers(model.variables, ids)[last_block], np.float64) + alpha * d
    normed = h / np.sqrt((h ** 2).mean(-1, keepdims=True) + TINY["eps"]) * np.asarray(
        params["norm"]["scale"], np.float64)
    logits = normed @ np.asarray(params["embed_tokens"]["embedding"], np.float64).T
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    last = (ids != -1).sum(axis=1) - 1
    np.testing.assert_allclose(got, logp[np.arange(len(ids)), last], atol=2e-4)


def test_greedy_is_argmax_decoding_by_hand(tiny):
    model = tiny["model"]
    rows = model.tokenizer.rows(PROMPTS[:2], max_len=16)
    d = S.random_directions(1, TINY["width"], seed=4)[0]
    got = S.greedy(model, model.variables, rows, layer=0, direction_D=d, alpha=3.0,
                   new_tokens=4)
    fn = S.steered_logprobs(model)
    for row, out in zip(rows, got):
        seq = list(row)
        for _ in range(4):
            lp = fn(model.variables, np.asarray([seq], np.int32), jnp.asarray(d), 3.0, layer=0)
            seq.append(int(np.argmax(np.asarray(lp)[0])))
        assert out == seq[len(row):]


def test_a_words_unembedding_direction_beats_random_directions(tiny, capsys):
    """The must-show on the tiny model: toward ``scale * E[the]`` after the last block, the
    word's log-probability rises, and by more than along random directions of equal norm."""
    model = tiny["model"]
    params = model.variables["params"]
    the = S.word_ids(model.tokenizer, ["the"])[0]
    toward = np.asarray(params["norm"]["scale"]) * np.asarray(
        params["embed_tokens"]["embedding"])[the]
    np.save(tiny["root"] / "the.npy", toward)
    out = tiny["root"] / "steer.json"
    result = S.steer(init_from=str(tiny["gguf"]), layer=TINY["depth"] - 1,
                     direction=str(tiny["root"] / "the.npy"), alphas=[2.0, 8.0],
                     prompts=str(tiny["prompts"]), words=["the"], random=8, new_tokens=3,
                     bootstrap=200, out=str(out), max_len=16)
    for row in result["rows"]:
        assert row["concept"]["value"] > 0 and row["difference"]["low"] > 0
        assert row["beats_random"] > 0.9
    assert result["rows"][1]["concept"]["value"] > result["rows"][0]["concept"]["value"]
    assert json.loads(out.read_text())["rows"] == result["rows"]
    printed = capsys.readouterr().out
    assert "| alpha | concept Δ log p |" in printed and "median token norm" in printed


@pytest.mark.parametrize("change, message", [
    (dict(direction="wide.npy"), "width 33, but layer 0 of .* has width 32"),
    (dict(alphas=[float("nan")]), "--alpha nan: give finite numbers"),
    (dict(prompts="latin1.txt"), "not UTF-8 text \\(byte 1"),
    (dict(layer=5), "--layer 5: the decoder_lm has 2 block\\(s\\)"),
    (dict(words=[]), "--words: give the concept's words"),
    (dict(direction="zero.npy"), "not a finite, non-zero vector"),
])
def test_bad_inputs_are_one_line(tiny, change, message):
    root = tiny["root"]
    np.save(root / "wide.npy", np.ones(TINY["width"] + 1))
    np.save(root / "zero.npy", np.zeros(TINY["width"]))
    np.save(root / "good.npy", np.ones(TINY["width"]))
    (root / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1")[2:])
    kw = dict(init_from=str(tiny["gguf"]), layer=0, direction=str(root / "good.npy"),
              alphas=[1.0], prompts=str(tiny["prompts"]), words=["the"], random=2,
              new_tokens=1, bootstrap=0, max_len=16)
    kw.update({k: (str(root / v) if k in ("direction", "prompts") else v)
               for k, v in change.items()})
    with pytest.raises(ValueError, match=message):
        S.steer(**kw)


@pytest.mark.slow
def test_the_command_line_prints_the_table(tiny):
    np.save(tiny["root"] / "ones.npy", np.ones(TINY["width"]))
    r = subprocess.run([sys.executable, "-m", "repr_jax.cli", "steer", "--init-from",
                        str(tiny["gguf"]), "--layer", "1", "--direction",
                        str(tiny["root"] / "ones.npy"), "--alpha", "1,4", "--prompts",
                        str(tiny["prompts"]), "--words", "the", "--random", "2",
                        "--new-tokens", "2", "--max-len", "16"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n| 1 |") + r.stdout.count("\n| 4 |") == 2
    bad = subprocess.run([sys.executable, "-m", "repr_jax.cli", "steer", "--init-from",
                          str(tiny["gguf"]), "--layer", "1", "--direction",
                          str(tiny["root"] / "ones.npy"), "--alpha", "inf", "--prompts",
                          str(tiny["prompts"]), "--words", "the"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr


@pytest.mark.slow
def test_an_sae_latents_decoder_row_is_a_direction_of_its_own_layer_only(tiny, tmp_path):
    from conftest import sae_config

    from repr_jax import config as C
    from repr_jax.train import activations as acts
    from repr_jax.train import train_and_evaluate
    acts.activations(out=tmp_path / "store", layer=1, data=f"pairs:{_pairs(tmp_path)}",
                     init_from=str(tiny["gguf"]), max_len=16, progress=False)
    cfg = C.override(sae_config(steps=3, bootstrap=0), [
        f"data.name=activations:{tmp_path / 'store'}", "method.latents=48",
        "eval.evaluators=()"])
    train_and_evaluate(cfg, tmp_path / "sae", progress=False, verbose=False)
    from repr_jax.train.run import load_trained
    w_dec = np.asarray(load_trained(tmp_path / "sae")[3].variables["params"]["sae"]["W_dec"])
    name = tiny["model"].describe["model"]
    got = S.read_direction(f"latent:{tmp_path / 'sae'}:5", TINY["width"], layer=1,
                           model_name=name)
    np.testing.assert_allclose(got, w_dec[5] / np.linalg.norm(w_dec[5]), rtol=1e-6)
    with pytest.raises(ValueError, match="the SAE read layer 1 of .*; this is layer 0"):
        S.read_direction(f"latent:{tmp_path / 'sae'}:5", TINY["width"], layer=0,
                         model_name=name)
    with pytest.raises(ValueError, match="the SAE has 48 latents"):
        S.read_direction(f"latent:{tmp_path / 'sae'}:48", TINY["width"], layer=1,
                         model_name=name)


def _pairs(root):
    path = root / "pairs.jsonl"
    path.write_text("".join(json.dumps({"query": f"the thing {i}", "positive": f"then {i} there"})
                            + "\n" for i in range(40)))
    return path
