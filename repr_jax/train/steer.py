"""``repr-jax steer``: add ``alpha`` times a direction to a decoder LLM's residual stream after
block ``--layer`` (at every position: activation addition, Turner et al. 2023) and measure what it
does to the next token — the log-probability of a concept's words against random directions of
the same norm — and to greedy continuations.

The direction (``--direction``): a ``.npy`` vector ``[D]`` (a concept direction, a probe's
weights), or ``latent:SAE_RUN:J``, latent ``J``'s decoder row of a sparse autoencoder trained on
this model's layer (its store's model and layer must be these). It is used at unit norm, so
``alpha`` is in the residual stream's own units: the command prints the layer's median token norm
over the prompts to scale it by (SmolLM2-135M's layer 15: ~184).

What is measured, for each ``alpha``: over the prompts (one text a line of ``--prompts``, UTF-8),
the change in next-token log-probability at each prompt's last token, averaged over the concept's
words (``--words``: each word's first token as a continuation, `` word``), steered minus clean:
``concept``; the same for ``--random`` directions drawn uniformly on the sphere (seed
``--seed``), averaged over them: ``random``; and ``concept - random`` paired by prompt. Each is a
mean over prompts with the project's percentile bootstrap interval. Then ``--show`` prompts'
greedy continuations of ``--new-tokens`` tokens, clean and at each ``alpha``.

Cost: ``(1 + R) x A`` forward passes over P prompts of T tokens (R random directions, A values of
alpha), each ``O(P T model)``, plus ``(1 + A) x new_tokens`` passes over the shown prompts
(no cache: each recomputes ``T + new_tokens`` positions). Memory ``O(P T D + P V)``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import files
from repr_jax.encoders.decoder_lm import last_valid, next_token_logits, split_ids
from repr_jax.encoders.intervene import adding, replacing_block
from repr_jax.eval.stats import with_ci

LATENT = "latent:"


# --------------------------------------------------------------------------------------------------
# Inputs, each checked in one line before the model runs
# --------------------------------------------------------------------------------------------------

def read_prompts(path: str | Path) -> list[str]:
    """The non-empty lines of a UTF-8 file; anything else is one line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--prompts {path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"--prompts {path}: not UTF-8 text (byte {e.start}: "
                         f"{raw[e.start:e.start + 1]!r}); save it as UTF-8") from None
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"--prompts {path}: no prompt (one text a line)")
    return prompts


def check_alphas(alphas: Sequence[float]) -> list[float]:
    bad = [a for a in alphas if not math.isfinite(a)]
    if bad or not alphas:
        raise ValueError(f"--alpha {bad[0] if bad else ''}: give finite numbers, e.g. "
                         f"--alpha 4,8,16")
    return [float(a) for a in alphas]


def read_direction(spec: str, width: int, *, layer: int, model_name: str) -> np.ndarray:
    """The unit direction ``[D]`` of ``--direction`` (module docstring); a vector of another
    width, not finite or zero, or an SAE of another model or layer, is one line."""
    if spec.startswith(LATENT):
        vec = _latent_direction(spec, layer=layer, model_name=model_name)
    else:
        path = Path(spec)
        if not path.is_file():
            raise ValueError(f"--direction {spec}: no such file (a .npy vector, or "
                             f"{LATENT}SAE_RUN:LATENT)")
        try:
            vec = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise ValueError(f"--direction {spec}: not a .npy array ({e})") from None
        vec = np.asarray(vec, np.float64)
        if vec.ndim == 2 and 1 in vec.shape:
            vec = vec.reshape(-1)
        if vec.ndim != 1:
            raise ValueError(f"--direction {spec}: shape {list(vec.shape)}; give one vector [D]")
    if vec.shape[0] != width:
        raise ValueError(f"--direction {spec}: width {vec.shape[0]}, but layer {layer} of "
                         f"{model_name} has width {width}")
    norm = float(np.linalg.norm(vec))
    if not np.isfinite(vec).all() or norm == 0:
        raise ValueError(f"--direction {spec}: not a finite, non-zero vector")
    return (vec / norm).astype(np.float32)


def _latent_direction(spec: str, *, layer: int, model_name: str) -> np.ndarray:
    """Latent ``J``'s decoder row of an SAE run on this model's ``layer`` (in the store's units:
    the SAE scales its inputs, not the direction)."""
    from repr_jax.data.activations import PREFIX, folder_of, read_meta
    from repr_jax.train.run import load_trained
    run, _, latent = spec[len(LATENT):].rpartition(":")
    if not run or not latent.isdigit():
        raise ValueError(f"--direction {spec}: give {LATENT}SAE_RUN:LATENT (a number)")
    cfg, _, _, state = load_trained(run)
    if cfg.method.name != "sae" or not cfg.data.name.startswith(PREFIX):
        raise ValueError(f"--direction {spec}: {run} is not a sparse autoencoder run")
    meta = read_meta(folder_of(cfg.data.name))
    if meta["layer"] != layer or meta["model"] != model_name:
        raise ValueError(f"--direction {spec}: the SAE read layer {meta['layer']} of "
                         f"{meta['model']}; this is layer {layer} of {model_name}")
    w_dec = np.asarray(jax.device_get(state.variables["params"]["sae"]["W_dec"]))
    j = int(latent)
    if j >= len(w_dec):
        raise ValueError(f"--direction {spec}: the SAE has {len(w_dec)} latents (0 to "
                         f"{len(w_dec) - 1})")
    return w_dec[j].astype(np.float64)


def word_ids(tokenizer, words: Sequence[str]) -> list[int]:
    """Each word's first token as a continuation (`` word``); a word with none is one line."""
    out = []
    for w in words:
        ids = tokenizer.tokenize(" " + w.strip())
        if not w.strip() or not ids:
            raise ValueError(f"--words: {w!r} has no token")
        out.append(ids[0])
    return out


# --------------------------------------------------------------------------------------------------
# The steered model
# --------------------------------------------------------------------------------------------------

def steered_logprobs(model, head_VxD=None):
    """``f(variables, ids [B, T], direction [D], alpha) -> [B, V]``: next-token log-probabilities
    at each row's last token with ``alpha * direction`` added after block ``layer`` (jitted, a
    function of ``layer`` by closure). Time ``O(B T model + B D V)``."""
    module = model.module

    def f(variables, ids, direction_D, alpha, layer: int):
        with replacing_block(model.family, layer, adding(direction_D, alpha)):
            tokens = module.apply(variables, ids)[1]["tokens"]
        last = last_valid(split_ids(ids)[1])
        at = jnp.take_along_axis(tokens, last[:, None, None], axis=1)  # [B, 1, D]
        return jax.nn.log_softmax(next_token_logits(variables["params"], at, head_VxD)[:, 0])
    return jax.jit(f, static_argnames="layer")


def greedy(model, variables, rows: Sequence[Sequence[int]], *, layer: int, direction_D, alpha,
           new_tokens: int, head_VxD=None) -> list[list[int]]:
    """Each row's ``new_tokens`` greedy continuation with ``alpha * direction`` added (no cache:
    a fixed ``[B, T + new_tokens]`` buffer, one compilation). Time ``O(new_tokens B T model)``."""
    width = max(map(len, rows)) + new_tokens
    ids = np.full((len(rows), width), -1, np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    lengths = np.asarray([len(r) for r in rows])
    module = model.module

    @jax.jit
    def next_ids(variables, ids, at, alpha):
        with replacing_block(model.family, layer, adding(direction_D, alpha)):
            tokens = module.apply(variables, ids)[1]["tokens"]
        h = jnp.take_along_axis(tokens, at[:, None, None], axis=1)
        return jnp.argmax(next_token_logits(variables["params"], h, head_VxD)[:, 0], axis=-1)

    for step in range(new_tokens):
        at = lengths + step - 1
        ids[np.arange(len(rows)), at + 1] = np.asarray(next_ids(variables, ids, at, alpha))
    return [ids[i, lengths[i]:lengths[i] + new_tokens].tolist() for i in range(len(rows))]


def random_directions(n: int, width: int, seed: int) -> np.ndarray:
    """``[n, D]`` uniform on the unit sphere."""
    v = np.random.default_rng(seed).standard_normal((n, width))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def shifts(fn, variables, ids, layer: int, direction_D, random_RxD, alpha: float,
           word_W: Sequence[int], clean_BxV, bar=None) -> tuple[np.ndarray, np.ndarray]:
    """``(concept [B], random [B, R])``: the words' mean log-probability change per prompt."""
    words = np.asarray(word_W)

    def delta(direction):
        steered = np.asarray(fn(variables, ids, jnp.asarray(direction), alpha, layer=layer))
        if bar is not None:
            bar.update(1)
        return (steered[:, words] - clean_BxV[:, words]).mean(axis=1)
    return delta(direction_D), np.stack([delta(r) for r in random_RxD], axis=1)


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------

def steer(*, layer: int, direction: str, alphas: Sequence[float], prompts: str,
          words: Sequence[str], workdir: str | None = None, init_from: str | None = None,
          random: int = 16, new_tokens: int = 20, show: int = 3, bootstrap: int = 1000,
          seed: int = 0, out: str | None = None, max_len: int = 128,
          progress: bool = False) -> dict[str, Any]:
    """Runs the measurement (module docstring), prints it, writes ``out`` (JSON) when given and
    returns it. Every input is checked before the model runs."""
    from repr_jax.train.activations import check_layer, load_model, parse_layer
    if bool(workdir) == bool(init_from):
        raise ValueError("give one of --workdir RUN or --init-from MODEL")
    if random < 1:
        raise ValueError(f"--random must be at least 1, got {random}")
    alphas = check_alphas(alphas)
    texts = read_prompts(prompts)
    if not words:
        raise ValueError("--words: give the concept's words, e.g. --words cat,dog,horse")
    layer = parse_layer(layer)
    if layer == "embedding":
        raise ValueError("--layer embedding: steering adds to a block's output; give a block")
    if out is not None:
        out = files.check_output(out, flag="--out", inputs=[Path(prompts)] + (
            [Path(direction)] if not direction.startswith(LATENT) else []))
    model, cfg = load_model(workdir=workdir, init_from=init_from, max_len=max_len, text=True,
                            skip_first=0)
    if model.family != "decoder_lm":
        raise ValueError(f"steer measures next-token log-probabilities: it takes a decoder_lm "
                         f"(a run or an LLM's weights), not a {model.family}")
    check_layer(layer, model.depth, model.family)
    variables = model.variables
    ids = model.sides.encode(model.tokenizer, texts, "doc")
    layer_BxTxD = np.asarray(jax.jit(lambda v, x: model.layers(v, x)[layer])(variables, ids))
    width = layer_BxTxD.shape[-1]
    name = model.describe["model"]
    direction_D = read_direction(direction, width, layer=layer, model_name=name)
    word_W = word_ids(model.tokenizer, words)
    head = _output_head(name, cfg)
    median_norm = float(np.median(np.linalg.norm(layer_BxTxD[np.asarray(model.valid(ids))],
                                                 axis=-1)))
    fn = steered_logprobs(model, head)
    clean = np.asarray(fn(variables, ids, jnp.asarray(direction_D), 0.0, layer=layer))
    random_RxD = random_directions(random, width, seed)
    rows, bar = [], None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(alphas) * (1 + random), desc="steer", unit="pass", leave=False,
                   dynamic_ncols=True)
    for alpha in alphas:
        concept, rand_BxR = shifts(fn, variables, ids, layer, direction_D, random_RxD, alpha,
                                   word_W, clean, bar)
        rand = rand_BxR.mean(axis=1)
        rows.append(dict(alpha=alpha, concept=with_ci(concept, bootstrap=bootstrap),
                         random=with_ci(rand, bootstrap=bootstrap),
                         difference=with_ci(concept - rand, bootstrap=bootstrap),
                         beats_random=float((concept[:, None] > rand_BxR).mean())))
    if bar is not None:
        bar.close()
    shown = model.tokenizer.rows(texts[:show], max_len=max_len) if new_tokens else []
    continuations = {}
    for key, alpha in [("clean", 0.0)] + [(f"{a:g}", a) for a in alphas] if shown else []:
        continuations[key] = [model.tokenizer.decode(c) for c in greedy(
            model, variables, shown, layer=layer, direction_D=direction_D, alpha=alpha,
            new_tokens=new_tokens, head_VxD=head)]
    result = dict(model=name, layer=layer, direction=direction, words=list(words),
                  prompts=len(texts), random=random, seed=seed, median_token_norm=median_norm,
                  rows=[{k: _plain(v) for k, v in r.items()} for r in rows],
                  continuations={k: dict(zip(texts[:show], v)) for k, v in continuations.items()})
    _print(result, rows, texts[:show], continuations)
    if out is not None:
        files.write_json(out, result)
    return result


def _output_head(name: str, cfg):
    from repr_jax.encoders.decoder_lm_weights import output_head
    spec = name if cfg is None else getattr(cfg.encoder, "init_from", "")
    return output_head(spec) if spec else None


def _plain(v):
    """A float, or ``{value, low, high}`` for a value with an interval."""
    if hasattr(v, "low"):
        return dict(value=float(v), low=float(v.low), high=float(v.high))
    return v


def _fmt(v) -> str:
    return f"{float(v):+.3f}" + (f" [{v.low:+.3f}, {v.high:+.3f}]" if hasattr(v, "low") else "")


def _print(result, rows, shown, continuations) -> None:
    print(f"steer: layer {result['layer']} of {result['model']}, direction "
          f"{result['direction']} (unit); median token norm at this layer over the "
          f"{result['prompts']} prompts: {result['median_token_norm']:.1f}")
    print(f"words: {', '.join(result['words'])}; {result['random']} random directions\n")
    print("| alpha | concept Δ log p | random Δ log p | concept − random | beats random |")
    print("| ---: | --- | --- | --- | ---: |")
    for r in rows:
        print(f"| {r['alpha']:g} | {_fmt(r['concept'])} | {_fmt(r['random'])} | "
              f"{_fmt(r['difference'])} | {r['beats_random']:.2f} |")
    for i, prompt in enumerate(shown):
        print(f"\n{prompt!r}")
        for key, texts in continuations.items():
            print(f"  {key:>6}: {texts[i]!r}")
    sys.stdout.flush()
