"""TopK SAEs at k = 16, 32 and 64 and two widths, each width's three in one compiled step.

Claim (Gao et al. 2024): at a fixed number of latents a TopK SAE's reconstruction error falls as k
grows, and at a fixed k it falls as the latents grow.

Setup: ``sae_topk``'s config and store (MiniLM layer 3 over 10,000 WordNet documents), 500 steps of
1,024 vectors, without the spliced downstream rows. ``method.k`` is a hyper leaf: the members of a
width share one vmapped step whose ``lax.top_k`` takes the members' largest k (64), each member's
ranks past its own k zeroed, so each member is its separate run (``tests/train/
test_sae_population.py``, to 1e-5 over 8 steps). ``method.latents`` changes the parameter shapes,
so it is a grid key beside the population: one population per width.
Commands:  (the store: the first two commands of experiments/sae_topk.py)
           repr-jax sweep sae_k_population --workdir runs/sae_k --jobs 1
           (append :quick for a 50-step smoke test)
Hardware:  2 CPU cores (Intel Xeon), shared with other jobs.
Runtime:   18 min 41 s: the 1,024-latent population 5 min 52 s (pinned to one core beside the
           other), the 4,096-latent one 12 min 49 s alone, measured 2026-12-05. Without --jobs 1
           each population gets one core and the 4,096 one takes about an hour.
Result (test split, 14,374 vectors; FVU with its 95% bootstrap interval; dead: never firing on it):
    latents   k    FVU                       l0    dead     dense
    1024      16   0.3683 [0.3656, 0.3708]   16    0.1338   0.0107
    1024      32   0.2883 [0.2862, 0.2903]   32    0.0547   0.0400
    1024      64   0.2237 [0.2222, 0.2251]   64    0.0508   0.1826
    4096      16   0.3460 [0.3432, 0.3485]   16    0.7100   0.0022
    4096      32   0.2647 [0.2626, 0.2665]   32    0.4355   0.0083
    4096      64   0.1944 [0.1929, 0.1957]   64    0.1201   0.0264
Outcome: reproduced in direction. FVU falls with k at both widths (0.065-0.08 per doubling) and
with width at every k (by 0.02-0.03 from 1,024 to 4,096), though the wider SAEs leave most of their
extra latents dead at small k. The k = 32, 4,096-latent member trains bit for bit as
``sae_topk``'s run through step 100, then drifts at float level through TopK's discrete choices
(FVU 0.26465 vs 0.26468 at step 500).
"""

from sae_topk import get_config as base_config

from repr_jax.config import override
from repr_jax.scaling import Sweep


def get_config(arg=None):
    return override(base_config(arg), ["eval.sae.downstream=False", "eval.reference_rows=False"])


def get_sweep(arg=None):
    return Sweep(get_config(arg), grid={"method.latents": [1024, 4096], "method.k": [16, 32, 64]},
                 population=("method.k",))
