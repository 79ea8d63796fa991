"""data.length_buckets: training batches of token-id pairs cut to their longest text (a power of
two >= 16): the same training as full-length batches, a few compiled shapes, other fields and
other processes' shapes untouched. data.pack_tokens: their valid tokens' positions packed, the
same training again."""

import numpy as np

from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.data.pipeline import MIN_BUCKET, PACK_STEPS, BatchStream, length_bucketed
from repr_jax.train.run import single_device_step


def test_each_side_is_cut_to_its_longest_text_as_a_power_of_two():
    x = np.full((4, 96), -1, np.int32)
    x[:, :5] = 3
    x_pos = np.full((4, 96), -1, np.int32)
    x_pos[0, :40] = 7
    neg = np.full((4, 2, 96), -1, np.int32)
    neg[1, 1, :17] = 9
    label = np.arange(4)
    out = length_bucketed({"x": x, "x_pos": x_pos, "negatives": neg, "label": label}, -1)
    assert out["x"].shape == (4, MIN_BUCKET) and out["x_pos"].shape == (4, 64)
    assert out["negatives"].shape == (4, 2, 32) and out["label"] is label
    assert (out["x_pos"][0, :40] == 7).all()
    left = np.full((4, 96), -1, np.int32)
    left[:, -3:] = 2  # left padding: its last column is used, nothing is cut
    assert length_bucketed({"x": left}, -1)["x"].shape == (4, 96)
    full = np.full((2, 40), 5, np.int32)  # never past the stored length
    assert length_bucketed({"x": full}, 0)["x"].shape == (2, 40)
    stream = BatchStream({"x": x, "x_pos": x_pos, "label": label}, batch_size=4, seed=0,
                         pad_id=-1)
    assert stream.batch(0)["x"].shape == (4, MIN_BUCKET)
    assert stream.batch(0, process_index=1, process_count=2)["x"].shape == (2, 96)  # hosts agree


def test_packed_positions_are_the_valid_tokens_then_the_sentinel():
    x = np.zeros((4, 16), np.int32)
    lengths = [3, 1, 5, 2]  # 11 of 64 tokens: capacity 16, the first multiple of 64 / 8 past 11
    for i, n in enumerate(lengths):
        x[i, :n] = 7
    x_pos = np.full((4, 16), 5, np.int32)  # full: no packing
    out = length_bucketed({"x": x, "x_pos": x_pos, "negatives": x[:, None]}, 0, pack=True)
    step = 64 // PACK_STEPS
    assert out["x_pack"].dtype == np.int32 and len(out["x_pack"]) == 2 * step
    want = [r * 16 + c for r, n in enumerate(lengths) for c in range(n)]
    np.testing.assert_array_equal(out["x_pack"][:11], want)
    assert (out["x_pack"][11:] == 64).all()  # unused slots: the sentinel B T
    assert "x_pos_pack" not in out and "negatives_pack" not in out
    assert "x_pack" not in length_bucketed({"x": x}, 0)  # only when asked
    x[:, :15] = 7  # 60 of 64: past (PACK_STEPS - 1) / PACK_STEPS, left padded
    assert "x_pack" not in length_bucketed({"x": x}, 0, pack=True)


def _config(tmp_path, buckets: bool, pack: bool = True):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=60, num_queries=10,
                                     num_train=128, seed=1)
    return C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=256, data_dir=str(tmp_path / "tfds"),
                          length_buckets=buckets, pack_tokens=pack),
        encoder=C.EncoderConfig(name="text_transformer", width=32, depth=2, num_heads=2,
                                mlp_dim=64, pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=6, num_devices=1),
        eval=C.EvalConfig(evaluators=()))


def test_bucketed_and_packed_batches_train_as_full_length_ones_with_few_shapes(tmp_path):
    """Same losses step after step (params are not compared: the key bias's gradient is zero up
    to rounding, which Adam scales up to the learning rate either way)."""
    losses, shapes, packs = [], [], []
    for buckets, pack in ((False, False), (True, False), (True, True)):
        step, state, batches, hp, _ = single_device_step(_config(tmp_path, buckets, pack), 6)
        run = []
        for b in batches:
            state, metrics = step(state, b, hp)
            run.append(float(metrics["loss"]))
        losses.append(run)
        shapes.append({b["x"].shape[1] for b in batches} | {b["x_pos"].shape[1] for b in batches})
        packs.append(sum("x_pack" in b for b in batches))
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    np.testing.assert_allclose(losses[2], losses[0], rtol=1e-5)
    assert shapes[0] == {256} and max(shapes[1]) <= 128 and len(shapes[1]) <= 3
    assert packs == [0, 0, 6]  # the synthetic queries are short: every batch packs them


def test_packing_is_for_one_device(tmp_path):
    """Packed positions index the whole batch, which a mesh of several devices (or hosts) splits:
    such a run trains on the bucketed batches without them."""
    from repr_jax.train.run import batch_packs
    cfg = _config(tmp_path, True, True)
    assert batch_packs(cfg) and batch_packs(cfg, 1)
    assert not batch_packs(cfg, 8) and not batch_packs(C.override(cfg, ["data.pack_tokens=False"]))
