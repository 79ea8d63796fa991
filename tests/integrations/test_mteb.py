"""repr-jax mteb: the offline tasks, repr_jax's scores of them against the definitions mteb
uses (pytrec_eval's nDCG@10, scipy's Spearman), the paired table, and one-line errors. The run
through mteb itself (it needs torch) is the slow test at the end, skipped where mteb is absent."""

import importlib.metadata
import json
import dataclasses
import math
import zlib

import numpy as np
import pytest
import scipy.stats

from repr_jax.data import beir
from repr_jax.integrations import mteb_tasks


def bag_of_words(dim: int = 32):
    """A text's embedding: the sum of a fixed random vector per word (texts sharing words are
    close), whatever the prompt type."""
    def encode(kind, texts):
        out = np.zeros((len(texts), dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i] += np.random.default_rng(zlib.crc32(w.encode())).normal(size=dim)
        return out
    return encode


def noisy(encode, scale: float, seed: int = 1):
    """``encode`` plus noise of a fixed draw per text."""
    def out(kind, texts):
        x = encode(kind, texts)
        noise = [np.random.default_rng([seed, zlib.crc32(t.encode())]).normal(size=x.shape[1])
                 for t in texts]
        return x + scale * np.asarray(noise, np.float32)
    return out


def char_trigrams(kind, texts):
    from repr_jax.eval.bitext import char_ngram_embed
    return char_ngram_embed(texts, dim=512)


def collection(tmp_path, num_docs=300, num_queries=60):
    """A synthetic BEIR collection plus one query whose id is also a document's (it may not
    retrieve itself: mteb's ignore_identical_ids)."""
    root = beir.synthetic_collection(tmp_path / "col", num_docs=num_docs, num_queries=num_queries)
    with open(root / "queries.jsonl", "a") as f:
        f.write(json.dumps({"_id": "d5", "text": "w1 w2 w3"}) + "\n")
    with open(root / "qrels" / "test.tsv", "a") as f:
        f.write("d5\td7\t1\n")
    return root


def pytrec_ndcg10(data, encode) -> dict[str, float]:
    """pytrec_eval's per-query ndcg_cut_10 over every document's cosine score, a query's own
    id left out: what mteb's retrieval evaluator computes."""
    q = encode("query", data.queries)
    c = encode("document", data.corpus)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    scores = q.astype(np.float64) @ c.T.astype(np.float64)
    run = {qid: {did: float(s) for did, s in zip(data.doc_ids, row) if did != qid}
           for qid, row in zip(data.query_ids, scores)}
    return _pytrec(data, run)


def _pytrec(data, run) -> dict[str, float]:
    """pytrec_eval's per-query ndcg_cut_10 of ``run`` ({query: {document: score}})."""
    import pytrec_eval
    qrels = {}
    for qi, di, g in zip(*data.judged):
        qrels.setdefault(data.query_ids[qi], {})[data.doc_ids[di]] = int(g)
    per_q = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return {k: v["ndcg_cut_10"] for k, v in per_q.items()}


def test_retrieval_score_is_pytrec_evals_ndcg_at_10_per_query(tmp_path):
    data = mteb_tasks.task(f"beir:{collection(tmp_path)}").load()
    assert data.exclude[data.query_ids.index("d5")] == data.doc_ids.index("d5")
    encode = bag_of_words()
    scored = mteb_tasks.per_example(data, encode)
    ref = pytrec_ndcg10(data, encode)
    ours = dict(zip(data.query_ids, scored.arrays[0]))  # every query here is judged
    assert len(ours) == len(ref) == 61
    for qid in ref:
        assert ours[qid] == pytest.approx(ref[qid], abs=1e-6), qid
    assert scored.value == pytest.approx(np.mean(list(ref.values())), abs=1e-6)
    assert 0.3 < scored.value < 1.0  # shared words find the source documents


def test_sts_score_is_scipys_spearman_of_cosines():
    data = mteb_tasks.task("LeeSTS").load()
    assert data.size() == "1225 pairs of 50 texts"
    encode = bag_of_words()
    scored = mteb_tasks.per_example(data, encode)
    e = encode(None, data.texts).astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    cos = np.sum(e[data.pairs[:, 0]] * e[data.pairs[:, 1]], axis=1)
    ref = scipy.stats.spearmanr(cos, data.gold).statistic
    assert scored.value == pytest.approx(ref, abs=1e-6)
    assert float(scored.statistic(*scored.arrays)) == pytest.approx(ref, abs=1e-4)  # float32


def test_bitext_score_is_the_mean_of_each_languages_weighted_f1():
    """Each English country name's cosine-nearest translation; per language scikit-learn's
    weighted F1 (mteb's main score), their mean the task's. Character trigrams find most
    Latin-script names and few Chinese ones."""
    from sklearn.metrics import f1_score

    from repr_jax.eval.bitext import char_ngram_embed
    data = mteb_tasks.task("GettextCountryBitextMining").load()
    assert list(data.subsets) == ["eng-fra", "eng-deu", "eng-spa", "eng-rus", "eng-cmn",
                                  "eng-ara", "eng-jpn"]
    assert data.languages["eng-cmn"] == ["eng-Latn", "cmn-Hans"]
    scored = mteb_tasks.per_example(data, lambda kind, texts: char_ngram_embed(texts))
    f1 = {}
    for (name, (en, xx)), part in zip(data.subsets.items(), scored.parts):
        a, b = (char_ngram_embed(t).astype(np.float64) for t in (en, xx))
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        b /= np.linalg.norm(b, axis=1, keepdims=True)
        pred = np.argmax(a @ b.T, axis=1)  # counts tie exactly: the first, as argmax
        f1[name] = f1_score(np.arange(len(en)), pred, average="weighted", zero_division=0)
        assert part.value == pytest.approx(f1[name], abs=1e-9)
    assert scored.value == pytest.approx(np.mean(list(f1.values())), abs=1e-9)
    assert f1["eng-fra"] > 0.5 > f1["eng-cmn"]
    assert len(scored) == sum(len(en) for en, _ in data.subsets.values())


def test_pair_score_is_scikit_learns_average_precision_of_cosines():
    from sklearn.metrics import average_precision_score
    data = mteb_tasks.task("WordNetSameWordPairClassification").load()
    labels = np.asarray(data.labels)
    assert labels.sum() * 2 == len(labels) > 3000  # as many unrelated pairs as same-word ones
    for a, b, y in zip(data.first[:50], data.second[:50], labels[:50]):
        assert y == 1 and a != b  # two senses: two definitions
    scored = mteb_tasks.per_example(data, char_trigrams)
    e1, e2 = (char_trigrams(None, t).astype(np.float64) for t in (data.first, data.second))
    cos = np.sum(e1 * e2, 1) / np.linalg.norm(e1, axis=1) / np.linalg.norm(e2, axis=1)
    assert scored.value == pytest.approx(average_precision_score(labels, cos), abs=1e-6)
    assert float(scored.statistic(*scored.arrays)) == pytest.approx(scored.value, abs=1e-4)
    assert 0.5 < scored.value < 0.9  # chance is 0.5; shared spelling helps a little


def clusters(num_labels: int = 6, per_label: int = 40, dim: int = 16, spread: float = 0.1):
    """Texts ``"c3 t17"`` whose embedding is label 3's centre plus ``spread`` noise."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(num_labels, dim))
    labels = np.repeat(np.arange(num_labels), per_label)
    texts = [f"c{c} t{i}" for i, c in enumerate(labels)]
    points = {t: centres[c] + spread * rng.normal(size=dim) for t, c in zip(texts, labels)}
    return texts, labels, lambda kind, batch: np.asarray([points[t] for t in batch], np.float32)


def test_undersampling_draws_as_mteb_does():
    """mteb's draws (transcribed from mteb 2.x's ``_undersample_data``): each reshuffles the
    previous draw's order with ``RandomState(42)`` and keeps the first 8 rows of each label."""
    labels = np.asarray([0] * 30 + [1] * 5 + [2] * 20)
    draws = mteb_tasks.undersampled(labels)
    assert len(draws) == 10 and len({tuple(d) for d in draws}) == 10
    order = list(range(len(labels)))
    np.random.RandomState(42).shuffle(order)
    first = [i for i in order if labels[i] == 0][:8] + [i for i in order if labels[i] == 1] + \
        [i for i in order if labels[i] == 2][:8]
    assert sorted(draws[0]) == sorted(first)
    assert draws[0] == [i for i in order if i in set(first)]  # in the shuffled order
    for d in draws:
        assert np.bincount(labels[d]).tolist() == [8, 5, 8]


def test_classification_is_the_mean_accuracy_of_ten_classifiers():
    from sklearn.linear_model import LogisticRegression
    texts, labels, encode = clusters(spread=0.3)
    test = np.arange(len(texts)) % 2 == 0
    data = mteb_tasks.ClassificationData([t for t, k in zip(texts, test) if not k],
                                         labels[~test], [t for t, k in zip(texts, test) if k],
                                         labels[test])
    scored = mteb_tasks.per_example(data, encode)
    assert scored.value == 1.0 and len(scored) == test.sum()  # separated: every draw right
    shuffled = dataclasses.replace(data, train_labels=np.random.default_rng(1).permutation(
        data.train_labels))
    noise = mteb_tasks.per_example(shuffled, encode)
    assert noise.value < 0.5
    share = noise.arrays[0]
    assert set(np.round(share * 10, 4)) <= set(range(11))  # a share of 10 classifiers
    accuracy = []
    x_train = encode(None, shuffled.train_texts).astype(np.float64)
    for rows in mteb_tasks.undersampled(shuffled.train_labels):
        fit = LogisticRegression(max_iter=100).fit(x_train[rows], shuffled.train_labels[rows])
        accuracy.append(np.mean(fit.predict(encode(None, data.test_texts).astype(np.float64))
                                == data.test_labels))
    assert noise.value == pytest.approx(np.mean(accuracy), abs=1e-12)


def test_wordnet_categories_classify_and_cluster_above_chance():
    """WordNet's lexicographer files from definitions: character trigrams share enough spelling
    within a category ("a person who ...": noun.person) to beat the majority class; the
    clustering's replicates are 10 V-measures on resamples, the same rows for any model."""
    data = mteb_tasks.task("WordNetCategoryClassification").load()
    assert len(data.test_texts) == 2000 and len(np.unique(data.train_labels)) == 45
    majority = np.max(np.bincount(data.test_labels)) / len(data.test_labels)
    scored = mteb_tasks.per_example(data, char_trigrams)
    assert scored.value > majority / 2 and len(scored) == 2000
    data = mteb_tasks.task("WordNetCategoryClustering").load()
    assert data.texts == mteb_tasks.task("WordNetCategoryClassification").load().test_texts
    scored = mteb_tasks.per_example(data, char_trigrams)
    assert scored.replicates.shape == (10,) and scored.value == np.mean(scored.replicates)
    assert 0.05 < scored.value < 0.6 and len(scored) == 2000


def test_clustering_is_mtebs_v_measure_on_resamples():
    import random

    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics.cluster import v_measure_score
    texts, labels, encode = clusters(spread=2.0)
    scored = mteb_tasks.per_example(mteb_tasks.ClusteringData(texts, labels), encode)
    rows = random.Random(42).choices(range(len(texts)), k=len(texts))  # mteb's first resample
    x = encode(None, texts).astype(np.float64)[rows]
    kmeans = MiniBatchKMeans(6, batch_size=512, n_init=1, random_state=42)
    assert scored.replicates[0] == v_measure_score(labels[rows], kmeans.fit_predict(x))
    assert len(set(scored.replicates)) > 1  # each resample its own fit
    _, _, tight = clusters(spread=0.01)
    assert mteb_tasks.per_example(mteb_tasks.ClusteringData(texts, labels), tight).value > 0.99


def test_word_pair_tasks_read_gensims_files():
    for name, pairs in (("WordSim353", 353), ("SimLex999", 999)):
        data = mteb_tasks.task(name).load()
        assert len(data.pairs) == len(data.gold) == pairs
        assert data.min_score <= data.gold.min() and data.gold.max() <= data.max_score


def test_the_table_pairs_runs_per_task_and_per_type(tmp_path):
    tasks = {"LeeSTS": "STS", f"beir:{collection(tmp_path)}": "Retrieval",
             "GettextCountryBitextMining": "BitextMining", "SimLex999": "STS",
             "groups": "Clustering"}
    loaded = {n: mteb_tasks.task(n).load() for n in tasks if n != "groups"}
    texts, labels, spelled = clusters(spread=0.3)
    loaded["groups"] = mteb_tasks.ClusteringData(texts, labels)

    def good(kind, batch):  # the groups' own embedding, trigrams for the real tasks
        return (spelled if batch[0] in set(texts) else char_trigrams)(kind, batch)
    worse = noisy(good, 1000.0)  # noise drowns the spelling and the groups
    scores = {run: {n: mteb_tasks.per_example(d, enc) for n, d in loaded.items()}
              for run, enc in (("base", good), ("same", good), ("worse", worse))}
    rows = mteb_tasks.table(scores, tasks, bootstrap=300)
    by = {(r["task"], r["run"]): r for r in rows}
    for n in tasks:
        assert math.isnan(by[n, "base"]["difference"])
        same = by[n, "same"]
        assert same["difference"] == 0 and same["p_value"] == 1.0
        w = by[n, "worse"]
        assert w["difference"] == pytest.approx(w["value"] - by[n, "base"]["value"])
        assert w["diff_low"] <= w["difference"] <= w["diff_high"]
        assert by[n, "base"]["low"] <= by[n, "base"]["value"] <= by[n, "base"]["high"]
    retrieval = list(tasks)[1]
    for n in (retrieval, "GettextCountryBitextMining", "groups"):  # (trigrams: no better on Lee)
        w = by[n, "worse"]
        assert w["diff_high"] < 0 and w["p_value"] < 0.05, w  # noise hurts, clearly
    bitext = by["GettextCountryBitextMining", "base"]
    assert bitext["low"] < bitext["value"] < bitext["high"]  # F1: the normal interval
    sts = [by[n, "worse"] for n in ("LeeSTS", "SimLex999")]
    mean = by["STS (mean of 2)", "worse"]
    assert mean["value"] == pytest.approx(np.mean([r["value"] for r in sts]))
    assert mean["difference"] == pytest.approx(np.mean([r["difference"] for r in sts]))
    assert mean["examples"] == sum(r["examples"] for r in sts)
    for run in ("base", "worse"):  # one task a type: its mean is that task's score
        mean, one = by["Retrieval (mean of 1)", run], by[retrieval, run]
        assert mean["value"] == one["value"] and mean["examples"] == one["examples"]
    assert by["Retrieval (mean of 1)", "worse"]["difference"] == pytest.approx(
        by[retrieval, "worse"]["difference"])
    text = mteb_tasks.format_table(rows, 300)
    assert text.splitlines()[1].startswith("STS (mean of 2)")
    assert len(text.splitlines()) == 1 + len(rows)


def test_an_unknown_task_names_the_close_ones():
    with pytest.raises(ValueError, match="did you mean LeeSTS.*repr-jax mteb --list"):
        mteb_tasks.tasks("LeeSTS,LeeST")


def test_list_is_one_task_a_line_name_first(capsys):
    from repr_jax import cli
    assert cli.main(["mteb", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(mteb_tasks.TASKS) + ["beir:DIR"]
    assert "pairs in 7 languages" in lines[6]
    assert lines[0].split()[1] == "Retrieval" and "2000 queries" in lines[0]
    assert lines[1].split()[1] == "Reranking" and "BM25's top 20 of each query" in lines[1]


def test_mteb_missing_or_out_of_range_is_one_line(monkeypatch, tmp_path, capsys):
    from repr_jax import cli
    from repr_jax.integrations import mteb as bridge

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert cli.main(["mteb", "--workdir", "minilm", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and 'pip install -e ".[mteb]"' in err
    for version, ok in (("1.38.2", False), ("2.26.24", True), ("3.0.0", False)):
        monkeypatch.setattr(importlib.metadata, "version", lambda name, v=version: v)
        if ok:
            assert bridge.check_mteb() == version
        else:
            with pytest.raises(ValueError, match=f"mteb {version} is installed.*>= 2.0, < 3.0"):
                bridge.check_mteb()


def test_a_model_that_cannot_embed_text_is_refused(tmp_path):
    from repr_jax.integrations import mteb as bridge
    with pytest.raises(ValueError, match="BM25 has no embeddings"):
        bridge.check_model("bm25")
    with pytest.raises(ValueError, match="not a run directory"):
        bridge.check_model(str(tmp_path / "nothing"))


def test_a_run_that_reads_no_text_is_refused(tmp_path):
    from repr_jax import config
    from repr_jax.integrations import mteb as bridge
    config.save_json(config.load("simclr_mnist1d"), tmp_path / "config.json")
    with pytest.raises(ValueError, match="does not read text"):
        bridge.prepare([str(tmp_path)], "LeeSTS", tmp_path.parent / "out")


def test_a_task_whose_data_is_missing_is_named(tmp_path, monkeypatch):
    from repr_jax.eval import bitext
    from repr_jax.integrations import mteb as bridge
    monkeypatch.setattr(bitext, "LOCALE_DIR", str(tmp_path / "no_locales"))
    with pytest.raises(ValueError, match="task GettextCountryBitextMining: its data is missing "
                                         ".*no iso_3166-1.mo.*apt-get install iso-codes"):
        bridge.prepare(["minilm"], "LeeSTS,GettextCountryBitextMining", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written before the checks passed


def test_a_search_models_ties_are_ordered_as_pytrec_eval_orders_them(tmp_path):
    """Scores of one decimal (ties everywhere, the gold documents among them): per-query nDCG@10
    equals pytrec_eval's on the same {query: {document: score}}, a query's own id left out."""
    data = mteb_tasks.task(f"beir:{collection(tmp_path)}").load()
    rng = np.random.default_rng(0)
    scores = np.round(rng.uniform(size=(len(data.queries), len(data.corpus))), 1)
    q, d, _ = data.judged
    scores[q, d] = 1.0  # tied with a twentieth of the corpus: ties decide the top 10
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :40]
    top = np.take_along_axis(scores, ids, 1)
    scored = mteb_tasks.ranked(data, top, ids)
    run = {qid: {data.doc_ids[j]: float(s) for j, s in zip(row, srow) if data.doc_ids[j] != qid}
           for qid, row, srow in zip(data.query_ids, ids, top)}
    ref = _pytrec(data, run)
    for qid, value in zip(data.query_ids, scored.arrays[0]):
        assert value == pytest.approx(ref[qid], abs=1e-6), qid
    shuffled = rng.permutation(ids.shape[1])  # the order handed over does not matter
    again = mteb_tasks.ranked(data, top[:, shuffled], ids[:, shuffled])
    assert again.value == scored.value and 0.1 < scored.value < 0.9


def test_a_reranking_task_reorders_its_candidates_by_cosine(tmp_path):
    """The retrieval task with BM25's candidates: per-query nDCG@10 of the candidates reordered
    by cosine, as pytrec_eval scores mteb's reranking of them; the WordNet task has 20 each."""
    from repr_jax.eval.bm25 import BM25
    data = mteb_tasks.task(f"beir:{collection(tmp_path)}").load()
    ids, _ = BM25(data.corpus).topk(data.queries, 15)
    data = dataclasses.replace(data, candidates=ids)
    encode = bag_of_words()
    scored = mteb_tasks.per_example(data, encode)
    q, c = (mteb_tasks._unit64(encode(k, t)) for k, t in (("query", data.queries),
                                                          ("document", data.corpus)))
    run = {qid: {data.doc_ids[j]: float(q[i] @ c[j]) for j in row if data.doc_ids[j] != qid}
           for i, (qid, row) in enumerate(zip(data.query_ids, ids))}
    ref = _pytrec(data, run)
    for qid, value in zip(data.query_ids, scored.arrays[0]):
        assert value == pytest.approx(ref[qid], abs=1e-6), qid
    task = mteb_tasks.task("WordNetDefinitionReranking")
    assert task.type == "Reranking" and task.main_score == "ndcg_at_10"


@pytest.mark.parametrize("method,tasks,why", [
    ("colbert", "LeeSTS,WordNetDefinitionRetrieval",
     "a colbert run ranks documents, it embeds no text as one vector: it cannot do LeeSTS; its "
     "tasks are WordNetDefinitionRetrieval, WordNetDefinitionReranking and beir:DIR"),
    ("cross_encoder", "WordNetDefinitionRetrieval",
     "a cross_encoder run reorders a first stage's candidates .*: it cannot do "
     "WordNetDefinitionRetrieval; its tasks are WordNetDefinitionReranking$"),
])
def test_a_ranker_on_a_task_it_cannot_do_is_refused(tmp_path, method, tasks, why):
    from repr_jax import config
    from repr_jax.integrations import mteb as bridge
    run = tmp_path / method
    config.save_json(config.Config(data=config.DataConfig(name="wordnet"),
                                   encoder=config.EncoderConfig(name="text_transformer"),
                                   method=config.MethodConfig(name=method)),
                     run / "config.json")
    assert bridge.check_model(str(run)) == "ranker"
    with pytest.raises(ValueError, match=f"^--workdir {run}: {why}"):
        bridge.prepare([str(run)], tasks, tmp_path / "out")


def test_a_model_given_twice_is_refused(tmp_path):
    from repr_jax.integrations import mteb as bridge
    with pytest.raises(ValueError, match="--workdir names minilm more than once"):
        bridge.prepare(["minilm", "minilm"], "LeeSTS", tmp_path / "out")


def test_the_output_is_never_an_input():
    from repr_jax.integrations import mteb as bridge
    from repr_jax.train.pretrained import weights_path
    folder = str(weights_path("minilm"))
    with pytest.raises(ValueError, match="--out .* is an input of this command"):
        bridge.prepare([folder], "LeeSTS", folder)


def test_prompts_replace_the_runs_instruction_most_specific_first(tmp_path):
    from repr_jax.integrations import mteb as bridge
    from repr_jax.train.mine import encoders_of
    prompts = {"query": "q: ", "Retrieval": "r: ", "LeeSTS": "lee: "}
    assert bridge.prompt_for(prompts, "BEIR_x", "Retrieval", "query") == "r: "
    assert bridge.prompt_for(prompts, "LeeSTS", "STS", None) == "lee: "
    assert bridge.prompt_for(prompts, "SimLex999", "STS", None) is None  # the run's own
    enc = encoders_of(init_from="minilm", progress=False)
    plain, prefixed = enc.query(["a bank"]), enc.query(["a bank"], "query: ")
    assert np.allclose(enc.query(["query: a bank"]), prefixed, atol=1e-6)
    assert not np.allclose(plain, prefixed, atol=1e-3)
    # mteb's model metadata: BERT's count less its pooler (22,713,216 - 384 * 385), 256 tokens
    assert (enc.parameters, enc.max_tokens) == (22_713_216 - 384 * 385, 256)
    assert enc.normalized  # its 2_Normalize module: mteb's k-means and classifier see unit rows
    (tmp_path / "p.json").write_text('["not", "an object"]')
    with pytest.raises(ValueError, match="--prompts .*p.json: expected a JSON object of strings"):
        bridge.read_prompts(tmp_path / "p.json")


@pytest.mark.slow
def test_minilm_through_mteb_agrees_with_repr_jax(tmp_path, capsys):
    """The real thing (mteb installed: pip install -e ".[mteb]"): MiniLM on a task of each type
    (a BEIR collection for retrieval) through mteb.evaluate; mteb's files are written, its main
    scores equal ours (nDCG@10 to mteb's 5 rounded decimals), and a second run encodes nothing
    again."""
    pytest.importorskip("mteb")
    from repr_jax.integrations import mteb as bridge
    tasks = (f"LeeSTS,beir:{collection(tmp_path, num_docs=200, num_queries=30)},"
             f"GettextCountryBitextMining,WordNetSameWordPairClassification,"
             f"WordNetCategoryClassification,WordNetCategoryClustering")
    out = tmp_path / "out"
    rows = bridge.run(["minilm"], tasks, out, bootstrap=100, progress=False)
    for r in rows[:6]:
        assert abs(r["value"] - r["mteb"]) <= (5e-6 if r["type"] == "Retrieval" else 1e-6), r
    results = list((out / "results").rglob("*.json"))
    assert {p.stem for p in results} >= {"LeeSTS", "BEIR_col", "GettextCountryBitextMining",
                                         "WordNetSameWordPairClassification", "model_meta",
                                         "WordNetCategoryClassification",
                                         "WordNetCategoryClustering"}
    assert not list(out.glob(".mteb_results_*"))  # written aside, then each file moved in
    cached = sorted(p.name for p in (out / "embeddings").rglob("*.npz"))
    assert bridge.run(["minilm"], tasks, out, bootstrap=100, progress=False)[0]["value"] == \
        rows[0]["value"]
    assert sorted(p.name for p in (out / "embeddings").rglob("*.npz")) == cached


@pytest.mark.slow
def test_search_models_through_mteb_agree_with_repr_jax(tmp_path):
    """colbert, splade and cross_encoder runs as mteb search models (mteb installed): MiniLM and
    the three on the reranking task in one paired table, ColBERT and SPLADE searching a BEIR
    collection; mteb's nDCG@10 equals ours from the same scores (to its 5 decimals)."""
    pytest.importorskip("mteb")
    from repr_jax import config as C
    from repr_jax.integrations import mteb as bridge
    from repr_jax.train import train_and_evaluate
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=60, num_queries=12,
                                     num_train=32, seed=3)
    runs = []
    for method in ("colbert", "splade", "cross_encoder"):
        cfg = C.Config(
            seed=0, data=C.DataConfig(name=f"beir:{root}", max_len=16,
                                      data_dir=str(tmp_path / "tfds")),
            encoder=C.EncoderConfig(name="text_transformer", width=16, depth=1, num_heads=2,
                                    mlp_dim=32),
            method=C.MethodConfig(name=method), optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
            train=C.TrainConfig(batch_size=8, steps=2, ckpt_every=0, num_devices=1),
            eval=C.EvalConfig(evaluators=(), bootstrap=0, reference_rows=False))
        train_and_evaluate(cfg, tmp_path / method, progress=False, verbose=False)
        runs.append(str(tmp_path / method))
    rows = bridge.run(["minilm"] + runs, "WordNetDefinitionReranking", tmp_path / "rr",
                      bootstrap=100, progress=False)
    rows += bridge.run(runs[:2], f"beir:{root}", tmp_path / "full", bootstrap=100,
                       progress=False)
    per_task = [r for r in rows if not r["task"].endswith(")")]
    assert len(per_task) == 6
    for r in per_task:
        assert abs(r["value"] - r["mteb"]) <= 5e-6, r
    minilm = next(r for r in per_task if r["run"] == "minilm")
    assert minilm["value"] > max(r["value"] for r in per_task[1:4])  # 2 steps vs a real model
    assert all(r["p_value"] < 0.05 for r in per_task[1:4])  # paired against it
    assert {p.stem for p in (tmp_path / "rr" / "results").rglob("*.json")} >= {
        "WordNetDefinitionReranking", "model_meta"}
