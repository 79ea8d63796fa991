"""Every kind owns its options: datasets, encoder families and evaluators declare their sections in
their own files, chosen by name as methods' are; configs written before load as the same run."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import toy_encoder
import toy_evaluator
import toy_format

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data.formats import FORMATS
from repr_jax.encoders import FAMILIES
from repr_jax.eval import EVALUATORS

FIXTURES = Path(__file__).parent / "fixtures"
QUICK = ["--config", "simclr_mnist1d:quick", "--set", "train.batch_size=32", "--set", "train.steps=4",
         "--set", "train.ckpt_every=0", "--set", "train.log_every=2",
         "--set", "eval.evaluators=('knn',)", "--set", "eval.reference_rows=False",
         "--set", "eval.bootstrap=0", "--no-progress"]


def test_switching_a_dataset_or_a_family_keeps_what_both_have_and_drops_the_rest():
    cfg = C.override(C.load("biencoder_wordnet"), ["data.name=beir:/data/coll"])
    assert C.to_dict(cfg.data)["tokenizer"] == "minilm" and C.to_dict(cfg.data)["max_len"] == 32
    assert "pairs" not in C.to_dict(cfg.data)  # wordnet's alone
    cfg = C.override(C.load("simclr_digits"), ["data.name=imagefolder:/data/images",
                                               "data.image_size=32"])
    assert C.flatten(cfg.data)["image_size"] == 32 and "num_examples" not in C.flatten(cfg.data)
    cfg = C.override(C.load("biencoder_latent_modalities"), ["data.name=pairs:/data/p.jsonl"])
    assert {"num_examples", "num_classes"}.isdisjoint(C.flatten(cfg.data))
    vit = C.override(C.load("simclr_mnist1d"), ["encoder.name=vit", "encoder.patch_size=4"])
    assert C.to_dict(vit.encoder) == {"name": "vit", "variant": "", "embed_dim": 0,
                                      "init_from": "", "init_strict": True, "remat": False,
                                      "width": 0, "depth": 0, "num_heads": 0, "mlp_dim": 0,
                                      "patch_size": 4}
    back = C.override(vit, ["encoder.name=cnn"])
    assert back.encoder.widths == (32, 64, 128) and back.encoder.kernel_size == 5  # defaults


@pytest.mark.parametrize("item, message", [
    ("data.pairs=synonyms", "unknown config key 'data.pairs'; valid keys in data: name, "
                            "data_dir, train_examples, in_memory_mb, workers, prefetch, views, "
                            "num_examples (data.pairs belongs to wordnet: set data.name first)"),
    ("data.tokenizer=minilm", "(data.tokenizer belongs to wordnet, pairs:FILE.jsonl, beir:DIR, "
                              "a TFDS dataset: set data.name first)"),
    ("encoder.patch_size=4", "(encoder.patch_size belongs to vit, mixer: set encoder.name first)"),
    ("eval.knn.kk=3", "unknown config key 'eval.knn.kk'; did you mean 'eval.knn.k'?"),
    ("encoder.name=vitt", "encoder.name='vitt' is not valid (did you mean 'vit'?)"),
])
def test_a_key_of_another_kind_names_who_has_it(item, message):
    with pytest.raises(C.ConfigError) as e:
        C.override(C.load("simclr_mnist1d"), [item])
    assert message in str(e.value)


def test_print_config_shows_the_chosen_sections_fields_only(capsys):
    assert cli.main(["train", "--set", "data.name=digits", "--set", "encoder.name=resnet",
                     "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["data"]) == {"name", "data_dir", "train_examples", "in_memory_mb",
                                    "workers", "prefetch", "views"}
    assert set(printed["encoder"]) == {"name", "variant", "embed_dim", "init_from",
                                       "init_strict", "remat"}
    assert printed["eval"]["knn"] == {"k": 20, "temperature": 0.07, "similarity": "cosine"}


BEFORE = json.loads((FIXTURES / "configs_before_sections.json").read_text())


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_experiment_prints_what_it_printed_before_the_sections(name, tmp_path):
    """Each experiment's config as the code before the sections wrote it (flat data and encoder
    keys): today's holds the same value for every key it has, lacks only keys that were unset or
    did not apply, and the old file loads into today's config. Keys added since (the text
    sections' query and document lengths and prefixes, LoRA, tied towers) hold their off values."""
    old, new = C.flatten(C.load_json(_write(tmp_path, BEFORE[name]))), C.flatten(C.load(name))
    assert old == new
    flat_before = _flat(BEFORE[name])
    assert all(flat_before[k] == (list(v) if isinstance(v, tuple) else v) if k in flat_before
               else ADDED_SINCE[k] == v for k, v in new.items())


def test_a_run_written_before_the_sections_resumes_as_the_same_run(tmp_path):
    """A real run's config.json (the default experiment, trained by the code before): it loads
    into today's default config, and a run folder holding it resumes under it."""
    from repr_jax.train.run import check_resumable
    (tmp_path / "config.json").write_text((FIXTURES / "run_config_before_sections.json")
                                          .read_text())
    assert C.load_json(tmp_path / "config.json") == C.load("simclr_mnist1d")
    check_resumable(C.load("simclr_mnist1d"), tmp_path)


ADDED_SINCE = {"data.query_max_len": 0, "data.doc_max_len": 0, "data.query_prefix": "",
               "data.doc_prefix": "", "optim.lora_rank": 0, "optim.lora_alpha": 0.0,
               "optim.lora_targets": (), "method.tied_towers": False,
               "data.length_buckets": True, "data.pack_tokens": True,
               "eval.rerank.first_stage": "bm25",
               "eval.rerank.depth": 50, "eval.rerank.metrics": ("ndcg@10", "recall@10", "mrr@10"),
               "eval.rerank.batch_size": 64, "eval.late_interaction.storage": "float16",
               "eval.late_interaction.metrics": ("recall@1", "recall@10", "mrr@10", "ndcg@10"),
               "eval.late_interaction.tile": 256, "eval.late_interaction.max_queries": 2000,
               "eval.sae.dense_threshold": 0.1, "eval.sae.downstream": True,
               "eval.sae.max_queries": 500, "eval.sae.max_corpus": 5000,
               "eval.sae.max_texts": 500, "eval.concepts.max_concepts": 32,
               "eval.concepts.min_examples": 2, "eval.concepts.probe": True,
               "eval.concepts.seed": 0,
               "eval.sparse_retrieval.metrics": ("recall@1", "recall@10", "mrr@10", "ndcg@10"),
               "eval.sparse_retrieval.max_queries": 2000,
               "eval.fusion.methods": ("rrf", "convex"), "eval.fusion.parts": ("dense", "bm25"),
               "eval.fusion.depth": 100, "eval.fusion.rrf_k": 60, "eval.fusion.weights": (),
               "eval.fusion.normalize": "minmax", "eval.fusion.similarity": "cosine",
               "eval.fusion.metrics": ("ndcg@10", "recall@10", "mrr@10"),
               "eval.fusion.max_queries": 2000, "method.query_encoder": "mlm",
               "method.spread_out": 0.0, "method.spread_out_mean": 0.0,
               "eval.bitext.catalogue": "", "eval.bitext.languages": (),
               "eval.bitext.margin": "ratio", "eval.bitext.k": 4}


def _write(folder: Path, config: dict) -> Path:
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_import_repr_jax_and_its_config_imports_no_encoder_dataset_or_evaluator():
    probe = ("import sys, repr_jax, repr_jax.config; "
             "print(sorted(m for m in sys.modules if m.startswith(('repr_jax.encoders', "
             "'repr_jax.data', 'repr_jax.eval', 'repr_jax.methods'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
    assert len((Path(C.__file__)).read_text().splitlines()) < 500


# --------------------------------------------------------------------------------------------------
# A new dataset format, encoder family and evaluator: one file and one registry line each
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def toys(monkeypatch):
    monkeypatch.setitem(FORMATS, "npz:", toy_format.FORMAT)
    monkeypatch.setitem(FAMILIES, "random_features", toy_encoder.FAMILY)
    monkeypatch.setitem(EVALUATORS, "norm", toy_evaluator.Norm)


def test_a_new_format_family_and_evaluator_have_their_own_sections(toys):
    cfg = C.override(C.load("simclr_mnist1d"), [
        "data.name=npz:/x.npz", "data.test_fraction=0.25", "encoder.name=random_features",
        "encoder.activation=relu", "eval.norm.power=2"])
    assert isinstance(cfg.data, toy_format.NpzData) and cfg.data.test_fraction == 0.25
    assert isinstance(cfg.encoder, toy_encoder.RandomFeaturesConfig)
    assert cfg.eval.norm == toy_evaluator.NormOptions(power=2.0)
    with pytest.raises(C.ConfigError, match="encoder.activation='gelu' is not valid"):
        C.override(cfg, ["encoder.activation=gelu"])


@pytest.mark.slow
def test_a_new_format_family_and_evaluator_train_from_the_cli(toys, tmp_path, capsys):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 400)
    np.savez(tmp_path / "arrays.npz", x=(rng.normal(size=(400, 40)) + y[:, None]
                                         ).astype(np.float32), label=y)
    workdir = tmp_path / "run"
    assert cli.main(["train", *QUICK, "--workdir", str(workdir), "--set",
                     f"data.name=npz:{tmp_path / 'arrays.npz'}", "--set",
                     "data.test_fraction=0.25", "--set", "encoder.name=random_features",
                     "--set", "encoder.width=12", "--set", "eval.evaluators=('knn','norm')",
                     "--set", "eval.norm.power=2"]) == 0
    saved = json.loads((workdir / "config.json").read_text())
    assert saved["data"]["test_fraction"] == 0.25 and "num_examples" not in saved["data"]
    assert saved["encoder"] == {"name": "random_features", "variant": "", "embed_dim": 0,
                                "init_from": "", "init_strict": True, "remat": False,
                                "width": 12, "activation": "tanh"}
    rows = json.loads((workdir / "eval" / "step_4.json").read_text())
    norm = [r for r in rows if r["evaluator"] == "norm"]
    assert len(norm) == 1 and norm[0]["value"] > 0
    assert sum(r["evaluator"] == "knn" for r in rows) >= 1
    capsys.readouterr()


@pytest.mark.slow
def test_a_users_data_replaces_an_experiments_without_unsetting_anything(tmp_path, capsys):
    """The README's own-data commands: each experiment's data section gives way to the user's
    format, keeping what both take (the tokenizer and length, the image size)."""
    from PIL import Image

    from repr_jax.data import beir
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (tmp_path / "images" / c).mkdir(parents=True)
        for i in range(10):
            Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(
                tmp_path / "images" / c / f"{i}.png")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"what is item {i}?",
                                         "positive": f"item {i} is kind {i % 7}"}) + "\n"
                             for i in range(300)))
    coll = beir.synthetic_collection(tmp_path / "coll", num_docs=200, num_queries=20,
                                     num_train=100)
    tiny = ["--set", "train.steps=2", "--set", "train.batch_size=8", "--set",
            "train.ckpt_every=0", "--set", "eval.reference_rows=False", "--set",
            "eval.bootstrap=0", "--no-progress"]
    commands = {
        "beir": ["--config", "biencoder_wordnet:quick", "--set", f"data.name=beir:{coll}",
                 "--set", f"eval.sets=('beir:{coll}',)", "--set",
                 "eval.evaluators=('retrieval',)"],
        "pairs": ["--config", "biencoder_latent_modalities:quick", "--set",
                  f"data.name=pairs:{pairs}", "--set", "encoder.name=text_transformer",
                  "--set", "eval.evaluators=('retrieval',)"],
        "images": ["--config", "simclr_digits:quick", "--set",
                   f"data.name=imagefolder:{tmp_path / 'images'}", "--set",
                   "data.image_size=12", "--set", "eval.evaluators=('knn',)",
                   "--set", "eval.knn.k=3"],
    }
    for name, argv in commands.items():
        code = cli.main(["train", *argv, *tiny, "--workdir", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert code == 0, (name, err[-2000:])
        assert (tmp_path / name / "eval" / "step_2.json").exists(), name
