"""sentence-transformers' folder format, written without torch: what ``SentenceTransformer(OUT)``
loads offline.

A model is a list of modules (``modules.json``): a Transformer (Hugging Face weights, config and
tokenizer files), a Pooling, optionally a Dense (a trained projection) and a Normalize. A
two-tower bi-encoder becomes a Router with a ``query`` and a ``document`` route, each its own
module list, so ``encode_query`` / ``encode_document`` reach the tower that was trained for them;
instructions become the model's ``prompts`` (``query`` / ``document``), left out of a decoder's
pooling (``include_prompt: false``) as repr_jax leaves them out. Module types are written under
their ``sentence_transformers.models`` names, which sentence-transformers 3 to 6 read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from repr_jax import files

ST_POOLING = ("mean", "cls", "max", "last_token", "weighted_mean")  # ours they compute alike


@dataclasses.dataclass(frozen=True)
class Route:
    """One side's modules: a Transformer folder writer, its pooling, and the projection after
    it (``(kernel [in, out], bias)`` or None)."""
    write_transformer: Any  # (folder: Path) -> width
    pooling: str
    include_prompt: bool = True
    projection: tuple[np.ndarray, np.ndarray] | None = None


def _modules(route: Route, folder: Path, prefix: str, normalize: bool) -> list[tuple[str, str]]:
    """Writes one route's modules under ``folder`` (names prefixed by ``prefix``); returns
    ``[(name, type)]`` in order."""
    name = f"{prefix}0_Transformer" if prefix else ""  # a plain model's sits at the top
    width = route.write_transformer(folder / name)
    out = [(name, "sentence_transformers.models.Transformer")]
    if route.pooling not in ST_POOLING:
        raise ValueError(f"sentence-transformers has no {route.pooling!r} pooling (it pools by "
                         f"{', '.join(sorted(ST_POOLING))})")
    pooling = f"{prefix}1_Pooling"
    files.write_json(folder / pooling / "config.json", {
        "word_embedding_dimension": width,
        "pooling_mode_cls_token": route.pooling == "cls",
        "pooling_mode_mean_tokens": route.pooling == "mean",
        "pooling_mode_max_tokens": route.pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": route.pooling == "weighted_mean",
        "pooling_mode_lasttoken": route.pooling == "last_token",
        "include_prompt": route.include_prompt})
    out.append((pooling, "sentence_transformers.models.Pooling"))
    if route.projection is not None:
        from safetensors.numpy import save
        kernel, bias = route.projection
        dense = f"{prefix}{len(out)}_Dense"
        files.write_json(folder / dense / "config.json", {
            "in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]),
            "bias": True, "activation_function": "torch.nn.modules.linear.Identity"})
        files.write_bytes(folder / dense / "model.safetensors", save({
            "linear.weight": np.ascontiguousarray(kernel.T, np.float32),
            "linear.bias": np.ascontiguousarray(bias, np.float32)}, metadata={"format": "pt"}))
        out.append((dense, "sentence_transformers.models.Dense"))
    if normalize:
        norm = f"{prefix}{len(out)}_Normalize"
        (folder / norm).mkdir(parents=True, exist_ok=True)
        out.append((norm, "sentence_transformers.models.Normalize"))
    return out


def write_model(out: str | Path, routes: dict[str, Route], *, normalize: bool,
                prompts: dict[str, str] | None = None, card: str | None = None) -> Path:
    """A sentence-transformers folder: one route (``{"": route}``) as a plain module list, or
    ``query`` and ``document`` routes behind a Router."""
    out = Path(out)
    if list(routes) == [""]:
        mods = _modules(routes[""], out, "", normalize)
        files.write_json(out / "modules.json", [
            {"idx": i, "name": str(i), "path": name, "type": kind}
            for i, (name, kind) in enumerate(mods)])
    else:
        structure, types = {}, {}
        for route, spec in routes.items():
            mods = _modules(spec, out, f"{route}_", normalize)
            structure[route] = [name for name, _ in mods]
            types.update(dict(mods))
        files.write_json(out / "router_config.json", {
            "types": types, "structure": structure,
            "parameters": {"default_route": "document", "allow_empty_key": True,
                           "route_mappings": {}}})
        files.write_json(out / "modules.json", [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Router"}])
    files.write_json(out / "config_sentence_transformers.json", {
        "prompts": {k: v for k, v in (prompts or {}).items() if v},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine" if normalize else "dot"})
    if card is not None:
        files.write_text(out / "README.md", card)
    return out


# ----------------------------------------------------------------------------- Transformer folders
def llama_transformer(params: dict, header: Any, tokenizer: Any, max_seq_length: int):
    """A folder writer for a DecoderLM's weights (Hugging Face ``LlamaModel`` layout and config,
    the tokenizer's ``tokenizer.json``, right padding with EOS as the pad token)."""
    def write(folder: Path) -> int:
        from safetensors.numpy import save
        p = {k: v for k, v in params.items()}
        tensors = {"embed_tokens.weight": p["embed_tokens"]["embedding"],
                   "norm.weight": p["norm"]["scale"]}
        attn = ("q_proj", "k_proj", "v_proj", "o_proj")
        for i in range(header.depth):
            layer = p[f"layer_{i}"]
            pre = f"layers.{i}."
            tensors[pre + "input_layernorm.weight"] = layer["input_layernorm"]["scale"]
            tensors[pre + "post_attention_layernorm.weight"] = \
                layer["post_attention_layernorm"]["scale"]
            for name in attn + ("gate_proj", "up_proj", "down_proj"):
                where = "self_attn" if name in attn else "mlp"
                tensors[f"{pre}{where}.{name}.weight"] = np.asarray(layer[name]["kernel"]).T
                if "bias" in layer[name]:
                    tensors[f"{pre}{where}.{name}.bias"] = layer[name]["bias"]
        files.write_bytes(folder / "model.safetensors", save(
            {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()},
            metadata={"format": "pt"}))
        files.write_json(folder / "config.json", {
            "architectures": ["LlamaModel"], "model_type": "llama",
            "vocab_size": header.vocab_size, "hidden_size": header.width,
            "intermediate_size": header.mlp_dim, "num_hidden_layers": header.depth,
            "num_attention_heads": header.num_heads,
            "num_key_value_heads": header.num_kv_heads, "hidden_act": "silu",
            "max_position_embeddings": max(8192, max_seq_length), "rms_norm_eps": header.eps,
            "rope_theta": header.rope_base, "attention_bias": bool(header.qkv_bias),
            "tie_word_embeddings": True, "bos_token_id": header.bos_id,
            "eos_token_id": tokenizer.eos_id, "pad_token_id": tokenizer.eos_id,
            "torch_dtype": "float32"})
        files.write_text(folder / "tokenizer.json", tokenizer.backend.to_str())
        eos = tokenizer.vocab[tokenizer.eos_id] if tokenizer.eos_id is not None else None
        files.write_json(folder / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_seq_length,
            "padding_side": "right", "add_bos_token": False, "add_eos_token": False,
            **({"eos_token": eos, "pad_token": eos} if eos else {})})
        files.write_json(folder / "sentence_bert_config.json",
                         {"max_seq_length": max_seq_length, "do_lower_case": False})
        return header.width
    return write
