"""Scaling studies: sweeps (sweep.py), functional forms (laws.py) and robust fits with bootstrap
intervals (fit.py) of the tables sweeps write (table.py)."""

from repr_jax.scaling.fit import BootstrapResult, FitResult, bootstrap, fit_law, huber
from repr_jax.scaling.laws import LAWS, Law, compute_optimal, get_law
from repr_jax.scaling.sweep import Sweep, collect, load_sweep, run_sweep

__all__ = ["LAWS", "BootstrapResult", "FitResult", "Law", "Sweep", "bootstrap", "collect",
           "compute_optimal", "fit_law", "get_law", "huber", "load_sweep", "run_sweep"]
