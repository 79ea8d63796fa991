"""SimCLR with a small 2-D CNN on scikit-learn's 8×8 digits (1,797 real images).

Claim: on digits even a randomly initialised CNN is a strong feature extractor, so this set shows
little separation between representations — use it to check that a pipeline works on real images,
and MNIST-1D (the default experiment) to compare representations.

Command:   repr-jax train --config simclr_digits
Hardware:  2 CPU cores.
Runtime:   32 s (1,500 steps and evaluation), measured 2026-12-04 on a 2-core Intel(R) Xeon(R)
           Processor (AVX-512) with no other work on the cores.
Expected (test split, 360 images; final train loss 1.7866):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.9333        0.9694
    random-init encoder                 0.9472        0.9222
    simclr encoder                      0.9694        0.9472
"""

from repr_jax.config import (Config, DataConfig, EncoderConfig, MethodConfig, OptimConfig,
                             TrainConfig, ViewsConfig)


def get_config(arg=None) -> Config:
    quick = arg == "quick"
    return Config(
        seed=0,
        # No flips: a mirrored digit is another digit (or none).
        data=DataConfig(name="digits", views=ViewsConfig(crop_pad=1, scale=0.2, noise=0.05)),
        encoder=EncoderConfig(name="cnn", widths=(32, 64), kernel_size=3, norm="batch"),
        method=MethodConfig(name="simclr", temperature=0.2, proj_hidden=128, proj_dim=64),
        optim=OptimConfig(lr=2e-3, weight_decay=1e-4, warmup_steps=50),
        train=TrainConfig(batch_size=128, steps=100 if quick else 1500, ckpt_every=500,
                          log_every=25),
    )
