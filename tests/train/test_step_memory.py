"""What a run hands back while it trains: the compiler's freed scratch after each compilation, and
each batch shape's compiled step (with JAX's caches, which hold it too) when training ends, before
the evaluation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config

from repr_jax import config as C
from repr_jax.train import loop, run


def _step_by_shape(traces: list):
    def step(state, batch, hp):
        traces.append(batch["x"].shape)  # runs once per trace
        return state + hp * batch["x"].sum(), {"loss": batch["x"].mean()}
    return run.StepByShape(jax.jit(step), devices=1)


def test_release_drops_the_executables_and_a_later_call_compiles_again(monkeypatch):
    released = []
    monkeypatch.setattr(run, "release_host_memory", lambda: released.append(1) or True)
    traces: list = []
    step = _step_by_shape(traces)
    state, hp = jnp.zeros(()), jnp.ones(())
    batches = [{"x": np.ones((2, n), np.float32)} for n in (16, 32)]
    first = [step(state, b, hp) for b in batches]
    assert len(step.compiled) == 2 and traces == [(2, 16), (2, 32)]
    assert len(released) == 2  # after each compilation
    step(state, batches[0], hp)
    assert len(traces) == 2  # a compiled shape runs without tracing again
    step.release()
    assert step.compiled == {} and len(released) == 3
    again = step(state, batches[0], hp)
    assert traces[-1] == (2, 16) and len(step.compiled) == 1  # traced and compiled anew
    np.testing.assert_array_equal(np.asarray(again[0]), np.asarray(first[0][0]))


@pytest.mark.slow
def test_training_releases_its_step_before_the_final_evaluation(tmp_path, mnist1d_small,
                                                                 monkeypatch):
    events = []
    release, evaluate = run.StepByShape.release, loop.run_evaluation

    def recording_release(self):
        events.append(("release", len(self.compiled)))
        release(self)

    def recording_evaluation(*args, **kwargs):
        events.append(("evaluate", None))
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(run.StepByShape, "release", recording_release)
    monkeypatch.setattr(loop, "run_evaluation", recording_evaluation)
    cfg = tiny_config(train=C.TrainConfig(batch_size=32, steps=4, ckpt_every=0, eval_every=2,
                                          log_every=1, num_devices=1),
                      eval=C.EvalConfig(evaluators=("knn",), bootstrap=0,
                                        reference_rows=False))
    out = loop.train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False,
                                  dataset=mnist1d_small)
    # the evaluation in the middle keeps the step; the final one comes after it is released
    assert events == [("evaluate", None), ("release", 1), ("evaluate", None)]
    assert int(out["state"].step) == 4 and out["eval_rows"]



def test_freed_memory_past_what_a_step_needs_goes_back(monkeypatch):
    """Kept memory is released after a step only when resident memory passes the mark left by
    the last release plus KEPT_STEPS of the largest step's temporaries."""
    resident, released = [1000], []

    def release():
        released.append(resident[0])
        return True

    monkeypatch.setattr(run.host_memory, "kept", True)
    monkeypatch.setattr(run, "resident_bytes", lambda: resident[0])
    monkeypatch.setattr(run, "release_host_memory", release)
    step = _step_by_shape([])
    state, hp, batch = jnp.zeros(()), jnp.ones(()), {"x": np.ones((2, 16), np.float32)}
    step(state, batch, hp)
    assert released == [1000] and step.floor == 1000  # after the compilation
    step.temp_bytes = 100
    resident[0] = 1000 + 150  # a step's temporaries and half again: kept
    step(state, batch, hp)
    assert released == [1000]
    resident[0] = 1000 + 151
    step(state, batch, hp)
    assert released == [1000, 1151]
