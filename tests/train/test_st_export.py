"""``repr-jax export --format sentence-transformers`` of two-tower and decoder models: in
sentence-transformers, ``encode_query`` / ``encode_document`` give repr_jax's query and document
towers' embeddings, and the same nDCG. Runs where sentence-transformers (and torch) are installed
(``pip install -e ".[interop]"``); CI installs neither."""

import json

import numpy as np
import pytest

from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.data.tokenizer import Sides, make_tokenizer
from repr_jax.train import train_and_evaluate
from repr_jax.train.export import export_run
from repr_jax.train.run import load_trained

from tiny_llm import tiny_params, write_gguf

st = pytest.importorskip("sentence_transformers",
                         reason="sentence-transformers (and torch) absent: the optional interop "
                                "check runs where pip install sentence-transformers was done")


def _collection(tmp_path):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=120, num_queries=12,
                                     num_train=80, seed=8)
    return root, beir.read_collection(root)


def _ndcg10(q, d, collection):
    """nDCG@10 of the test queries over the whole corpus."""
    from repr_jax.eval.retrieval import retrieval_metrics
    r = collection.qrels[collection.test_split]
    used = np.unique(r["query"])
    qrels = np.zeros((len(used), len(collection.doc_ids)), np.int32)
    qrels[np.searchsorted(used, r["query"]), r["doc"]] = r["grade"]
    return retrieval_metrics(q[used] @ d.T, qrels, ks=(10,))["ndcg@10"]


def _compare(tmp_path, cfg, workdir):
    train_and_evaluate(cfg, workdir, progress=False, verbose=False)
    out = tmp_path / "st"
    export_run(workdir, "sentence-transformers", out)
    model = st.SentenceTransformer(str(out), device="cpu")
    cfg, _, method, state = load_trained(workdir)  # as recorded: a decoder's tokenizer resolved
    root = cfg.data.name[len("beir:"):]
    collection = beir.read_collection(root)
    queries, docs = list(collection.query_texts), list(collection.doc_texts)
    sides = Sides.of_section(cfg.data)
    tok = make_tokenizer(cfg.data.tokenizer)
    ours_q = np.array(method.embed_query(state.variables, sides.encode(tok, queries, "query")))
    ours_d = np.array(method.embed_pos(state.variables, sides.encode(tok, docs, "doc")))
    if cfg.eval.retrieval.similarity == "cosine":
        ours_q /= np.linalg.norm(ours_q, axis=1, keepdims=True)
        ours_d /= np.linalg.norm(ours_d, axis=1, keepdims=True)
    theirs_q = model.encode_query(queries, convert_to_numpy=True)
    theirs_d = model.encode_document(docs, convert_to_numpy=True)
    np.testing.assert_allclose(theirs_q, ours_q, atol=1e-4)
    np.testing.assert_allclose(theirs_d, ours_d, atol=1e-4)
    assert abs(_ndcg10(theirs_q, theirs_d, collection) - _ndcg10(ours_q, ours_d, collection)
               ) < 1e-6
    assert not np.allclose(theirs_q[:, :4], model.encode_document(queries)[:, :4], atol=1e-3) \
        or cfg.method.tied_towers  # two towers: the routes differ
    return out


def test_a_two_tower_bert_exports_both_towers_and_its_projection(tmp_path):
    root, _ = _collection(tmp_path)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "topic"]
                               + [f"w{i}" for i in range(2000)] + [str(i) for i in range(20)]))
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=24, doc_max_len=32,
                          data_dir=str(tmp_path / "tfds"), tokenizer=str(vocab),
                          query_prefix="topic "),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                              proj_dim=16),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=5, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=0,
                          sets=()))
    out = _compare(tmp_path, cfg, tmp_path / "run")
    router = json.loads((out / "router_config.json").read_text())
    assert set(router["structure"]) == {"query", "document"}
    assert any(name.endswith("_Dense") for name in router["structure"]["query"])
    # the model card's usage example runs as written against this export (issue 49)
    card = (out / "README.md").read_text()
    code = card.split("## Usage", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(code.replace("path/to/this/folder", str(out)), scope)
    assert tuple(scope["model"].similarity(scope["queries"], scope["documents"]).shape) == (1, 2)


def test_a_decoder_with_lora_tied_towers_and_instructions_exports_as_llama(tmp_path):
    root, _ = _collection(tmp_path)
    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    for pooling in ("last_token", "mean"):
        cfg = C.Config(
            seed=0,
            data=C.DataConfig(name=f"beir:{root}", max_len=32, data_dir=str(tmp_path / "tfds"),
                              query_prefix="the:", doc_prefix="he:"),
            encoder=C.EncoderConfig(name="decoder_lm", init_from=str(gguf), pooling=pooling),
            method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                                  proj_dim=0, tied_towers=True),
            optim=C.OptimConfig(lr=1e-2, warmup_steps=0, lora_rank=4),
            train=C.TrainConfig(batch_size=16, steps=4, ckpt_every=0, num_devices=1),
            eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=0,
                              sets=()))
        out = _compare(tmp_path / pooling, cfg, tmp_path / pooling / "run")
        prompts = json.loads((out / "config_sentence_transformers.json").read_text())["prompts"]
        assert prompts == {"query": "the:", "document": "he:"}
