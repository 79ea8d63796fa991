"""Where a run's numbers go: ``metrics.jsonl`` always, TensorBoard and Weights & Biases on request.

Each writer has clu's ``MetricWriter`` shape (``write_scalars(step, scalars)``,
``write_hparams(hparams, metrics)``, ``write_images(step, images)``, ``flush()``, ``close()``), so
a user's own writer drops in. :class:`RunLog` is what the loop holds for one run directory: the
JSONL file plus the writers ``cfg.log`` asks for, on process 0 only. Tags::

    train/<key>                               every metrics.jsonl column (loss, lr, grad_norm, ...)
    eval/<evaluator>/<metric>[/ci_low|ci_high] the trained encoder's evaluation rows
    reference/<representation>/<evaluator>/<metric>   raw inputs, random init (step 0)
    plots/<name>                              plots/*.png at the end of the run

A resumed run drops what the killed one logged past the restored step: metrics.jsonl is cut
(:class:`JsonlWriter`), TensorBoard purges (``purge_step``), and W&B continues the run id kept in
``wandb.json``.
"""

from __future__ import annotations

import io
import os
import json
import math
import secrets
import sys
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from repr_jax import files


class JsonlWriter:
    """Appends one JSON object per line to ``metrics.jsonl`` (each line fsynced); a resumed run
    first drops the rows past the restored step — and a torn last line, with a warning — so the
    file never holds steps the resumed run will log again. Only scalars are written."""

    def __init__(self, path: str | Path, *, resume_step: int = 0):
        self.path = Path(path)
        if self.path.exists():
            kept = [row for row in files.read_jsonl(self.path, drop_torn_tail=True)
                    if row.get("step", 0) <= resume_step]
            files.write_text(self.path, "".join(json.dumps(row) + "\n" for row in kept))

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        files.append_line(self.path, json.dumps(dict(step=step, **scalars)))

    def write_hparams(self, hparams: Mapping[str, Any],
                      metrics: Mapping[str, float] | None = None) -> None:
        del hparams, metrics  # config.json holds them

    def write_images(self, step: int, images: Mapping[str, np.ndarray]) -> None:
        del step, images  # plots/ holds them

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardWriter:
    """TensorBoard event files in ``logdir`` through tensorboardX (no TensorFlow). ``purge_step``:
    a resumed run's first step; TensorBoard hides what an earlier process logged from there on."""

    def __init__(self, logdir: str | Path, *, purge_step: int | None = None):
        SummaryWriter = _summary_writer_class()  # noqa: N806
        # The pid keeps a resumed run in the same second from overwriting the killed one's file.
        self._writer = SummaryWriter(str(logdir), purge_step=purge_step, flush_secs=30,
                                     filename_suffix=f".{os.getpid()}")

    def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, step)

    def write_hparams(self, hparams: Mapping[str, Any],
                      metrics: Mapping[str, float] | None = None) -> None:
        """The HParams dashboard's record of this run: its hyperparameters and the tags of the
        metrics to compare it by (their values are the scalars logged under those tags)."""
        from tensorboardX.summary import hparams as hparams_summaries
        for summary in hparams_summaries(_hparam_values(hparams), dict(metrics or {})):
            self._writer._get_file_writer().add_summary(summary)

    def write_images(self, step: int, images: Mapping[str, np.ndarray]) -> None:
        for tag, image in images.items():
            self._writer.add_image(tag, image, step, dataformats="HWC")

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _summary_writer_class():
    """tensorboardX's ``SummaryWriter``, imported without torch: tensorboardX imports torch when
    it is installed, only for its PyTorch helpers, which costs a process ~1 s and ~180 MB."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter
        return SummaryWriter
    sys.modules["torch"] = None  # its `import torch` raises ImportError, which it handles
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]
    return SummaryWriter


class WandbWriter:
    """A Weights & Biases run (``mode="offline"``: written under ``workdir/wandb/`` for
    ``wandb sync``). Its id is kept in ``workdir/wandb.json``, so a resumed run continues it."""

    def __init__(self, workdir: str | Path, project: str, *, mode: str = "offline",
                 config: Mapping[str, Any] | None = None):
        import wandb
        workdir = Path(workdir)
        record = workdir / "wandb.json"
        try:
            run_id = files.read_json(record)["id"]
        except FileNotFoundError:
            run_id = secrets.token_hex(4)
            files.write_json(record, dict(id=run_id, project=project))
        self._run = wandb.init(project=project, id=run_id, resume="allow", dir=str(workdir),
                               mode=mode, name=workdir.name, config=dict(config or {}),
                               settings=wandb.Settings(silent=True, console="off"))
        self.id, self._step = run_id, -1

    def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        if step < self._step:  # W&B steps only increase: earlier ones (references) go to summary
            self._run.summary.update(dict(scalars))
            return
        self._step = step
        self._run.log(dict(scalars), step=step)

    def write_hparams(self, hparams: Mapping[str, Any],
                      metrics: Mapping[str, float] | None = None) -> None:
        self._run.config.update(_hparam_values(hparams), allow_val_change=True)
        self._run.summary.update(dict(metrics or {}))

    def write_images(self, step: int, images: Mapping[str, np.ndarray]) -> None:
        import wandb
        self._run.log({tag: wandb.Image(image) for tag, image in images.items()}, step=step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._run.finish()


def _hparam_values(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Values TensorBoard and W&B show as hyperparameters: numbers, strings and booleans; tuples
    and anything else as their text."""
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v)
            for k, v in hparams.items() if v is not None}


def png_images(paths: Sequence[Path]) -> dict[str, np.ndarray]:
    """``{"plots/<stem>": RGB uint8 array}`` of the PNG files that exist among ``paths``."""
    from PIL import Image
    out = {}
    for path in paths:
        try:
            with Image.open(io.BytesIO(Path(path).read_bytes())) as image:
                out[f"plots/{Path(path).stem}"] = np.asarray(image.convert("RGB"))
        except (OSError, ValueError) as e:
            warnings.warn(f"{path}: not a readable PNG ({e}); not sent to the writers",
                          stacklevel=2)
    return out


class RunLog:
    """One run directory's writers: ``metrics.jsonl`` always, and on process 0 (``lead``) the
    TensorBoard and W&B writers ``log_cfg`` asks for. ``hparams``: the values the run is compared
    by (a sweep point's grid values; a single run's flattened config); ``trained``: the name of
    the trained representation in evaluation rows (the rest are reference rows);
    ``resume_step``: the step training starts from (logs past it are dropped), or None to only
    add evaluation rows."""

    def __init__(self, workdir: str | Path, log_cfg, *, resume_step: int | None, lead: bool,
                 hparams: Mapping[str, Any], trained: str):
        self.workdir, self.trained, self.hparams = Path(workdir), trained, dict(hparams)
        # resume_step None: only add evaluation rows (repr-jax eval), touching no earlier log.
        self.jsonl = (JsonlWriter(self.workdir / "metrics.jsonl", resume_step=resume_step)
                      if resume_step is not None else None)
        self.writers: list[Any] = []
        if not lead:
            return
        if log_cfg.tensorboard:
            self.writers.append(TensorBoardWriter(self.workdir, purge_step=resume_step + 1
                                                  if resume_step else None))
        if log_cfg.wandb:
            self.writers.append(WandbWriter(self.workdir, log_cfg.wandb, mode=log_cfg.wandb_mode,
                                            config=self.hparams))

    def train(self, step: int, row: Mapping[str, Any]) -> None:
        """One metrics.jsonl row; the writers get its numbers as ``train/<key>``."""
        self.jsonl.write_scalars(step, row)
        scalars = {f"train/{k}": float(v) for k, v in row.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for w in self.writers:
            w.write_scalars(step, scalars)

    def evaluation(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """Evaluation rows as scalars at their own steps (intervals as ``.../ci_low``,
        ``.../ci_high``); returns the trained representation's ``{tag: value}``."""
        by_step: dict[int, dict[str, float]] = {}
        for r in rows:
            value = r.get("value")
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            tag = (f"eval/{r['evaluator']}/{r['metric']}" if r["representation"] == self.trained
                   else f"reference/{r['representation'].replace(' ', '_')}/{r['evaluator']}/"
                        f"{r['metric']}")
            scalars = by_step.setdefault(int(r["step"]), {})
            scalars[tag] = float(value)
            for bound in ("ci_low", "ci_high"):
                if bound in r:
                    scalars[f"{tag}/{bound}"] = float(r[bound])
        for step, scalars in sorted(by_step.items()):
            for w in self.writers:
                w.write_scalars(step, scalars)
        return {k: v for s in by_step.values() for k, v in s.items()
                if k.startswith("eval/") and not k.endswith(("/ci_low", "/ci_high"))}

    def finish(self, step: int, final_rows: Sequence[Mapping[str, Any]]) -> None:
        """The end of a run: its final evaluation, its hyperparameters beside the metrics to
        compare runs by, and its plots."""
        metrics = self.evaluation(final_rows)
        if not self.writers:
            return
        images = png_images(sorted((self.workdir / "plots").glob("*.png")))
        for w in self.writers:
            w.write_hparams(self.hparams, metrics)
            if images:
                w.write_images(step, images)

    def close(self) -> None:
        for w in self.writers:
            try:
                w.flush()
                w.close()
            except Exception as e:  # noqa: BLE001 - a writer's failure must not lose the run
                warnings.warn(f"{type(w).__name__} of {self.workdir} did not close: {e}",
                              stacklevel=2)
        self.writers = []
