"""Scaling studies: functional forms (laws.py) and robust fits with bootstrap intervals (fit.py)."""

from repr_jax.scaling.fit import BootstrapResult, FitResult, bootstrap, fit_law, huber
from repr_jax.scaling.laws import LAWS, Law, compute_optimal, get_law

__all__ = ["LAWS", "BootstrapResult", "FitResult", "Law", "bootstrap", "compute_optimal",
           "fit_law", "get_law", "huber"]
