"""LLM2Vec's masked next-token prediction (method.name=mntp): which tokens are chosen, how they are
corrupted, the loss against LLM2Vec's shifted full-vocabulary cross-entropy, and the two-stage
recipe (mntp with LoRA, then a contrastive run that starts from it, adapters folded in)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.encoders.decoder_lm import DecoderLM
from repr_jax.methods.mntp import (choose_positions, control_tokens, corrupt, maskable_tokens,
                                   masked_next_token_loss)
from repr_jax.train import train_and_evaluate
from repr_jax.train.run import load_trained

from tiny_llm import TINY, tiny_params, write_gguf


def test_maskable_tokens_skip_first_padding_instructions_and_control_tokens():
    control = jnp.asarray([False] * 9 + [True])
    ids = jnp.asarray([[-2 - 5, 7, 8, 9, -1, -1],    # instruction, text, text, <control>, pad
                       [3, 4, -1, -1, -1, -1],        # the first token has nothing before it
                       [-1, -1, 2, 6, 6, 1]])          # left padding
    got = np.asarray(maskable_tokens(ids, control))
    np.testing.assert_array_equal(got, [[0, 1, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0],
                                        [0, 0, 0, 1, 1, 1]])
    # a vocabulary with its own padding id: that id is padding, never a target
    own_pad = maskable_tokens(jnp.asarray([[3, 4, 0, 0]]), control, pad_id=0)
    assert not np.asarray(own_pad)[0, 2:].any()


def test_control_tokens_are_named_ones():
    vocab = ["<bos>", "<|im_start|>", "[CLS]", "_", "the", "<mask>", "a<b>", "<start_of_turn>"]
    assert list(control_tokens(vocab)) == [True, True, True, False, False, True, False, True]


def test_each_row_gets_round_ratio_times_its_maskable_tokens_distinct_and_maskable():
    key = jax.random.PRNGKey(0)
    maskable = jax.random.uniform(key, (64, 40)) < 0.7
    positions, chosen = choose_positions(jax.random.PRNGKey(1), maskable, 0.2)
    positions, chosen, maskable = map(np.asarray, (positions, chosen, maskable))
    assert positions.shape == (64, 8)  # ceil(0.2 * 40)
    for row in range(64):
        n = int(np.floor(0.2 * maskable[row].sum() + 0.5))
        picked = positions[row][chosen[row] > 0]
        assert len(picked) == n and len(set(picked)) == n and maskable[row, picked].all()


def test_all_mask_masks_every_chosen_token_and_bert_splits_80_10_10():
    b, t = 400, 50
    ids = jnp.tile(jnp.arange(t, dtype=jnp.int32)[None] + 100, (b, 1))
    positions, chosen = choose_positions(jax.random.PRNGKey(0), jnp.ones((b, t), bool), 0.5)
    out = np.asarray(corrupt(jax.random.PRNGKey(1), ids, positions, chosen, mask_id=7,
                             vocab_size=1000, corruption="all_mask"))
    hit = np.zeros((b, t), bool)
    np.put_along_axis(hit, np.asarray(positions), np.asarray(chosen) > 0, axis=1)
    assert (out[hit] == 7).all() and (out[~hit] == np.asarray(ids)[~hit]).all()
    out = np.asarray(corrupt(jax.random.PRNGKey(2), ids, positions, chosen, mask_id=7,
                             vocab_size=1000, corruption="bert"))
    masked = np.mean(out[hit] == 7)
    kept = np.mean(out[hit] == np.asarray(ids)[hit])
    assert abs(masked - 0.8) < 0.015 and abs(kept - 0.1) < 0.01  # 10,000 chosen tokens
    assert (out[~hit] == np.asarray(ids)[~hit]).all()


def test_the_loss_is_llm2vecs_shifted_cross_entropy_on_the_chosen_tokens():
    """LLM2Vec's run_mntp.py: labels -100 except at masked positions, then
    ``preds[:, :-1]`` against ``labels[:, 1:]``, cross-entropy mean over the labelled ones."""
    module = DecoderLM(**TINY, attention="bidirectional")
    params = {"params": jax.tree.map(jnp.asarray, tiny_params())}
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 300, (3, 12)), jnp.int32)
    ids = ids.at[2, 9:].set(-1)
    positions, chosen = choose_positions(
        jax.random.PRNGKey(3), maskable_tokens(ids, jnp.zeros(300, bool)), 0.3)
    _, features = module.apply(params, ids)
    ce, right, n = masked_next_token_loss(params["params"], features["tokens"], ids, positions,
                                          chosen)
    labels = np.full(ids.shape, -100)
    for row in range(3):
        for p, c in zip(np.asarray(positions[row]), np.asarray(chosen[row])):
            if c:
                labels[row, p] = int(ids[row, p])
    logits = np.asarray(features["tokens"], np.float64) @ np.asarray(
        params["params"]["embed_tokens"]["embedding"], np.float64).T
    preds, targets = logits[:, :-1].reshape(-1, 300), labels[:, 1:].reshape(-1)
    scored = targets != -100
    lse = np.log(np.exp(preds - preds.max(1, keepdims=True)).sum(1)) + preds.max(1)
    expected = np.mean((lse - preds[np.arange(len(targets)), np.maximum(targets, 0)])[scored])
    assert int(n) == scored.sum() > 0
    np.testing.assert_allclose(float(ce / n), expected, rtol=1e-5)
    assert float(right) == np.sum((preds.argmax(1) == targets)[scored])


def _collection(tmp_path):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=60, num_queries=6, num_train=48,
                                     seed=2)
    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    return root, gguf


def _config(root, tmp_path, init_from, method, steps=4):
    return C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=16, data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="decoder_lm", init_from=str(init_from), pooling="mean",
                                attention="bidirectional"),
        method=method,
        optim=C.OptimConfig(lr=1e-2, warmup_steps=0, lora_rank=4, lora_alpha=8),
        train=C.TrainConfig(batch_size=8, steps=steps, ckpt_every=0, log_every=1,
                            num_devices=1),
        eval=C.EvalConfig(evaluators=(), reference_rows=False, bootstrap=0, sets=()))


@pytest.mark.slow
def test_mntp_then_contrastive_starts_from_the_adapted_decoder(tmp_path):
    root, gguf = _collection(tmp_path)
    first = _config(root, tmp_path, gguf, C.MethodConfig(name="mntp", mask_ratio=0.3))
    train_and_evaluate(first, tmp_path / "mntp", progress=False, verbose=False)
    log = [json.loads(line) for line in (tmp_path / "mntp" / "metrics.jsonl").read_text()
           .splitlines()]
    train = [r for r in log if "mntp_accuracy" in r]
    assert train and all(np.isfinite(r["loss"]) and r["masked_tokens"] > 0 for r in train)
    _, _, _, state = load_trained(tmp_path / "mntp")
    layer = jax.device_get(state.params)["encoder"]["layer_0"]["q_proj"]
    assert np.abs(layer["lora_b"]).max() > 0  # the adapters trained
    folded = layer["kernel"] + 2.0 * layer["lora_a"] @ layer["lora_b"]  # alpha / rank = 2

    second = _config(root, tmp_path, tmp_path / "mntp", C.MethodConfig(
        name="biencoder", objective="info_nce", temperature=0.1, proj_dim=0, tied_towers=True),
        steps=1)
    second = C.override(second, ["optim.lr=1e-9"])
    train_and_evaluate(second, tmp_path / "contrastive", progress=False, verbose=False)
    recorded = json.loads((tmp_path / "contrastive" / "config.json").read_text())
    assert recorded["data"]["tokenizer"] == str(gguf)  # the decoder's vocabulary, through the run
    assert recorded["encoder"]["width"] == TINY["width"]
    _, _, _, state2 = load_trained(tmp_path / "contrastive")
    start = jax.device_get(state2.params)["tower_a"]["encoder"]["layer_0"]["q_proj"]["kernel"]
    np.testing.assert_allclose(start, folded, rtol=1e-4, atol=1e-6)


def test_mntp_refuses_what_it_cannot_train_in_one_line(tmp_path):
    root, gguf = _collection(tmp_path)
    with pytest.raises(C.ConfigError, match="mask_token='<nope>'.*'_'") as info:
        train_and_evaluate(_config(root, tmp_path, gguf, C.MethodConfig(
            name="mntp", mask_token="<nope>")), tmp_path / "a", progress=False, verbose=False)
    assert "\n" not in str(info.value)
    with pytest.raises(C.ConfigError, match="decoder_lm") as info:
        train_and_evaluate(C.override(C.load("simclr_mnist1d"), [
            "method.name=mntp", "train.steps=1", "train.num_devices=1"]), tmp_path / "b",
            progress=False, verbose=False)
    assert "\n" not in str(info.value)
