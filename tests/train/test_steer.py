"""``repr-jax steer``. A decoder, on a tiny Llama GGUF: alpha 0 is the model's own next-token
distribution, a steered last block equals the final norm of (block output + alpha d) computed by
hand, the greedy loop equals argmax decoding by hand, a direction toward a word's unembedding
raises its log-probability more than random directions of the same norm. A text embedder, on a
tiny randomly initialised text_transformer: a steered query equals the next block and the pooling
applied by hand to (block output + alpha d), the ranking numbers are the retrieval evaluator's
nDCG and the mean rank, alpha 0 is exactly the clean ranking, a planted direction raises the
concept's documents beyond random directions (and MiniLM's, from the command line). The bad
inputs of both are one line, and each one's options are refused for the other."""

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

from conftest import needs_minilm
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


# --------------------------------------------------------------------------------------------------
# A text embedder: the concept's documents' ranking
# --------------------------------------------------------------------------------------------------

CONCEPT = ["cat", "kitten"]
QUERIES = ["where is the bank", "a red car on the road", "how to bake bread", "rain in spring",
           "the old library", "music at night"]
FILLER = ["river", "stone", "green", "market", "paper", "window", "garden", "silver", "storm",
          "table", "mountain", "letter", "coffee", "bridge", "forest", "engine"]


def _documents(n=40, concept_every=4, seed=0):
    """``n`` documents of five filler words; every ``concept_every``-th holds a concept word."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        words = list(rng.choice(FILLER, 5))
        if i % concept_every == 0:
            words[rng.integers(5)] = CONCEPT[(i // concept_every) % len(CONCEPT)]
        docs.append(" ".join(words))
    return docs


def _tiny_embedder():
    """A two-block text_transformer (width 32, mean pooling) on bytes, randomly initialised, as
    ``load_model`` returns one."""
    from repr_jax.data.tokenizer import ByteTokenizer, Sides
    from repr_jax.encoders.text_transformer import TextTransformer
    from repr_jax.train.activations import Model, _layers_fn, _token_masks
    tok = ByteTokenizer()
    module = TextTransformer(vocab_size=len(tok.vocab), width=32, depth=2, num_heads=2,
                             mlp_dim=64, max_len=64, pad_id=tok.pad_id)
    variables = module.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    model = Model("text_transformer", 2, variables, _layers_fn(module), variables,
                  lambda v, x: module.apply(v, x)[0], dict(model="tiny-embedder", step=None),
                  tok, Sides(48, 48), module=module)
    model.valid, model.kept, model.text = _token_masks("text_transformer", tok.pad_id)
    return model


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    root = tmp_path_factory.mktemp("steer_embedder")
    (root / "queries.txt").write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    docs = _documents()
    (root / "docs.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    return dict(root=root, model=_tiny_embedder(), docs=docs, queries=root / "queries.txt",
                documents=root / "docs.txt")


@pytest.fixture
def loads_tiny(embedder, monkeypatch):
    """``steer``'s model loader returns the tiny embedder."""
    from repr_jax.train import activations
    monkeypatch.setattr(activations, "load_model", lambda **kw: (embedder["model"], None))


def _embed_kw(embedder, **change):
    kw = dict(init_from="tiny-embedder", layer=0, direction=str(embedder["root"] / "d.npy"),
              alphas=[4.0], prompts=str(embedder["queries"]), words=CONCEPT,
              documents=str(embedder["documents"]), random=4, show=2, bootstrap=0)
    np.save(embedder["root"] / "d.npy", S.random_directions(1, 32, seed=9)[0])
    kw.update(change)
    return kw


def _query_rows(model, texts):
    ids = model.sides.encode(model.tokenizer, texts, "query")
    return ids, np.asarray(model.valid(ids))


def test_concept_documents_are_whole_words_in_any_case():
    docs = ["A CAT sat", "concatenate", "cats", "(kitten)", "cat-like", ""]
    assert S.concept_documents(docs, ["cat", "kitten"]).tolist() == [
        True, False, False, True, True, False]


def test_a_steered_query_is_the_later_block_and_pooling_of_block_output_plus_alpha_d(embedder):
    """By hand: block 0's states with ``alpha d`` added at the query's tokens, block 1 applied
    to them (its own parameters, the padding bias), then the mean over the tokens."""
    from repr_jax.encoders.text_transformer import BertLayer
    model = embedder["model"]
    ids, valid = _query_rows(model, QUERIES)
    d_QxD = S.random_directions(len(QUERIES), 32, seed=5)
    alpha = 3.0
    got = np.asarray(S.steered_embeddings(model)(model.embed_variables, ids, valid,
                                                 jnp.asarray(d_QxD), alpha, layer=0))
    h = np.asarray(model.layers(model.variables, ids)[0])
    h = np.where(valid[..., None], h + alpha * d_QxD[:, None, :], h)
    bias = np.where(valid, 0.0, np.finfo(np.float32).min)[:, None, None, :]
    m = model.module
    out = np.asarray(BertLayer(m.width, m.num_heads, m.mlp_dim, m.eps).apply(
        {"params": model.variables["params"]["layer_1"]}, jnp.asarray(h), jnp.asarray(bias)))
    want = (out * valid[..., None]).sum(axis=1) / valid.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=2e-5)
    clean = np.asarray(model.embed(model.embed_variables, ids))
    assert np.abs(got - clean).max() > 0.05  # the steering did something


def test_concept_ranking_is_the_evaluators_ndcg_and_the_mean_rank(embedder):
    from repr_jax.eval.retrieval import retrieval_metrics
    rng = np.random.default_rng(0)
    q, d = rng.standard_normal((5, 8)), rng.standard_normal((30, 8))
    concept = np.zeros(30, bool)
    concept[[2, 7, 19]] = True
    ndcg, mean_rank, top = map(np.asarray, S.concept_ranking(
        jnp.asarray(q), jnp.asarray(d), jnp.asarray(concept)))
    scores = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        d / np.linalg.norm(d, axis=1, keepdims=True)).T
    want = retrieval_metrics(scores, np.broadcast_to(concept, scores.shape).astype(int),
                             ks=(10,), per_query=True)["ndcg@10"]
    np.testing.assert_allclose(ndcg, np.asarray(want), atol=1e-6)
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.argsort(order, axis=1) + 1
    np.testing.assert_allclose(mean_rank, ranks[:, concept].mean(axis=1), atol=1e-5)
    np.testing.assert_array_equal(top, order[:, :S.TOP])


def test_alpha_zero_is_exactly_the_clean_ranking(embedder, loads_tiny, capsys):
    result = S.steer(**_embed_kw(embedder, alphas=[0.0], random=3, show=6))
    row = result["rows"][0]
    for key in ("concept", "random", "difference", "rank_concept", "rank_random",
                "rank_difference"):
        assert row[key] == 0.0, key
    for tops in result["top"].values():
        assert tops["0"] == tops["clean"]
    model = embedder["model"]
    ids, valid = _query_rows(model, QUERIES)
    ids = S.trim_columns(ids, valid)
    docs = S.embed_documents(model, model.sides.encode(model.tokenizer, embedder["docs"], "doc"))
    clean = np.asarray(model.embed(model.embed_variables, ids))
    _, _, top = S.concept_ranking(jnp.asarray(clean), jnp.asarray(docs),
                                  jnp.asarray(S.concept_documents(embedder["docs"], CONCEPT)))
    assert [[t["index"] for t in result["top"][q]["clean"]] for q in QUERIES] == \
        np.asarray(top).tolist()
    assert result["concept_documents"] == 10 and result["documents"] == 40
    assert "concept documents (holding one as a whole word): 10 of 40" in capsys.readouterr().out


def test_a_planted_direction_raises_the_concept_documents_more_than_random_ones(
        embedder, loads_tiny, capsys):
    """Toward the difference of means of block 0's token states, concept documents' minus the
    others', the concept documents rise: nDCG@10 up and mean rank down, by more than along
    random directions of the same norm, and more at the larger alpha."""
    model = embedder["model"]
    concept = S.concept_documents(embedder["docs"], CONCEPT)
    ids = model.sides.encode(model.tokenizer, embedder["docs"], "doc")
    valid = np.asarray(model.valid(ids))
    h = np.asarray(model.layers(model.variables, ids)[0])
    per_doc = (h * valid[..., None]).sum(1) / valid.sum(1, keepdims=True)
    np.save(embedder["root"] / "planted.npy",
            per_doc[concept].mean(0) - per_doc[~concept].mean(0))
    out = embedder["root"] / "steer.json"
    result = S.steer(**_embed_kw(embedder, direction=str(embedder["root"] / "planted.npy"),
                                 alphas=[2.0, 8.0], random=8, bootstrap=200, out=str(out)))
    small, large = result["rows"]
    for row in (small, large):
        assert row["concept"]["value"] > 0 and row["difference"]["low"] > 0
        assert row["rank_concept"]["value"] < 0 and row["rank_difference"]["high"] < 0
    assert large["concept"]["value"] > small["concept"]["value"]
    assert json.loads(out.read_text())["rows"] == result["rows"]
    printed = capsys.readouterr().out
    assert "| alpha | concept Δ nDCG@10 |" in printed and "(a text embedder" in printed
    assert printed.count("\n| 2 |") + printed.count("\n| 8 |") == 2
    assert f"'{QUERIES[0]}': top 5" in printed and f"'{QUERIES[2]}'" not in printed


@pytest.mark.parametrize("change, message", [
    (dict(direction="wide.npy"), "width 33, but layer 0 of tiny-embedder has width 32"),
    (dict(layer=5), "--layer 5: the text_transformer has 2 block\\(s\\)"),
    (dict(alphas=[float("inf")]), "--alpha inf: give finite numbers"),
    (dict(prompts="latin1.txt"), "--prompts .*: not UTF-8 text \\(byte 1"),
    (dict(documents="latin1.txt"), "--documents .*: not UTF-8 text \\(byte 1"),
    (dict(words=["zebra"]), "none of its 40 documents holds one of --words zebra"),
    (dict(documents=None), "--documents FILE: tiny-embedder is a text embedder"),
    (dict(new_tokens=5), "--new-tokens: tiny-embedder is a text embedder"),
    (dict(max_len=100), "--max-len 100: tiny-embedder reads at most 64 tokens a text"),
])
def test_bad_embedder_inputs_are_one_line(embedder, loads_tiny, change, message):
    root = embedder["root"]
    np.save(root / "wide.npy", np.ones(33))
    (root / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1")[2:])
    kw = _embed_kw(embedder)
    kw.update({k: (str(root / v) if k in ("direction", "prompts", "documents") and v else v)
               for k, v in change.items()})
    with pytest.raises(ValueError, match=message) as e:
        S.steer(**kw)
    assert "\n" not in str(e.value)


def test_documents_are_refused_for_a_decoder(tiny, embedder):
    np.save(tiny["root"] / "good.npy", np.ones(TINY["width"]))
    with pytest.raises(ValueError, match="--documents: .* is a decoder LLM"):
        S.steer(init_from=str(tiny["gguf"]), layer=0, direction=str(tiny["root"] / "good.npy"),
                alphas=[1.0], prompts=str(tiny["prompts"]), words=CONCEPT,
                documents=str(embedder["documents"]), max_len=16)


ANIMALS = ["The cat slept on the warm windowsill.", "A dog barked at the mail carrier.",
           "The horse galloped across the open field.", "Our cat knocked a glass off the table.",
           "The dog fetched the stick from the lake.", "A horse needs fresh hay every day."]
OTHERS = ["The stock market fell sharply on Monday.", "Preheat the oven before baking bread.",
          "The new phone has a larger battery.", "Parliament passed the budget.",
          "Rain is expected over the weekend.", "He fixed the leaking pipe under the sink.",
          "The library opens at nine.", "Solar panels convert sunlight into electricity.",
          "The train to the city was delayed.", "She paid the invoice by bank transfer.",
          "The guitar needs new strings.", "Tax returns are due in April.",
          "The bridge was closed for repairs.", "Coffee prices rose again this year.",
          "Add salt to the boiling water.", "The software update fixed the bug.",
          "Traffic was heavy on the highway.", "The printer ran out of ink."]


@pytest.mark.slow
@needs_minilm
def test_the_command_line_steers_minilms_queries_toward_animal_documents(tmp_path):
    """MiniLM's layer 3, toward the difference of means of its token states over the animal
    documents and the others: animal documents rise for unrelated queries, beyond random
    directions; --new-tokens is refused for it in one line."""
    model, _ = load_model(init_from="minilm", max_len=32, skip_first=0)
    docs = ANIMALS + OTHERS
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    (tmp_path / "q.txt").write_text("how to cook pasta\nbest laptop for students\n"
                                    "news about the election\ncheap flights to paris\n",
                                    encoding="utf-8")
    ids = model.sides.encode(model.tokenizer, docs, "doc")
    valid = np.asarray(model.valid(ids))
    h = np.asarray(model.layers(model.variables, ids)[3])
    per_doc = (h * valid[..., None]).sum(1) / valid.sum(1, keepdims=True)
    np.save(tmp_path / "d.npy", per_doc[:len(ANIMALS)].mean(0) - per_doc[len(ANIMALS):].mean(0))
    args = [sys.executable, "-m", "repr_jax.cli", "steer", "--init-from", "minilm", "--layer",
            "3", "--direction", str(tmp_path / "d.npy"), "--alpha", "8", "--prompts",
            str(tmp_path / "q.txt"), "--words", "cat,dog,horse", "--documents",
            str(tmp_path / "docs.txt"), "--random", "4", "--bootstrap", "200", "--max-len", "32",
            "--out", str(tmp_path / "out.json")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "concept documents (holding one as a whole word): 6 of 24" in r.stdout
    row = json.loads((tmp_path / "out.json").read_text())["rows"][0]
    assert row["difference"]["low"] > 0.2 and row["rank_difference"]["high"] < 0
    bad = subprocess.run(args[:-2] + ["--new-tokens", "3"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "--new-tokens: minilm is a text embedder" in bad.stderr
