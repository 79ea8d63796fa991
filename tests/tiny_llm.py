"""A tiny Llama-family decoder written as llama.cpp writes a GGUF (and as a Hugging Face folder):
what the decoder_lm import, training and export tests read instead of a real LLM."""

import numpy as np

TINY = dict(vocab_size=300, width=32, depth=2, num_heads=4, num_kv_heads=2, mlp_dim=48,
            rope_base=10000.0, eps=1e-5)


def tiny_params(seed: int = 0):
    """A tiny DecoderLM's freshly initialised parameters (numpy)."""
    import jax
    import jax.numpy as jnp
    from repr_jax.encoders.decoder_lm import DecoderLM
    params = DecoderLM(**TINY).init(jax.random.PRNGKey(seed), jnp.zeros((1, 4), jnp.int32))
    return jax.tree.map(np.asarray, params["params"])


def hf_tensors(params) -> dict[str, np.ndarray]:
    """A tiny DecoderLM's parameters under Hugging Face Llama names ([out, in] weights)."""
    p = {k: v for k, v in params.items()}
    out = {"model.embed_tokens.weight": p["embed_tokens"]["embedding"],
           "model.norm.weight": p["norm"]["scale"]}
    for i in range(TINY["depth"]):
        layer = p[f"layer_{i}"]
        pre = f"model.layers.{i}."
        out[pre + "input_layernorm.weight"] = layer["input_layernorm"]["scale"]
        out[pre + "post_attention_layernorm.weight"] = layer["post_attention_layernorm"]["scale"]
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[pre + f"self_attn.{name}.weight"] = layer[name]["kernel"].T
        for name in ("gate_proj", "up_proj", "down_proj"):
            out[pre + f"mlp.{name}.weight"] = layer[name]["kernel"].T
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


def byte_vocab():
    from tokenizers.pre_tokenizers import ByteLevel
    alphabet = sorted(ByteLevel.alphabet())
    tokens = alphabet + ["Ġt", "he", "Ġthe"]
    tokens += [f"<extra_{i}>" for i in range(TINY["vocab_size"] - len(tokens) - 2)]
    return tokens + ["<|endoftext|>", "<|im_start|>"], ["Ġ t", "h e", "Ġt he"]


def _permute(w, heads):  # llama.cpp's convert_hf_to_gguf.py permutation
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def write_gguf(path, params, types=None, *, arch="llama"):
    """A tiny Llama GGUF as llama.cpp writes one (q/k rows permuted, tied embeddings), its
    matrices stored as ``types`` (name pattern -> GGML type), with a byte-level BPE tokenizer."""
    import gguf
    tokens, merges = byte_vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(TINY["depth"])
    w.add_context_length(64)
    w.add_embedding_length(TINY["width"])
    w.add_feed_forward_length(TINY["mlp_dim"])
    w.add_head_count(TINY["num_heads"])
    w.add_head_count_kv(TINY["num_kv_heads"])
    w.add_rope_freq_base(TINY["rope_base"])
    w.add_layer_norm_rms_eps(TINY["eps"])
    w.add_vocab_size(TINY["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(len(tokens) - 2)
    hf = hf_tensors(params)
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight"}
    block = {"input_layernorm.weight": "attn_norm.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.o_proj.weight": "attn_output.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight"}
    stored = {}
    for name, t in hf.items():
        if name.startswith("model.layers."):
            i, rest = name[len("model.layers."):].split(".", 1)
            gname = f"blk.{i}.{block[rest]}"
        else:
            gname = names[name]
        if arch == "llama" and gname.endswith("attn_q.weight"):
            t = _permute(t, TINY["num_heads"])
        if arch == "llama" and gname.endswith("attn_k.weight"):
            t = _permute(t, TINY["num_kv_heads"])
        kind = next((k for pattern, k in (types or {}).items() if pattern in gname), "F32")
        qtype = gguf.GGMLQuantizationType[kind]
        if t.ndim == 2 and kind not in ("F32", "F16"):
            data = gguf.quants.quantize(t, qtype)
            w.add_tensor(gname, data, raw_shape=data.shape, raw_dtype=qtype)
        else:
            w.add_tensor(gname, t.astype(np.float16) if kind == "F16" else t)
        stored[gname] = np.asarray(gguf.quants.dequantize(
            gguf.quants.quantize(t, qtype) if kind not in ("F32", "F16") else
            t.astype(np.float16 if kind == "F16" else np.float32), qtype), np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored




def write_odd_gguf(path, *, tokenizer: bool = True, q8_1: bool = True) -> None:
    """A header-only GGUF (no blocks) whose one tensor is stored as Q8_1, a type the gguf package
    cannot dequantise (``q8_1``), with or without the byte-level tokenizer."""
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in (("block_count", 0), ("embedding_length", 32),
                       ("feed_forward_length", 48), ("attention.head_count", 4)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    if tokenizer:
        tokens, merges = byte_vocab()
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_merges(merges)
    if q8_1:
        w.add_tensor("token_embd.weight", np.zeros((300, 40), np.uint8), raw_shape=(300, 40),
                     raw_dtype=gguf.GGMLQuantizationType.Q8_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
