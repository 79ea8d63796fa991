import dataclasses
import json

import jax
import jax.numpy as jnp
import pytest

from repr_jax import config as C
from repr_jax.config import Config, ConfigError
from repr_jax.eval.knn import KNNOptions


def test_defaults_and_public_keys():
    flat = C.flatten(Config())
    for key in ["seed", "data.name", "encoder.name", "method.name", "optim.lr",
                "optim.weight_decay", "train.batch_size", "train.steps", "train.eval_every",
                "train.ckpt_every"]:
        assert key in flat


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().optim.lr = 1.0


def test_override_parses_literals_and_bare_words():
    cfg = C.override(Config(), ["optim.lr=3e-4", "data.name=digits", "encoder.widths=(8, 16)",
                                "train.steps=10", "data.views.flip=True", "optim.warmup_steps=5"])
    assert cfg.optim.lr == 3e-4 and cfg.data.name == "digits"
    assert cfg.encoder.widths == (8, 16) and cfg.train.steps == 10 and cfg.data.views.flip
    assert isinstance(cfg.optim.warmup_steps, float)  # ints become floats for float fields


def test_unknown_key_names_closest_and_valid_keys():
    with pytest.raises(ConfigError) as e:
        C.override(Config(), ["optim.lrr=1e-3"])
    msg = str(e.value)
    assert "optim.lrr" in msg and "did you mean 'optim.lr'" in msg and "weight_decay" in msg
    assert "\n" not in msg
    with pytest.raises(ConfigError, match="unknown config key 'trian'.*'train'"):
        C.override(Config(), ["trian.steps=3"])


@pytest.mark.parametrize("item, pattern", [
    ("optim.lr=-1e-3", "optim.lr must be > 0"),
    ("optim.lr=fast", "optim.lr must be a number"),
    ("optim.warmup_steps=1e999", "optim.warmup_steps must be a finite number, got inf"),
    ("method.temperature=float('nan')", "method.temperature must be a number"),
    ("train.batch_size=12.5", "train.batch_size must be an integer"),
    ("train.steps=0", "train.steps must be > 0"),
    ("train.steps=99999999999999999999", r"train.steps must be at most 2,147,483,647 \(2\^31"),
    ("seed=-4294967296", "seed must be at most"),
    ("optim.lr=1e300", r"optim.lr=1e\+300 does not fit float32"),
    ("method.temperature=1e-300", "method.temperature=1e-300 does not fit float32"),
    ("method.name=simclrr", "did you mean 'simclr'"),
    ("method.queue_size=8", "unknown config key 'method.queue_size'.*temperature"),
    ("optim=1", "optim is a section"),
    ("optim.lr", "must look like key=value"),
    ("optim.lr=__import__('os').system('true')", "optim.lr must be a number"),
])
def test_bad_values_fail_in_one_line(item, pattern):
    with pytest.raises(ConfigError, match=pattern) as e:
        C.override(Config(), [item])
    assert "\n" not in str(e.value)


def test_an_unknown_section_name_is_refused_by_its_registry():
    """A family's name chooses its section: the registry refuses an unknown one, with the
    closest valid name (config.py knows no family)."""
    with pytest.raises(ConfigError, match="encoder.name='vitt' is not valid \\(did you mean "
                                          "'vit'\\?\\); choose from"):
        C.override(Config(), ["encoder.name=vitt"])


@pytest.mark.parametrize("item, pattern", [
    ("encoder.variant=huge", "unknown cnn variant 'huge'"),
    ("eval.evaluators=('knn', 'lin')", "eval.evaluators='lin' is not valid"),
    ("train.grad_cache_chunk=8", "method 'vicreg' has no in-batch-negative objective"),
])
def test_names_are_checked_where_they_are_built_before_compiling(item, pattern):
    """Registries (encoder families, methods' options, evaluators) check their names; config.py
    knows none of them."""
    from repr_jax.train.run import check_buildable
    cfg = C.override(Config(), ["method.name=vicreg", item] if "grad_cache" in item else [item])
    with pytest.raises(ConfigError, match=pattern) as e:
        check_buildable(cfg)
    assert "\n" not in str(e.value)


def test_methods_own_their_sections():
    """A method section holds that method's fields only; switching methods keeps the shared ones;
    an old flat config.json loads with the fields its method lacks dropped."""
    cfg = C.override(Config(), ["method.proj_dim=32", "method.name=vicreg", "method.sim_weight=5"])
    assert type(cfg.method).__name__ == "VICRegConfig" and cfg.method.proj_dim == 32
    assert not hasattr(cfg.method, "temperature") and cfg.method.sim_weight == 5.0
    assert C.MethodConfig(name="moco", queue_size=64).queue_size == 64
    with pytest.raises(ConfigError, match="valid keys in method: name, loss_weight, patch_size"):
        C.override(Config(), ["method.name=mae", "method.temperature=0.1"])


def test_evaluators_own_their_sections_and_old_flat_keys_still_set_them():
    cfg = C.override(Config(), ["eval.knn.k=5", "eval.similarity=dot", "eval.probe=logistic"])
    assert cfg.eval.knn == KNNOptions(k=5, similarity="dot")
    assert {cfg.eval.retrieval.similarity, cfg.eval.sts.similarity} == {"dot"}
    assert cfg.eval.linear_probe.kind == "logistic"
    with pytest.raises(ConfigError, match="unknown config key 'eval.knn.kk'; did you mean "
                                          "'eval.knn.k'"):
        C.override(Config(), ["eval.knn.kk=5"])


def test_old_flat_config_json_still_loads(tmp_path):
    old = C.to_dict(Config())
    old["method"] = dict(name="vicreg", temperature=0.5, loss_weight=1.0, momentum=0.99,
                         sim_weight=10.0, var_weight=25.0, cov_weight=1.0, redundancy_weight=5e-3,
                         proj_hidden=64, proj_dim=32, pred_hidden=64, queue_size=4096,
                         objective="info_nce", patch_size=4, mask_ratio=0.75, matryoshka_dims=[],
                         matryoshka_layers=False, compat_run="", compat_weight=1.0)
    old["eval"] = {k: v for k, v in old["eval"].items() if not isinstance(v, dict)}
    old["eval"].update(knn_k=7, similarity="l2", fewshot_shots=[1, 2], protocol="knn")
    (tmp_path / "config.json").write_text(json.dumps(old))
    cfg = C.load_json(tmp_path / "config.json")
    assert cfg.eval.knn == KNNOptions(k=7, similarity="l2")
    assert cfg.eval.fewshot.shots == (1, 2) and cfg.eval.matryoshka.protocol == "knn"
    assert cfg.method == C.MethodConfig(name="vicreg", sim_weight=10.0, proj_hidden=64,
                                        proj_dim=32)


def test_json_round_trip(tmp_path):
    cfg = C.override(Config(), ["optim.lr=3e-4", "encoder.widths=(4,)"])
    C.save_json(cfg, tmp_path / "config.json")
    assert C.load_json(tmp_path / "config.json") == cfg
    d = json.loads((tmp_path / "config.json").read_text())
    d["optim"]["bogus"] = 1
    with pytest.raises(ConfigError, match="optim.bogus"):
        C.from_dict(d)


def test_hyperparameters_are_leaves_structure_is_static():
    cfg = Config()
    leaves = jax.tree.leaves(cfg)
    assert all(isinstance(x, float) for x in leaves)
    assert cfg.optim.lr in leaves and cfg.method.temperature in leaves
    # A structural change changes the treedef (a new compile); a numeric change does not.
    t = jax.tree.structure
    assert t(cfg) == t(C.override(cfg, ["optim.lr=0.1"]))
    assert t(cfg) != t(C.override(cfg, ["train.batch_size=128"]))


def test_population_of_configs_can_be_vmapped():
    cfgs = [C.override(Config(), [f"optim.lr={lr}"]) for lr in (0.1, 0.2, 0.3)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *cfgs)
    out = jax.vmap(lambda c: c.optim.lr * c.method.temperature)(stacked)
    assert jnp.allclose(out, jnp.array([0.05, 0.1, 0.15]))
    # jit sees the config as an argument: no recompilation for new numeric values.
    f = jax.jit(lambda c: c.optim.lr * 2)
    f(cfgs[0]), f(cfgs[1])
    assert f._cache_size() == 1


def test_batch_not_divisible_by_devices():
    with pytest.raises(ConfigError, match="not divisible by the 3 devices"):
        C.override(Config(), ["train.batch_size=256"]).check_devices(3)


def test_load_experiment_by_name_and_arg():
    full, quick = C.load("simclr_mnist1d"), C.load("simclr_mnist1d:quick")
    assert full.method.name == "simclr" and quick.train.steps < full.train.steps
    with pytest.raises(ConfigError, match="did you mean 'simclr_mnist1d'"):
        C.load("simclr_mnist")


def test_every_experiment_file_loads():
    for name in C.list_experiments():
        source = (C.experiments_dir() / f"{name}.py").read_text()
        if "def get_config" not in source:
            # a study that trains nothing of its own (tests/test_studies.py loads every study)
            assert "def get_study" in source, name
            continue
        assert isinstance(C.load(name), Config)


@pytest.mark.parametrize("item, pattern", [
    ("data.views.flip_p=2.0", r"data.views.flip_p must be a probability in \[0, 1\]"),
    ("data.views.grayscale_p=-0.5", r"grayscale_p must be a probability in \[0, 1\]"),
    ("data.views.solarize_p=1.5", r"solarize_p must be a probability"),
    ("data.views.crop_scale=(0.9,0.1)", r"crop_scale must be \(lo, hi\) with 0 < lo <= hi <= 1"),
    ("data.views.local_scale=(0.1,2.0)", r"local_scale must be \(lo, hi\) with 0 < lo <= hi <= 1"),
    ("data.views.crop_ratio=(1.3,0.75)", r"crop_ratio must be \(lo, hi\) with 0 < lo <= hi"),
    ("data.views.blur_sigma=(0.0,2.0)", r"blur_sigma must be \(lo, hi\) with 0 < lo <= hi"),
    ("data.views.jitter=(0.4,0.4,0.4,0.9)", r"jitter must be 4 numbers >= 0"),
    ("data.views.local_crops=-5", r"local_crops must be >= 0 \(or -1: the preset's\)"),
    ("eval.fewshot.shots=(-1,)", "eval.fewshot.shots must be one or more counts > 0"),
    ("eval.fewshot.shots=(0,)", "eval.fewshot.shots must be one or more counts > 0"),
    ("eval.fewshot.shots=()", "eval.fewshot.shots must be one or more counts > 0"),
])
def test_values_outside_a_fields_domain_fail_naming_it(item, pattern):
    """The schema's domains (probabilities, ordered ranges, counts): a value the type accepts but
    the operation cannot mean fails before anything runs, in one line naming the field."""
    with pytest.raises(ConfigError, match=pattern) as e:
        C.override(Config(), [item])
    assert "\n" not in str(e.value)
    # the unset markers and in-domain values stay valid
    C.override(Config(), ["data.views.flip_p=-1", "data.views.crop_scale=()",
                          "data.views.crop_scale=(0.08,1.0)", "data.views.local_crops=0"])


def test_experiment_args_and_errors_in_a_users_file_are_one_line(tmp_path):
    """``name:arg`` takes the args the file declares (``ARGS``, default ``:quick``): a misspelt
    arg no longer runs the full config silently; a syntax error or an exception in a config file
    names the user's file and line, not repr_jax's stack."""
    for name in ("simclr_mnist1d:bogus", "simclr_mnist1d:quick:extra", "pooling_latent_topics:x"):
        with pytest.raises(ConfigError, match=r"takes :.* nothing after its name, not :") as e:
            C.load(name)
        assert "\n" not in str(e.value)
    assert C.load("simclr_mnist1d:quick").train.steps < C.load("simclr_mnist1d").train.steps
    assert C.load("pooling_latent_topics:cls-short").data.max_len == 32
    broken = tmp_path / "broken.py"
    broken.write_text("def get_config(arg=None):\n    x = 1 +\n")
    with pytest.raises(ConfigError, match=rf"{broken}:2: invalid syntax"):
        C.load(str(broken))
    raises = tmp_path / "raises.py"
    raises.write_text("def helper():\n    return {}['k']\n\n\n"
                      "def get_config(arg=None):\n    return helper()\n")
    with pytest.raises(ConfigError, match=rf"{raises}:2: get_config\(None\) raised KeyError"):
        C.load(str(raises))
