"""``repr-jax features`` (:mod:`repr_jax.train.features`): a planted latent's top contexts are the
planted (example, position) pairs by activation, its frequency and histogram the hand-counted
ones, and its sample lies outside its top; the running top-k merge is the brute-force top-k over
all vectors at any batch size; a decoder's promoted and suppressed tokens are the brute-force
argsort of ``W_dec @ E.T``; token strings read as text; end to end, the CLI's JSON follows the
schema, its counts and top rows are the SAE's own over the whole store, and a marked token is the
token at its (example, position) of the re-tokenised text; the page filters, sorts and opens a
latent in a headless browser (skipped without one); bad inputs are one line each."""

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from repr_jax.train import features as feat


def _relu_encoder(w_DxL, b_L=None):
    b_L = np.zeros(w_DxL.shape[1], np.float32) if b_L is None else b_L
    return lambda x_BxD: np.maximum(np.asarray(x_BxD) @ w_DxL + b_L, 0.0)


def _planted():
    """200 vectors (20 examples x 10 positions) of width 6; latent 1 reads direction u = e_0,
    which 7 planted vectors carry with known activations and no other does; latent 2 never
    fires (it reads -e_1, and every vector's e_1 component is positive)."""
    rng = np.random.default_rng(0)
    n, d = 200, 6
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:, 0] = 0.0
    x[:, 1] = np.abs(x[:, 1]) + 0.1
    index = np.stack([np.arange(n) // 10, np.arange(n) % 10], 1).astype(np.int32)
    planted = {(3, 4): 10.0, (17, 0): 9.0, (5, 9): 8.0, (0, 1): 6.0, (11, 5): 4.0,
               (8, 8): 2.0, (19, 2): 1.0}
    for (e, p), a in planted.items():
        x[e * 10 + p, 0] = a
    w = rng.normal(size=(d, 4)).astype(np.float32)
    w[:, 1] = np.eye(d)[0]
    w[:, 2] = -np.eye(d)[1]
    return x, index, planted, _relu_encoder(w)


def test_a_planted_latents_top_contexts_frequency_and_histogram():
    x, index, planted, encode = _planted()
    s = feat.scan(encode, x, top=4, sample=2, bins=5, batch_size=32)
    rows = feat.feature_list(s, index, bins=5)
    f = rows[1]
    assert [(c["example"], c["position"], c["activation"]) for c in f["top"]] == [
        (3, 4, 10.0), (17, 0, 9.0), (5, 9, 8.0), (0, 1, 6.0)]
    assert f["fired"] == 7 and f["frequency"] == pytest.approx(7 / 200)
    assert f["mean_activation"] == pytest.approx(40 / 7, rel=1e-5)
    assert f["max_activation"] == 10.0
    # bins of [0, 10]: [0,2) holds 1, [2,4) 2, [4,6) 4, [6,8) 6, [8,10] 8, 9 and 10
    assert f["histogram"] == {"edges": [0.0, 2.0, 4.0, 6.0, 8.0, 10.0], "counts": [1, 1, 1, 1, 3]}
    sample = [(c["example"], c["position"]) for c in f["sample"]]
    assert len(sample) == 2 and set(sample) <= {(11, 5), (8, 8), (19, 2)}
    assert not set(sample) & {(c["example"], c["position"]) for c in f["top"]}
    acts = [c["activation"] for c in f["sample"]]
    assert acts == sorted(acts, reverse=True) and all(
        planted[pair] == a for pair, a in zip(sample, acts))
    dead = rows[2]
    assert dead["fired"] == 0 and dead["frequency"] == 0 and dead["top"] == dead["sample"] == []
    assert dead["histogram"]["counts"] == [0] * 5
    assert all(c["tokens"] is None and c["marked"] is None for c in f["top"])  # no contexts given


def _brute_force(z_NxL, top, bins):
    out = []
    for l in range(z_NxL.shape[1]):
        col = z_NxL[:, l]
        fired = np.flatnonzero(col > 0)
        order = fired[np.argsort(-col[fired], kind="stable")][:top]
        m = col.max()
        b = np.clip(np.floor(col[fired] / (m if m > 0 else 1) * bins), 0, bins - 1).astype(int)
        out.append((order, col[order], len(fired), np.bincount(b, minlength=bins), set(fired)))
    return out


def test_the_running_merge_is_the_brute_force_top_k_at_any_batch_size():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(100, 6)).astype(np.float32)
    w = rng.normal(size=(6, 9)).astype(np.float32)
    encode = _relu_encoder(w, np.full(9, -0.3, np.float32))
    z = encode(x)
    expected = _brute_force(z, top=5, bins=7)
    scans = [feat.scan(encode, x, top=5, sample=4, bins=7, batch_size=b) for b in (7, 64)]
    for s in scans:
        for l, (rows, vals, fired, hist, firings) in enumerate(expected):
            kept = s.top_row_LxK[l][s.top_row_LxK[l] >= 0]
            np.testing.assert_array_equal(kept, rows)
            np.testing.assert_allclose(s.top_val_LxK[l][:len(kept)], vals, rtol=1e-6)
            assert s.fired_L[l] == fired
            np.testing.assert_array_equal(s.hist_LxH[l], hist)
            sampled = s.sample_row_LxS[l][s.sample_row_LxS[l] >= 0]
            assert len(sampled) == min(4, fired - len(rows)) == len(set(sampled))
            assert set(sampled) <= firings - set(rows)
            np.testing.assert_allclose(s.sample_val_LxS[l][:len(sampled)], z[sampled, l],
                                       rtol=1e-6)
        np.testing.assert_allclose(s.max_L, z.max(axis=0), rtol=1e-6)
        np.testing.assert_allclose(s.sum_L, z.sum(axis=0), rtol=1e-5)
    # the sample's priorities belong to the rows, not the batches: the same draw
    np.testing.assert_array_equal(scans[0].sample_row_LxS, scans[1].sample_row_LxS)


def test_the_sample_is_drawn_anew_for_each_seed():
    """One latent firing on all 50 vectors (the top 1 kept): over 30 seeds the one sampled
    vector is one of the 49 others, and the draws spread over them."""
    x = np.linspace(1.0, 2.0, 50, dtype=np.float32)[:, None]
    encode = _relu_encoder(np.ones((1, 1), np.float32))
    chosen = [int(feat.scan(encode, x, top=1, sample=1, bins=3, batch_size=16, seed=seed)
                  .sample_row_LxS[0, 0]) for seed in range(30)]
    assert all(0 <= r < 49 for r in chosen)  # row 49 holds the largest: the top one
    assert len(set(chosen)) >= 15


def test_a_decoders_promoted_and_suppressed_tokens_are_the_brute_force_argsort():
    from tiny_llm import tiny_params
    embedding_VxD = tiny_params()["embed_tokens"]["embedding"]
    w_dec_LxD = np.random.default_rng(2).normal(size=(7, embedding_VxD.shape[1])).astype(
        np.float32)
    up_id, up, down_id, down = feat.logit_tokens(w_dec_LxD, embedding_VxD, k=10, chunk=3)
    logits_LxV = w_dec_LxD.astype(np.float64) @ embedding_VxD.T.astype(np.float64)
    order = np.argsort(-logits_LxV, axis=1)
    np.testing.assert_array_equal(up_id, order[:, :10])
    np.testing.assert_array_equal(down_id, order[:, ::-1][:, :10])
    np.testing.assert_allclose(up, np.take_along_axis(logits_LxV, order[:, :10], 1), rtol=1e-4)
    np.testing.assert_allclose(down, np.take_along_axis(logits_LxV, order[:, ::-1][:, :10], 1),
                               rtol=1e-4)
    assert up_id.shape == (7, 10) and (up[:, :1] >= up).all() and (down[:, :1] <= down).all()


def test_token_strings_read_as_text(tmp_path):
    from repr_jax.data.tokenizer import BPETokenizer, ByteTokenizer, WordPieceTokenizer
    from tiny_llm import tiny_params, write_gguf
    wp = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "play", "##ing", "cats"])
    string = feat.token_strings(wp)
    assert [string(i) for i in wp.encode(["playing cats"]).ids[0]] == [
        " [CLS]", " play", "ing", " cats", " [SEP]"]
    write_gguf(tmp_path / "tiny.gguf", tiny_params())
    bpe = BPETokenizer.from_gguf(tmp_path / "tiny.gguf")
    ids = bpe.tokenize("a the")
    string = feat.token_strings(bpe)
    assert "".join(string(i) for i in ids) == "a the" and string(bpe.vocab.index("Ġthe")) == " the"
    assert string(-2 - ids[0]) == "a"  # an instruction token reads as its token
    tok = ByteTokenizer()
    string = feat.token_strings(tok)
    assert [string(i) for i in tok.encode(["hi"]).ids[0]] == ["[CLS]", "h", "i", "[SEP]"]


def test_contexts_are_the_tokens_around_the_firing_one():
    import types
    from repr_jax.data.tokenizer import ByteTokenizer, Sides
    tok = ByteTokenizer()
    model = types.SimpleNamespace(tokenizer=tok, sides=Sides(32, 32),
                                  valid=lambda ids: ids != tok.pad_id)
    texts = ["abcdefghijklmnopqrstuvwxyz", "hi"]
    ctx = feat.contexts(model, texts, {(0, 20), (1, 1), (1, -1)}, before=3, after=2)
    assert ctx[(0, 20)] == (list("qrstuv"), 3)  # position 20 is "t" ([CLS] is position 0)
    assert ctx[(1, 1)] == (["[CLS]", "h", "i", "[SEP]"], 1)  # cut at the text's start and end
    assert ctx[(1, -1)] == (["[CLS]", "h", "i", "[SEP]"], None)  # a pooled embedding
    with pytest.raises(ValueError, match="not a token of its text"):
        feat.contexts(model, texts, {(1, 7)})


def test_the_page_embeds_the_json_so_no_text_closes_its_script():
    data = {"features": [{"top": [{"tokens": ["</script><b>&"]}]}], "latents": 1}
    html = feat.page(data)
    assert html.count("</script>") == 2  # the data element's and the code's
    blob = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert json.loads(blob.group(1)) == data
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing fetched


# --------------------------------------------------------------------------------------------------
# End to end: a text run, its layer-1 store, a TopK SAE on it, the CLI
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sae_run(tmp_path_factory):
    """A two-block text_transformer trained 2 steps on a pairs file, its layer-1 store, a TopK
    SAE (32 latents, k 4) trained 10 steps on it, and the CLI's output for it."""
    from repr_jax import config as C
    from repr_jax.train import activations as acts
    from repr_jax.train import train_and_evaluate
    root = tmp_path_factory.mktemp("features")
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"what is item {i}?" + " really" * (i % 5),
                                         "positive": f"item {i} is a thing of kind {i % 7}"})
                             + "\n" for i in range(60)))
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=f"pairs:{pairs}", max_len=24),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=2),
        method=C.MethodConfig(name="biencoder", objective="info_nce", proj_dim=16),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=(), reference_rows=False))
    train_and_evaluate(cfg, root / "run", progress=False, verbose=False)
    acts.activations(out=root / "store", layer=1, data=f"pairs:{pairs}",
                     workdir=str(root / "run"), progress=False)
    _train_sae(root / "store", root / "sae", latents=32, steps=10)
    out = root / "browser"
    proc = subprocess.run([sys.executable, "-m", "repr_jax.cli", "features", "--workdir",
                           str(root / "sae"), "--out", str(out), "--top", "5", "--sample", "3",
                           "--bins", "8", "--batch-size", "100", "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return dict(root=root, pairs=pairs, run=root / "run", store=root / "store", sae=root / "sae",
                out=out, stderr=proc.stderr)


def _check_schema(data):
    """``features.json`` as the module docstring fixes it (every key, its type)."""
    assert data["format"] == "repr_jax.features" and data["version"] == 1
    for key, kind in (("run", str), ("store", str), ("encoder", str), ("data", str),
                      ("latents", int), ("tokens_seen", int), ("dead", int), ("top", int),
                      ("sample", int), ("bins", int), ("step", int), ("created_by", str)):
        assert isinstance(data[key], kind), key
    assert len(data["features"]) == data["latents"]
    for i, f in enumerate(data["features"]):
        assert set(f) == {"latent", "frequency", "fired", "mean_activation", "max_activation",
                          "histogram", "top", "sample"}
        assert f["latent"] == i and 0 <= f["frequency"] <= 1
        assert len(f["histogram"]["edges"]) == data["bins"] + 1
        assert sum(f["histogram"]["counts"]) == f["fired"]
        assert len(f["top"]) == min(data["top"], f["fired"])
        assert len(f["sample"]) == min(data["sample"], f["fired"] - len(f["top"]))
        for c in f["top"] + f["sample"]:
            assert set(c) == {"example", "position", "activation", "tokens", "marked"}
            assert c["activation"] > 0 and 0 <= c["marked"] < len(c["tokens"])
            assert all(isinstance(t, str) for t in c["tokens"])


@pytest.mark.slow
def test_the_cli_writes_the_saes_own_features_with_their_tokens(sae_run):
    from repr_jax.data import activations as store_lib
    from repr_jax.data.tokenizer import SPECIALS, Sides, make_tokenizer
    from repr_jax.train.activations import texts_of
    from repr_jax.train.run import load_trained
    data = json.loads((sae_run["out"] / "features.json").read_text())
    _check_schema(data)
    assert re.search(r"features: 32 latents \(\d+ dead\) over [\d,]+ vectors -> .*index\.html",
                     sae_run["stderr"])
    html = (sae_run["out"] / "index.html").read_text()
    assert '"format":"repr_jax.features"' in html  # embedded: nothing is fetched or loaded
    assert not re.search(r"fetch\(|XMLHttpRequest|<script[^>]* src=|<link[^>]* href=", html)
    # the SAE's own latents over the whole store, computed here
    store = store_lib.open_store(sae_run["store"])
    _, _, method, state = load_trained(sae_run["sae"])
    z = np.asarray(method.embed(state.variables, np.asarray(store.vectors)))
    assert data["tokens_seen"] == len(z) and data["dead"] == int(((z > 0).sum(0) == 0).sum())
    assert data["dead"] < 32
    # the re-tokenised texts: each marked token is the token at its (example, position)
    cfg, _, _, _ = load_trained(sae_run["run"], text_only=True)
    ids = Sides.of_section(cfg.data).encode(make_tokenizer(cfg.data.tokenizer),
                                            texts_of(f"pairs:{sae_run['pairs']}"), "doc")
    row_of = {tuple(map(int, ep)): r for r, ep in enumerate(np.asarray(store.index))}
    checked = 0
    for f in data["features"]:
        col = z[:, f["latent"]]
        assert f["fired"] == int((col > 0).sum())
        expected = np.argsort(-col, kind="stable")[:len(f["top"])]
        assert [row_of[(c["example"], c["position"])] for c in f["top"]] == expected.tolist()
        for c in f["top"] + f["sample"]:
            assert c["activation"] == pytest.approx(col[row_of[(c["example"], c["position"])]],
                                                    rel=1e-4)
            token = int(ids[c["example"], c["position"]])
            text = SPECIALS[token] if token < len(SPECIALS) else chr(token - len(SPECIALS))
            assert c["tokens"][c["marked"]] == text
            checked += 1
    assert checked > 50


@pytest.mark.slow
def test_bad_inputs_are_one_line_each(sae_run, tmp_path):
    root = sae_run["root"]
    with pytest.raises(ValueError, match="a biencoder run; .* method.name=sae"):
        feat.features(workdir=root / "run", out=tmp_path / "a", progress=False)
    with pytest.raises(ValueError, match="lies inside the run folder"):
        feat.features(workdir=sae_run["sae"], out=sae_run["sae"] / "browser", progress=False)
    with pytest.raises(ValueError, match="is an input of this command"):
        feat.features(workdir=sae_run["sae"], out=sae_run["store"], progress=False)
    moved = tmp_path / "sae"  # a copy of the SAE run whose store is not there
    shutil.copytree(sae_run["sae"], moved)
    config = (moved / "config.json").read_text()
    (moved / "config.json").write_text(config.replace(str(sae_run["store"]),
                                                      str(tmp_path / "gone")))
    proc = subprocess.run([sys.executable, "-m", "repr_jax.cli", "features", "--workdir",
                           str(moved), "--out", str(tmp_path / "b"), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("repr-jax: error: --workdir") and "gone" in proc.stderr
    assert "no such folder" in proc.stderr


@pytest.mark.slow
def test_a_decoder_stores_features_name_the_tokens_its_latents_promote(tmp_path):
    """A tiny decoder read from its GGUF (tied embedding), its layer-1 store over a BEIR corpus,
    an SAE on it: each latent's promoted and suppressed tokens are the brute-force argsort of
    ``W_dec @ E.T``, and each context's marked token is the re-tokenised text's (byte-level BPE,
    the first token of each text left out of the store)."""
    from repr_jax.data import beir
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    from repr_jax.train import activations as acts
    from repr_jax.train.run import load_trained
    from tiny_llm import tiny_params, write_gguf
    coll = beir.synthetic_collection(tmp_path / "coll", num_docs=40, num_queries=6, num_train=20,
                                     seed=2)
    gguf = tmp_path / "tiny.gguf"
    params = tiny_params()
    write_gguf(gguf, params)
    acts.activations(out=tmp_path / "store", layer=1, data=f"beir:{coll}", init_from=str(gguf),
                     max_len=32, progress=False)
    _train_sae(tmp_path / "store", tmp_path / "sae", latents=24, steps=5)
    data = feat.features(workdir=tmp_path / "sae", out=tmp_path / "out", top=4, sample=2,
                         bins=6, progress=False)
    assert data["encoder"] == "decoder_lm" and data["latents"] == 24
    _, _, _, state = load_trained(tmp_path / "sae")
    logits_LxV = (np.asarray(state.params["sae"]["W_dec"], np.float64)
                  @ params["embed_tokens"]["embedding"].T.astype(np.float64))
    tokenizer = make_tokenizer(str(gguf))
    string = feat.token_strings(tokenizer)
    for f in data["features"]:
        order = np.argsort(-logits_LxV[f["latent"]])
        assert [t["token"] for t in f["promotes"]] == [string(i) for i in order[:10]]
        assert [t["token"] for t in f["suppresses"]] == [string(i) for i in order[::-1][:10]]
        assert f["promotes"][0]["logit"] == pytest.approx(logits_LxV[f["latent"], order[0]],
                                                          rel=1e-4)
    ids = Sides(32, 32).encode(tokenizer, acts.texts_of(f"beir:{coll}"), "doc")
    firings = [c for f in data["features"] for c in f["top"] + f["sample"]]
    assert firings and all(c["position"] >= 1 for c in firings)  # the first token is skipped
    for c in firings:
        assert c["tokens"][c["marked"]] == string(ids[c["example"], c["position"]])
    assert '"promotes":[{"token":' in (tmp_path / "out" / "index.html").read_text()


def _browser():
    """A headless Chrome driven by selenium, or the reason there is none."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None, "selenium is not installed"
    binary = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                   if shutil.which(b)), None)
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        return None, "no chromium/chrome binary and chromedriver on PATH"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    try:
        return webdriver.Chrome(service=Service(driver), options=options), ""
    except Exception as e:  # noqa: BLE001 - any failure to start is a reason to skip
        return None, f"chrome did not start ({str(e).splitlines()[0]})"


@pytest.mark.slow
def test_the_page_lists_filters_and_opens_latents_in_a_browser(sae_run):
    browser, why = _browser()
    if browser is None:
        pytest.skip(f"no headless browser: {why}")
    from selenium.webdriver.common.by import By
    data = json.loads((sae_run["out"] / "features.json").read_text())
    try:
        browser.get((sae_run["out"] / "index.html").as_uri())
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.latent")
        assert len(rows) == data["latents"] == 32
        by_freq = sorted(data["features"], key=lambda f: (-f["frequency"], f["latent"]))
        assert [int(r.get_attribute("data-latent")) for r in rows] == [
            f["latent"] for f in by_freq]  # sorted by frequency, descending
        browser.find_element(By.CSS_SELECTOR, 'th[data-key="latent"]').click()
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.latent")
        assert [int(r.get_attribute("data-latent")) for r in rows] == list(range(32))
        search = browser.find_element(By.ID, "search")
        search.send_keys("no such text zzz")
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.latent")
        search.clear()
        live = next(f for f in data["features"] if f["fired"])
        word = re.findall("[a-z]{4,}", "".join(live["top"][0]["tokens"]).lower())[0]
        search.send_keys(word)
        shown = {int(r.get_attribute("data-latent"))
                 for r in browser.find_elements(By.CSS_SELECTOR, "tr.latent")}
        assert live["latent"] in shown
        assert shown == {f["latent"] for f in data["features"] if any(
            word in "".join(c["tokens"]).lower() for c in f["top"] + f["sample"])}
        browser.find_element(By.CSS_SELECTOR, f'tr.latent[data-latent="{live["latent"]}"]').click()
        items = browser.find_elements(By.CSS_SELECTOR, "#detail ol.top li")
        assert len(items) == len(live["top"])
        first = live["top"][0]
        mark = items[0].find_element(By.TAG_NAME, "mark").get_attribute("textContent")
        assert mark == first["tokens"][first["marked"]]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#detail svg rect")) == data["bins"]
    finally:
        browser.quit()


def _train_sae(store, workdir, *, latents: int, steps: int) -> None:
    """A TopK SAE (k 4) trained ``steps`` steps of 64 on ``store``, no evaluation."""
    from conftest import sae_config

    from repr_jax.train import train_and_evaluate
    cfg = sae_config(f"data.name=activations:{store}", f"method.latents={latents}",
                     "eval.evaluators=()", steps=steps, warmup=0, bootstrap=0)
    train_and_evaluate(cfg, workdir, progress=False, verbose=False)
