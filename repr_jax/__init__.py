"""repr_jax: representation learning in JAX/Flax.

One typed config describes an experiment (``repr_jax.config``); ``repr_jax.train.train_and_evaluate``
trains it on one CPU, many devices or many hosts, and evaluates the representation downstream.
"""

__version__ = "0.1.0"
