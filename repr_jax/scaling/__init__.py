"""Scaling studies: sweeps (sweep.py), functional forms (laws.py) and robust fits with bootstrap
intervals (fit.py) of the tables sweeps write (table.py); studies (study.py) that test a claim
with a sweep and an analysis."""

from repr_jax.scaling.fit import BootstrapResult, FitResult, bootstrap, fit_law, huber
from repr_jax.scaling.laws import LAWS, Law, compute_optimal, get_law
from repr_jax.scaling.study import (Study, embedded, embedded_members, load_study, probe_accuracy,
                                   run_study, runs_by_point)
from repr_jax.scaling.sweep import Sweep, collect, load_sweep, run_sweep

__all__ = ["LAWS", "BootstrapResult", "FitResult", "Law", "Study", "Sweep", "bootstrap", "collect",
           "compute_optimal", "embedded", "embedded_members", "fit_law", "get_law", "huber", "load_study", "load_sweep",
           "probe_accuracy", "run_study", "run_sweep", "runs_by_point"]
