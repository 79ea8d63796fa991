"""SimCLR with its published augmentation recipe on generated shapes (32×32 RGB, 8 classes), and
the ablation of the SimCLR paper's central finding: crop + colour distortion is what matters.

Claim (Chen et al. 2020, fig. 5): dropping either random resized crop or colour distortion from the
recipe costs most of the linear-probe accuracy.

Command:   repr-jax train --config simclr_shapes[:no_color|:no_crop] (add ,quick for a smoke test)
Hardware:  2 CPU cores.
Runtime:   MEASURED
Expected (test split, 2,000 images):
    MEASURED
"""

from repr_jax.config import (Config, DataConfig, EncoderConfig, MethodConfig, OptimConfig,
                             TrainConfig, ViewsConfig)

PRESETS = {"": "simclr", "no_color": "simclr_no_color", "no_crop": "simclr_no_crop"}


def get_config(arg=None) -> Config:
    parts = (arg or "").split(",")
    quick = "quick" in parts
    variant = next((p for p in parts if p and p != "quick"), "")
    if variant not in PRESETS:
        raise ValueError(f"simclr_shapes takes one of {sorted(PRESETS)} (and/or quick), not "
                         f"{variant!r}")
    return Config(
        seed=0,
        data=DataConfig(name="shapes", views=ViewsConfig(preset=PRESETS[variant])),
        encoder=EncoderConfig(name="cnn", widths=(32, 64, 128), kernel_size=3, norm="batch"),
        method=MethodConfig(name="simclr", temperature=0.2, proj_hidden=256, proj_dim=64),
        optim=OptimConfig(lr=2e-3, weight_decay=1e-4, warmup_steps=100),
        train=TrainConfig(batch_size=128, steps=50 if quick else 2000, ckpt_every=500,
                          log_every=25),
    )
