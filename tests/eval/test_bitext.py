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
