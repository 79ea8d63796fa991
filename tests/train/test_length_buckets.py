"""data.length_buckets: training batches of token-id pairs cut to their longest text (a power of
two >= 16): the same training as full-length batches, a few compiled shapes, other fields and
other processes' shapes untouched."""

import numpy as np

from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.data.pipeline import MIN_BUCKET, BatchStream, length_bucketed
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


def _config(tmp_path, buckets: bool):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=60, num_queries=10,
                                     num_train=128, seed=1)
    return C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=256, data_dir=str(tmp_path / "tfds"),
                          length_buckets=buckets),
        encoder=C.EncoderConfig(name="text_transformer", width=32, depth=2, num_heads=2,
                                mlp_dim=64, pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=6, num_devices=1),
        eval=C.EvalConfig(evaluators=()))


def test_bucketed_batches_train_as_full_length_ones_with_few_shapes(tmp_path):
    """Same losses step after step (params are not compared: the key bias's gradient is zero up
    to rounding, which Adam scales up to the learning rate either way)."""
    losses, shapes = [], []
    for buckets in (False, True):
        step, state, batches, hp, _ = single_device_step(_config(tmp_path, buckets), 6)
        run = []
        for b in batches:
            state, metrics = step(state, b, hp)
            run.append(float(metrics["loss"]))
        losses.append(run)
        shapes.append({b["x"].shape[1] for b in batches} | {b["x_pos"].shape[1] for b in batches})
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert shapes[0] == {256} and max(shapes[1]) <= 128 and len(shapes[1]) <= 3
