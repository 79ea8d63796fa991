"""Bridges to other tools' harnesses. Each module imports its tool only when used:
:mod:`repr_jax.integrations.mteb_tasks` (the offline tasks and the paired table, no mteb import)
and :mod:`repr_jax.integrations.mteb` (a run as an mteb model; needs ``pip install
".[mteb]"``)."""
