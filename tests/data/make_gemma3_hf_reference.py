"""Writes ``gemma3_hf_tiny/``: a small random ``Gemma3ForCausalLM`` saved by transformers'
``save_pretrained`` (its own ``config.json`` and ``model.safetensors``), and
``gemma3_hf_tiny_reference.npz``: its outputs on a few id rows, the reference for reading a
Hugging Face ``gemma3_text`` folder. Needs torch and transformers (5.x), which CI does not
install; run it in that environment::

    python tests/data/make_gemma3_hf_reference.py

The model is Gemma 3's architecture at a size that fits in the repository (~0.2 MB): 6 blocks
(the 6th global, the others local with a window of 4 tokens, so 12-token rows use it), width 32,
2 query heads and 1 key/value head of 16, GeGLU width 32, vocabulary 64, global rotary base
1e6 and local 1e4, and ``query_pre_attn_scalar`` 24 (not the head size: attention scores are
divided by sqrt(24), as Gemma 3 27B's by sqrt(168)). Weights are ``torch.manual_seed(0)``'s
initialisation with every norm weight drawn from N(0, 0.1) too (zeros would hide the
``1 + w`` convention). float32, eager attention, eval mode, ``torch.inference_mode()``; each row
run alone (a batch of one, no padding). Arrays: ``ids [R, 12]``; ``states [R, 12, 32]``
(``last_hidden_state``, after the final norm), ``layer2 [R, 12, 32]`` (``hidden_states[3]``, the
residual stream after block index 2) and ``logits [R, 12, 64]``; ``bidirectional_states``: the
same weights in a model whose config is built with ``use_bidirectional_attention=True``
(EmbeddingGemma's setting: no causal mask, and transformers narrows the local window to
``sliding_window // 2 + 1`` on building the config: a token sees those within 2 on either side
here, 256 in EmbeddingGemma; its ``config.json`` keeps the window as given).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROWS = np.random.default_rng(0).integers(4, 64, (3, 12))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(HERE / "gemma3_hf_tiny"))
    args = parser.parse_args()
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    torch.manual_seed(0)
    sizes = dict(
        vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=6,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=24,
        sliding_window=4, max_position_embeddings=64, rms_norm_eps=1e-6, pad_token_id=0,
        bos_token_id=2, eos_token_id=1, attn_implementation="eager", tie_word_embeddings=True)
    model = Gemma3ForCausalLM(Gemma3TextConfig(**sizes)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.1)
    model.save_pretrained(args.out, safe_serialization=True)
    print("config:", (Path(args.out) / "config.json").read_text())

    def run(m):
        states, layer2, logits = [], [], []
        with torch.inference_mode():
            for row in ROWS:
                x = torch.tensor([row.tolist()])
                out = m.model(input_ids=x, output_hidden_states=True)
                states.append(out.last_hidden_state[0].numpy())
                layer2.append(out.hidden_states[3][0].numpy())
                logits.append(m(input_ids=x).logits[0].numpy())
        return np.stack(states), np.stack(layer2), np.stack(logits)
    states, layer2, logits = run(model)
    both_config = Gemma3TextConfig(**sizes, use_bidirectional_attention=True)
    assert both_config.sliding_window == 3 and both_config.to_dict()["sliding_window"] == 4
    both = Gemma3ForCausalLM(both_config).eval()
    both.load_state_dict(model.state_dict())
    bidirectional, _, _ = run(both)
    print("bidirectional differs from causal by", float(np.abs(bidirectional - states).max()))
    np.savez_compressed(HERE / "gemma3_hf_tiny_reference.npz", ids=ROWS.astype(np.int32),
                        states=states, layer2=layer2, logits=logits,
                        bidirectional_states=bidirectional)
    print("wrote", args.out, "and", HERE / "gemma3_hf_tiny_reference.npz")


if __name__ == "__main__":
    main()
