"""Scaling study (draft header; measured below once run)."""

from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                             OptimConfig, TrainConfig, ViewsConfig)
from repr_jax.scaling import Sweep

# Model size: CNN channels with the projection head's hidden width scaled alongside (a fixed
# 256-wide head would be most of the smallest models' parameters).
SIZES = [((4, 8, 16), 32), ((8, 16, 32), 64), ((16, 32, 64), 128), ((32, 64, 128), 256),
         ((64, 128, 256), 512)]
TRAIN_EXAMPLES = [500, 1000, 2000, 4000, 8000, 16000]


def get_config(arg=None) -> Config:
    return Config(
        seed=0,
        data=DataConfig(name="mnist1d", num_examples=25_000, train_examples=16000,
                        views=ViewsConfig(shift=6, scale=0.3, noise=0.1, mask=0.2)),
        encoder=EncoderConfig(name="cnn", widths=(32, 64, 128), kernel_size=5, norm="batch"),
        method=MethodConfig(name="simclr", temperature=0.2, proj_hidden=256, proj_dim=64),
        optim=OptimConfig(lr=2e-3, weight_decay=1e-4, warmup_steps=100),
        train=TrainConfig(batch_size=256, steps=2500, eval_every=500, ckpt_every=500,
                          log_every=50, num_devices=1),
        eval=EvalConfig(evaluators=("linear_probe", "knn"), bootstrap=200, reference_rows=False,
                        max_examples=2000),
    )


def get_sweep(arg=None) -> Sweep:
    return Sweep(base=get_config(arg), grid={("encoder.widths", "method.proj_hidden"): SIZES,
                                             "data.train_examples": TRAIN_EXAMPLES})
