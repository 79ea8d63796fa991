"""The Embedder's token-id batches cut to their texts: the same embeddings as full-width batches,
in the input's order, for a BERT (pad 0) and a decoder LLM (pad -1), left-padded rows untouched."""

import chex
import jax
import numpy as np
import pytest

from repr_jax.encoders.decoder_lm import DecoderLM
from repr_jax.encoders.text_transformer import TextTransformer
from repr_jax.eval import Embedder
from repr_jax.eval.base import bucket_width

WIDTH = 64


def _ids(rng, n, width, pad, vocab=50):
    lengths = rng.permutation(np.resize(np.arange(1, width + 1), n))  # every length, shuffled
    ids = np.full((n, width), pad, np.int32)
    for i, k in enumerate(lengths):
        ids[i, :k] = rng.integers(1, vocab, k)
    return ids, lengths


def _models():
    bert = TextTransformer(vocab_size=50, width=16, depth=2, num_heads=2, mlp_dim=32,
                           max_len=64, pooling="mean")
    decoder = DecoderLM(vocab_size=50, width=16, depth=2, num_heads=2, num_kv_heads=1,
                        mlp_dim=32, pooling="last_token")
    return ((bert, 0), (decoder, -1))


def test_trimmed_batches_give_the_full_width_embeddings_in_order():
    rng = np.random.default_rng(0)
    for module, pad in _models():
        ids, lengths = _ids(rng, WIDTH + 3, WIDTH, pad)
        params = module.init(jax.random.PRNGKey(0), ids[:2])["params"]
        def traced(seen, module=module):  # a new function each time: jit traces each shape once
            def fn(p, x):
                seen.append(x.shape[1])
                return module.apply({"params": p}, x)[0]
            return fn

        widths_full, widths_cut = [], []
        full = Embedder(traced(widths_full), {}, batch_size=8).embed(params, ids)
        cut = Embedder(traced(widths_cut), {}, batch_size=8, pad_id=pad).embed(params, ids)
        chex.assert_trees_all_close(cut, full, atol=1e-5, rtol=1e-5)
        assert widths_full == [ids.shape[1]]
        # shortest first, 8 a batch: each batch cut to its longest text's rung, compiled once
        longest = np.sort(lengths)[7::8].tolist() + [WIDTH]
        assert sorted(widths_cut) == sorted({bucket_width(n) for n in longest})
        assert sorted(widths_cut) == [6, 16, 24, 32, 48, 64]


def test_a_left_padded_batch_is_not_cut():
    """Only columns that are padding in every row go: left padding leaves the last column used."""
    e = Embedder(lambda p, x: x, {}, batch_size=4, pad_id=-1)
    left = np.full((4, 48), -1, np.int32)
    left[:, -5:] = 7
    assert e._trimmed(left).shape == (4, 48)
    right = np.full((4, 48), -1, np.int32)
    right[:, :5] = 7
    assert e._trimmed(right).shape == (4, 6)


def test_sparse_features_equal_the_dense_ones_in_order_and_from_the_disk_cache(tmp_path):
    """``embed(..., sparse=True)``: the same values as the dense pass, as CSR, back in the input's
    order after shortest-first batches; kept on disk and read back equal; a view refuses."""
    import scipy.sparse as sp
    rng = np.random.default_rng(1)
    ids, _ = _ids(rng, 53, 32, 0)
    proj = rng.normal(size=(50, 40)).astype(np.float32)

    def term_weights(p, x):  # mostly zero, non-negative, like SPLADE's
        return jax.nn.relu(jax.numpy.asarray(p)[x].max(axis=1) - 2.0)
    dense = np.asarray(Embedder(term_weights, {}, batch_size=8).embed(proj, ids))
    assert 0 < (dense > 0).mean() < 0.5
    cached = Embedder(term_weights, {}, batch_size=8, pad_id=0, cache_dir=tmp_path)
    got = cached.embed(proj, ids, sparse=True)
    assert sp.isspmatrix_csr(got) and got.dtype == np.float32 and got.nnz == (dense > 0).sum()
    np.testing.assert_array_equal(got.toarray(), dense)
    assert [p.name.split("-")[0] for p in tmp_path.glob("*.npz")] == ["x_sparse"]
    again = Embedder(term_weights, {}, batch_size=8, pad_id=0, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.embed(proj, ids, sparse=True).toarray(), dense)
    view = cached.view(lambda f: f[:, :4])
    with pytest.raises(ValueError, match="view's features are dense"):
        view.embed(proj, ids, sparse=True)
