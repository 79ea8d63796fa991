"""Writes ``rope_reference.json``: transformers' inverse frequencies and attention factor of
scaled rotary embeddings (``ROPE_INIT_FUNCTIONS``), the reference of
:func:`repr_jax.encoders.decoder_lm.rope_frequencies`. Needs torch and transformers (5.x), which
CI does not install; run it in that environment::

    python tests/data/make_rope_reference.py [--out tests/data/rope_reference.json]

Each case is a ``Gemma3TextConfig`` whose global (``full_attention``) layers carry the scaling
(as Gemma 3 4B and larger carry linear factor 8) and whose ``head_dim`` and ``rope_theta`` are the
case's; ``ROPE_INIT_FUNCTIONS[kind](config, None, layer_type="full_attention")`` gives the
``[d / 2]`` inverse frequencies (float32) and the factor cos and sin are multiplied by. YaRN keeps
transformers' defaults (``beta_fast`` 32, ``beta_slow`` 1, ``truncate`` True, no ``mscale``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CASES = (  # kind, head size, base, factor, trained context (yarn)
    ("linear", 256, 1e6, 8.0, 0),  # Gemma 3 4B's global layers
    ("linear", 64, 1e4, 2.0, 0),
    ("yarn", 256, 1e6, 8.0, 32768),  # Gemma 3 270M's context, eight times over
    ("yarn", 128, 5e5, 4.0, 8192),
    ("yarn", 64, 1e4, 16.0, 2048),
    ("yarn", 16, 1e4, 4.0, 64),  # the hand-computed case of tests/encoders/test_gemma3.py
)


def main() -> None:
    import transformers
    from transformers import Gemma3TextConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(Path(__file__).with_name("rope_reference.json")))
    args = p.parse_args()
    cases = []
    for kind, d, base, factor, original in CASES:
        scaled = {"rope_type": kind, "factor": factor, "rope_theta": base}
        if original:
            scaled["original_max_position_embeddings"] = original
        cfg = Gemma3TextConfig(head_dim=d, max_position_embeddings=int(max(original, 1) * factor),
                               rope_parameters={"full_attention": scaled, "sliding_attention": {
                                   "rope_type": "default", "rope_theta": 1e4}})
        inv, attention = ROPE_INIT_FUNCTIONS[kind](cfg, None, layer_type="full_attention")
        cases.append(dict(kind=kind, d=d, base=base, factor=factor, original_context=original,
                          inv_freq=[float(x) for x in inv.float()],
                          attention_factor=float(attention)))
    out = dict(transformers=transformers.__version__, cases=cases)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"-> {args.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
