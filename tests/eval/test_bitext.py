"""Bitext mining: gettext reading, MTEB's metrics (vs scikit-learn), LASER's xSIM, the table."""

import gettext
import math
import struct

import numpy as np
import pytest

from repr_jax.eval.bitext import (available_languages, bitext_mining, bitext_table,
                                  char_ngram_embed, gettext_pairs, xsim_error, xsim_predictions)

FR = "/usr/share/locale/fr/LC_MESSAGES/iso_3166-1.mo"


def _unit(deg):
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


# ---- bitext_mining ---------------------------------------------------------------------------

def test_mining_by_hand_with_a_tie_and_a_wrong_neighbour():
    e = np.eye(3, dtype=np.float32)
    tgt = e[[0, 2, 1]] + e           # targets 1 and 2 are both [0, 1, 1]: a tie
    m = bitext_mining(e, tgt)
    # predictions [0, 1, 1] (the tie goes to the lower index; source 2 gets a wrong neighbour)
    # label 0: tp 1, pred 1, support 1 -> p 1, f1 1;  label 1: tp 1, pred 2 -> p 1/2, f1 2/3;
    # label 2: tp 0, pred 0 -> p 0 (zero_division), f1 0;  weights support/N = 1/3 each.
    assert m["accuracy"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["precision"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)


def test_mining_perfect_and_shape_error():
    e = np.random.default_rng(0).normal(size=(5, 3))
    assert bitext_mining(e, 2 * e) == {"accuracy": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0}
    with pytest.raises(ValueError, match=r"\[N, D\].*\(5, 3\) and \(4, 3\)"):
        bitext_mining(e, e[:4])


def test_mining_equals_sklearn_weighted_on_random_data():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    src = rng.normal(size=(60, 4)).astype(np.float32)
    tgt = (src + 1.5 * rng.normal(size=src.shape)).astype(np.float32)
    m = bitext_mining(src, tgt, chunk=7)  # chunked (with a padded last chunk)
    s = src / np.linalg.norm(src, axis=1, keepdims=True)
    t = tgt / np.linalg.norm(tgt, axis=1, keepdims=True)
    pred, gold = np.argmax(s @ t.T, 1), np.arange(60)
    assert 0.1 < m["accuracy"] < 0.9  # a mix of hits and misses, with repeated predictions
    for name, fn in (("precision", sk.precision_score), ("recall", sk.recall_score),
                     ("f1", sk.f1_score)):
        assert m[name] == pytest.approx(fn(gold, pred, average="weighted", zero_division=0),
                                        abs=1e-12), name
    assert m["accuracy"] == pytest.approx(sk.accuracy_score(gold, pred))


def test_mining_bootstrap_interval():
    rng = np.random.default_rng(2)
    src = rng.normal(size=(80, 8))
    m = bitext_mining(src, src + 1.2 * rng.normal(size=src.shape), bootstrap=200)
    for name in ("accuracy", "f1"):
        assert m[name].low < float(m[name]) < m[name].high, (name, m[name])


# ---- xsim ------------------------------------------------------------------------------------

def test_xsim_ratio_margin_by_hand_3x3():
    # targets: y0 a hub at 45 deg, y1 at 0, y2 at 90; sources at 45, 25, 80 deg; k = 2.
    src = np.asarray([_unit(45), _unit(25), _unit(80)])
    tgt = np.asarray([_unit(45), _unit(0), _unit(90)])
    c = math.cos
    r = math.radians
    # source 1: cos to y0 = cos 20 = .940 > cos to y1 = cos 25 = .906 -> absolute picks the hub.
    assert list(xsim_predictions(src, tgt, margin="absolute")) == [0, 0, 2]
    assert xsim_error(src, tgt, margin="absolute") == pytest.approx(1 / 3)
    # ratio: avg_k cos of x1 over Y = (cos20 + cos25)/2; of y0 over X = (cos0 + cos20)/2,
    # of y1 over X = (cos25 + cos45)/2.
    ax1 = (c(r(20)) + c(r(25))) / 2
    ay0, ay1 = (1 + c(r(20))) / 2, (c(r(25)) + c(r(45))) / 2
    to_y0, to_y1 = c(r(20)) / ((ax1 + ay0) / 2), c(r(25)) / ((ax1 + ay1) / 2)
    assert to_y0 == pytest.approx(0.993, abs=1e-3) and to_y1 == pytest.approx(1.048, abs=1e-3)
    assert list(xsim_predictions(src, tgt, margin="ratio", k=2)) == [0, 1, 2]
    assert xsim_error(src, tgt, margin="ratio", k=2) == 0.0
    assert xsim_error(src, tgt, margin="distance", k=2) == 0.0
    with pytest.raises(ValueError, match="unknown margin 'cosine'"):
        xsim_error(src, tgt, margin="cosine")


def test_xsim_matches_a_transcription_of_laser():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 6))
    y = x + 1.3 * rng.normal(size=x.shape)
    k = 4
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    yn = y / np.linalg.norm(y, axis=1, keepdims=True)
    sim = xn @ yn.T
    idx_xy = np.argsort(-sim, 1, kind="stable")[:, :k]
    cos_xy = np.take_along_axis(sim, idx_xy, 1)
    avg_x, avg_y = cos_xy.mean(1), np.sort(sim.T, 1)[:, ::-1][:, :k].mean(1)
    scores = cos_xy / ((avg_x[:, None] + avg_y[idx_xy]) / 2)   # LASER _score_margin, ratio
    want = idx_xy[np.arange(40), scores.argmax(1)]
    assert np.array_equal(xsim_predictions(x, y, k=k, chunk=9), want)
    err = xsim_error(x, y, bootstrap=200)
    assert float(err) == pytest.approx(np.mean(want != np.arange(40)))
    assert err.low <= float(err) <= err.high


# ---- gettext ---------------------------------------------------------------------------------

def _write_mo(path, entries):
    """A little-endian GNU .mo file holding ``entries`` [(msgid bytes, msgstr bytes)]."""
    entries = sorted(entries)
    n = len(entries)
    o_tab, t_tab = 28, 28 + 8 * n
    data = bytearray()
    start = 28 + 16 * n
    o_meta, t_meta = [], []
    for m, _ in entries:
        o_meta.append((len(m), start + len(data)))
        data += m + b"\0"
    for _, t in entries:
        t_meta.append((len(t), start + len(data)))
        data += t + b"\0"
    head = struct.pack("<7I", 0x950412DE, 0, n, o_tab, t_tab, 0, 0)
    tabs = b"".join(struct.pack("<2I", *e) for e in o_meta + t_meta)
    path.parent.mkdir(parents=True)
    path.write_bytes(head + tabs + bytes(data))


def test_gettext_skips_header_plural_and_context_entries(tmp_path):
    _write_mo(tmp_path / "xx" / "LC_MESSAGES" / "cat.mo", [
        (b"", b"Content-Type: text/plain; charset=UTF-8\n"),
        (b"Spain", "Espa\u00f1a".encode()), (b"Chad", b"Chad"),
        (b"one file\0%d files", b"un fichier\0%d fichiers"),       # plural: skipped
        (b"menu\x04Open", b"Ouvrir")])                            # context: skipped
    assert gettext_pairs("xx", "cat", tmp_path) == [("Chad", "Chad"), ("Spain", "Espa\u00f1a")]
    assert gettext_pairs("xx", "cat", tmp_path, keep_identical=False) == [("Spain", "Espa\u00f1a")]
    assert available_languages("cat", tmp_path) == ["xx"]


def test_gettext_bad_locale_dir_is_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        gettext_pairs("fr", locale_dir=tmp_path / "nowhere")
    msg = str(info.value)
    assert "\n" not in msg and "nowhere/fr/LC_MESSAGES/iso_3166-1.mo" in msg
    assert "apt-get install iso-codes" in msg
    assert available_languages(locale_dir=tmp_path / "nowhere") == []


@pytest.mark.skipif(not __import__("os").path.exists(FR), reason="iso-codes not installed")
def test_gettext_real_french_catalogue():
    pairs = gettext_pairs("fr")
    assert ("France", "France") in pairs and ("Germany", "Allemagne") in pairs
    with open(FR, "rb") as f:  # the standard library's reading agrees
        catalog = {k: v for k, v in gettext.GNUTranslations(f)._catalog.items() if k}
    assert dict(pairs) == catalog
    assert "France" not in dict(gettext_pairs("fr", keep_identical=False))
    assert "fr" in available_languages()


# ---- end to end ------------------------------------------------------------------------------

@pytest.mark.skipif(not __import__("os").path.exists(FR), reason="iso-codes not installed")
def test_char_trigrams_mine_french_well_above_chance_and_table():
    pairs = gettext_pairs("fr")
    en = char_ngram_embed([m for m, _ in pairs])
    fr = char_ngram_embed([t for _, t in pairs])
    m = bitext_mining(en, fr)
    assert m["f1"] > 0.3 and m["accuracy"] > 100 / len(pairs)  # chance: 1 / 420
    rows, skipped = bitext_table(char_ngram_embed, ["fr", "de", "zh_CN", "xx_NONE"],
                                 bootstrap=50)
    assert skipped and skipped[0].startswith("xx_NONE: ") and len(skipped) == 1
    by = {r["direction"]: r for r in rows}
    assert set(by) >= {"en->fr", "fr->en"}
    assert by["en->fr"]["f1"] == pytest.approx(float(m["f1"]))
    for r in rows:
        assert r["f1_lo"] <= r["f1"] <= r["f1_hi"]
        assert 0 <= r["xsim_error"] <= 1 and r["n"] > 100


# ---- the bitext evaluation set and the evaluator ---------------------------------------------

HAVE_ISO = __import__("os").path.exists(FR)


def _bitext_set(english, rows, translations, name="hand"):
    from repr_jax.data.eval_sets import BitextSet
    return BitextSet(name, np.asarray(english, np.float32),
                     {k: np.asarray(v) for k, v in rows.items()},
                     {k: np.asarray(v, np.float32) for k, v in translations.items()})


def _run_bitext(sets, **options):
    from repr_jax.eval import EVALUATORS, Embedder
    embedder = Embedder(lambda v, x: x, {}, eval_sets=sets)  # the inputs are the embeddings
    return dict(EVALUATORS["bitext"](embedder, **options).run(None))


def test_evaluator_on_hand_made_embeddings_perfect_and_a_swap():
    e = np.eye(4, dtype=np.float32)
    # "aa": English rows 2, 0, 3 (row 1 is another language's), translated exactly (scaled).
    # "bb": English rows 0, 1, 2 with the translations of 0 and 1 swapped.
    s = _bitext_set(e, {"aa": [2, 0, 3], "bb": [0, 1, 2]},
                    {"aa": 2 * e[[2, 0, 3]], "bb": e[[1, 0, 2]]})
    out = _run_bitext([s], bootstrap=0)
    assert list(out) == ["hand/en-aa/f1", "hand/en-aa/xsim_error", "hand/aa-en/f1",
                         "hand/aa-en/xsim_error", "hand/en-bb/f1", "hand/en-bb/xsim_error",
                         "hand/bb-en/f1", "hand/bb-en/xsim_error", "hand/mean/f1",
                         "hand/mean/xsim_error"]
    for d in ("en-aa", "aa-en"):
        assert out[f"hand/{d}/f1"] == 1.0 and out[f"hand/{d}/xsim_error"] == 0.0
    # the swap: predictions [1, 0, 2] for gold [0, 1, 2]; labels 0 and 1 get F1 0, label 2 F1 1,
    # each weighing 1/3; 2 of 3 sources wrong. The margin (k = 3 here: k is capped at N) keeps
    # the only target of cosine 1.
    for d in ("en-bb", "bb-en"):
        assert out[f"hand/{d}/f1"] == pytest.approx(1 / 3)
        assert out[f"hand/{d}/xsim_error"] == pytest.approx(2 / 3)
    assert out["hand/mean/f1"] == pytest.approx((1 + 1 + 1 / 3 + 1 / 3) / 4)
    assert out["hand/mean/xsim_error"] == pytest.approx((2 / 3 + 2 / 3) / 4)
    assert _run_bitext([s], bootstrap=0, margin="absolute")["hand/mean/xsim_error"] == \
        pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="unknown margin 'cos'"):
        _run_bitext([s], margin="cos")


def test_evaluator_intervals_are_those_of_the_functions_and_the_mean_is_stratified():
    rng = np.random.default_rng(4)
    en = rng.normal(size=(50, 6)).astype(np.float32)
    xx = (en + 1.2 * rng.normal(size=en.shape)).astype(np.float32)
    yy = (en[::-1] + 0.8 * rng.normal(size=en.shape)).astype(np.float32)
    s = _bitext_set(en, {"xx": np.arange(50), "yy": np.arange(50)[::-1]}, {"xx": xx, "yy": yy})
    out = _run_bitext([s], bootstrap=200)
    # the first language draws the functions' resamples (seed 0): the same intervals
    m, err = bitext_mining(en, xx, bootstrap=200), xsim_error(en, xx, bootstrap=200)
    got_f1, got_err = out["hand/en-xx/f1"], out["hand/en-xx/xsim_error"]
    assert (float(got_f1), got_f1.low, got_f1.high) == pytest.approx(
        (float(m["f1"]), m["f1"].low, m["f1"].high))
    assert (float(got_err), got_err.low, got_err.high) == pytest.approx(
        (float(err), err.low, err.high))
    points = [float(out[f"hand/{d}/f1"]) for d in ("en-xx", "xx-en", "en-yy", "yy-en")]
    mean = out["hand/mean/f1"]
    assert float(mean) == pytest.approx(np.mean(points))
    assert 0 <= mean.low < float(mean) < mean.high <= 1
    # averaging four pairs narrows the interval below any one pair's
    assert mean.high - mean.low < min(out[f"hand/{d}/f1"].high - out[f"hand/{d}/f1"].low
                                      for d in ("en-xx", "xx-en", "en-yy", "yy-en"))
    e = out["hand/mean/xsim_error"]
    assert e.low <= float(e) <= e.high


def test_a_set_without_catalogues_is_one_warning_and_no_rows(tmp_path):
    from repr_jax.data.eval_sets import load_eval_set
    with pytest.warns(UserWarning) as caught:
        s = load_eval_set("bitext", tokenizer="", max_len=8, locale_dir=str(tmp_path),
                          languages=("fr", "de"))
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert "\n" not in msg and "fr: no iso_3166-1.mo; de: no iso_3166-1.mo" in msg
    assert "apt-get install iso-codes" in msg
    assert s.kind == "bitext" and s.languages == () and s.english.shape == (0, 8)
    assert _run_bitext([s]) == {}


@pytest.mark.skipif(not HAVE_ISO, reason="iso-codes not installed")
def test_the_bitext_set_loads_real_catalogues_tokenised_like_the_run():
    from repr_jax.data.eval_sets import EVAL_SETS, TEXT_SETS, load_eval_set
    from repr_jax.data.tokenizer import make_tokenizer
    assert "bitext" in EVAL_SETS and "bitext" in TEXT_SETS
    with pytest.warns(UserWarning, match=r"left out xx_NONE: no iso_3166-1\.mo under"):
        s = load_eval_set("bitext", tokenizer="", max_len=24, languages=("fr", "ja", "xx_NONE"))
    assert s.name == "bitext" and s.languages == ("fr", "ja") and len(s.skipped) == 1
    tok = make_tokenizer("")
    for lang in s.languages:
        pairs = gettext_pairs(lang)
        want_en = tok.encode([m for m, _ in pairs], max_len=24, pad_to=24).ids
        want_xx = tok.encode([t for _, t in pairs], max_len=24, pad_to=24).ids
        assert np.array_equal(s.english[s.rows[lang]], want_en)
        assert np.array_equal(s.translations[lang], want_xx)
    assert len(s.english) == len({m for lang in s.languages for m, _ in gettext_pairs(lang)})
    assert s.reload() is s and s.reload("iso_3166-1", ("fr", "ja", "xx_NONE")) is s
    other = s.reload(languages=("de",))
    assert other.languages == ("de",) and other.name == "bitext"


@pytest.mark.skipif(not __import__("os").path.exists(
    "/usr/share/locale/fr/LC_MESSAGES/coreutils.mo"), reason="coreutils' catalogues absent")
def test_the_catalogue_is_an_option_coreutils():
    from repr_jax.data.eval_sets import load_eval_set
    s = load_eval_set("bitext", tokenizer="", max_len=16, languages=("fr",))
    c = s.reload("coreutils")
    assert c.name == "bitext_coreutils" and c.catalogue == "coreutils"
    assert c.languages == ("fr",) and len(c.rows["fr"]) > 1000


@pytest.mark.skipif(not HAVE_ISO, reason="iso-codes not installed")
def test_end_to_end_a_toy_embedder_through_the_runs_evaluation():
    """The run's wiring: eval.evaluators / eval.bitext.* reach the evaluator through
    ``evaluate``; a bag of bytes mines French (shared spelling) far better than Russian."""
    import jax.numpy as jnp

    from repr_jax import config as C
    from repr_jax.data import Dataset
    from repr_jax.data.eval_sets import load_eval_set
    from repr_jax.train.evaluation import Representation, evaluate

    def bag_of_bytes(variables, ids):
        rows = jnp.broadcast_to(jnp.arange(ids.shape[0])[:, None], ids.shape)
        return jnp.zeros((ids.shape[0], 260)).at[rows, ids].add((ids > 0).astype(jnp.float32))

    s = load_eval_set("bitext", tokenizer="", max_len=24, languages=("fr", "ru"))
    cfg = C.override(C.Config(), ["eval.evaluators=('bitext',)", "eval.bootstrap=0",
                                  "eval.bitext.languages=('fr', 'ru')", "eval.bitext.k=2"])
    split = {"x": np.zeros((4, 24), np.int32), "label": np.zeros(4, np.int32)}
    data = Dataset("toy", {"train": split, "test": split}, num_classes=1)
    rows = evaluate(cfg, data, {"bytes": Representation(bag_of_bytes, None)}, step=0,
                    eval_sets=[s])
    by = {r["metric"]: r["value"] for r in rows}
    assert all(r["evaluator"] == "bitext" for r in rows) and "error" not in rows[0]
    assert set(by) == {f"bitext/{d}/{m}" for d in ("en-fr", "fr-en", "en-ru", "ru-en", "mean")
                       for m in ("f1", "xsim_error")}
    assert by["bitext/en-fr/f1"] > 0.3 > 0.05 > by["bitext/en-ru/f1"]
    assert by["bitext/mean/f1"] == pytest.approx(np.mean(
        [by[f"bitext/{d}/f1"] for d in ("en-fr", "fr-en", "en-ru", "ru-en")]))


def _text_run_rows(tmp_path, *, evaluators, sets, more=()):
    """The evaluation rows of a tiny text bi-encoder trained 2 steps on made-up pairs."""
    import json

    from repr_jax import config as C
    from repr_jax.train import train_and_evaluate
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"what is item {i}?",
                                         "positive": f"item {i} is kind {i % 7}"}) + "\n"
                             for i in range(200)))
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=f"pairs:{pairs}", max_len=16),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="biencoder", objective="info_nce", proj_dim=16),
        optim=C.OptimConfig(warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=evaluators, sets=sets, bootstrap=20, reference_rows=False))
    rows = train_and_evaluate(C.override(cfg, list(more)), tmp_path / "run", progress=False,
                              verbose=False)
    return rows if isinstance(rows, list) else json.loads(
        next((tmp_path / "run" / "eval").glob("step_*.json")).read_text())


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ISO, reason="iso-codes not installed")
def test_a_text_run_reports_bitext_rows(tmp_path):
    """eval.sets=('bitext',) and eval.evaluators=(..., 'bitext') in a trained text run (2
    steps): rows with intervals for each language pair, direction and the mean."""
    rows = _text_run_rows(tmp_path, evaluators=("retrieval", "bitext"), sets=("bitext",),
                          more=["eval.bitext.languages=('fr', 'ar')"])
    bitext = {r["metric"]: r for r in rows if r["evaluator"] == "bitext"}
    assert {"bitext/en-fr/f1", "bitext/ar-en/xsim_error", "bitext/mean/f1"} <= set(bitext)
    for r in bitext.values():
        assert r["ci_low"] <= r["value"] <= r["ci_high"]


def test_crosslingual_set_by_hand(tmp_path):
    """English one-line messages of 4+ words are the queries; the corpus is their translations,
    one document for messages translated alike; a missing catalogue names its package."""
    from repr_jax.data.eval_sets import crosslingual, crosslingual_language
    _write_mo(tmp_path / "xx" / "LC_MESSAGES" / "cat.mo", [
        (b"", b"Content-Type: text/plain; charset=UTF-8\n"),
        (b"cannot remove the file", b"impossible de supprimer le fichier"),
        (b"cannot  delete the file", b"impossible de supprimer le fichier"),  # same doc
        (b"the input is not sorted", b"l'entr\xc3\xa9e n'est pas tri\xc3\xa9e"),
        (b"too short", b"trop court"),                                   # < 4 words
        (b"two lines\nof help text here", b"deux lignes\nd'aide ici"),   # not one line
        (b"same in both languages", b"same in both languages")])         # identical
    s = crosslingual("xx", tokenizer="bytes", max_len=32, catalogue="cat", locale_dir=tmp_path)
    queries, docs = s.texts
    assert queries == ["cannot delete the file", "cannot remove the file",
                       "the input is not sorted"]
    assert docs == ["impossible de supprimer le fichier", "l'entrée n'est pas triée"]
    assert s.qrels.gains(np.asarray([[0, 1]] * 3)).tolist() == [[1, 0], [1, 0], [0, 1]]
    assert s.name == "crosslingual_xx" and s.queries.shape == (3, 32)
    with pytest.raises(FileNotFoundError, match="apt-get install coreutils"):
        crosslingual("yy", tokenizer="bytes", locale_dir=tmp_path)
    for bad in ("crosslingual:", "crosslingual:../etc"):
        with pytest.raises(ValueError, match="write crosslingual:LANG") as info:
            crosslingual_language(bad)
        assert "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").path.exists(
    "/usr/share/locale/fr/LC_MESSAGES/coreutils.mo"), reason="coreutils translations absent")
def test_crosslingual_retrieval_runs_through_a_runs_evaluation(tmp_path):
    """crosslingual:fr in eval.sets gives retrieval rows with intervals for a text run;
    a language this machine lacks is left out with a warning, not an error."""
    with pytest.warns(UserWarning, match="'crosslingual:zz' left out: no gettext catalogue"):
        rows = _text_run_rows(tmp_path, evaluators=("retrieval",),
                              sets=("crosslingual:fr", "crosslingual:zz"))
    found = [r for r in rows if "crosslingual_fr" in r["metric"]]
    assert found and not [r for r in rows if "crosslingual_zz" in r["metric"]]
    for r in found:
        assert r["ci_low"] <= r["value"] <= r["ci_high"]
