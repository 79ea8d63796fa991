"""Shared base of the dual-encoder experiments: MLP towers on latent_modalities (6,000 synthetic
instances of 10 latent classes seen through two modalities). Not an experiment of its own: the
*_latent_modalities files override its method."""

from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                             OptimConfig, TrainConfig, ViewsConfig)


def get_config(arg=None) -> Config:
    quick = arg == "quick"
    return Config(
        seed=0,
        data=DataConfig(name="latent_modalities", num_examples=6000,
                        views=ViewsConfig(noise=0.05)),
        encoder=EncoderConfig(name="mlp", widths=(128, 128), norm="layer"),
        method=MethodConfig(name="clip", proj_dim=64),  # CLIP learns its temperature
        optim=OptimConfig(lr=1e-3, weight_decay=1e-4, warmup_steps=100),
        train=TrainConfig(batch_size=256, steps=100 if quick else 1500, ckpt_every=500,
                          log_every=25),
        # x -> x_pos retrieval over the 1,200 test pairs is what these methods learn.
        eval=EvalConfig(evaluators=("linear_probe", "knn", "retrieval", "quantization",
                                    "geometry")),
    )
