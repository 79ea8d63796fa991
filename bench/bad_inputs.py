"""The bad-input battery of issue 34 through the CLI: each case's exit code, its one line, and
whether it left a run folder behind.

    python bench/bad_inputs.py              # ~2 min; prints a markdown table
    python bench/bad_inputs.py --case 11    # one case

Every case should exit 2 with one ``repr-jax: error:`` line (or argparse's ``error:`` line) and
write nothing. Not part of pytest (the tests cover each class: ``tests/test_cli.py``,
``tests/test_config.py``, ``tests/data/test_image_folder.py``, ...); this re-runs the battery whole.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

QUICK = ["--config", "simclr_mnist1d:quick"]


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(what, argv after ``repr-jax``); folders they need are made under ``tmp``."""
    w = ["--workdir", str(tmp / "w")]
    sweep = ["sweep", *QUICK, "--grid", "seed=[0,1]", *w]
    return [
        ("view probability 2.0", ["train", *QUICK, *w, "--set", "data.views.flip_p=2.0"]),
        ("view probability -0.5", ["train", *QUICK, *w, "--set", "data.views.grayscale_p=-0.5"]),
        ("crop range high-to-low", ["train", *QUICK, *w, "--set",
                                    "data.views.crop_scale=(0.9,0.1)"]),
        ("negative local crops", ["train", *QUICK, *w, "--set", "data.views.local_crops=-5"]),
        ("few-shot shots -1", ["train", *QUICK, *w, "--set", "eval.fewshot.shots=(-1,)"]),
        ("few-shot shots 0", ["train", *QUICK, *w, "--set", "eval.fewshot.shots=(0,)"]),
        ("sweep --jobs 0", [*sweep, "--jobs", "0"]),
        ("sweep --jobs -1", [*sweep, "--jobs", "-1"]),
        ("knn.k above the train split", ["train", *QUICK, *w, "--set", "eval.knn.k=100000"]),
        ("tokenizer for data without text", ["train", *QUICK, *w, "--set",
                                             "data.tokenizer=minilm"]),
        ("--config NAME:bogus", ["train", "--config", "simclr_mnist1d:bogus", *w]),
        ("--config NAME:quick:extra", ["train", "--config", "simclr_mnist1d:quick:extra", *w]),
        ("export --out a non-empty folder", ["export", "--workdir", str(tmp / "run"), "--format",
                                             "safetensors", "--out", str(tmp / "full")]),
        ("imagefolder: with no path", ["train", "--config", "simclr_shapes:quick", *w, "--set",
                                       "data.name=imagefolder:", "--set", "data.num_examples=0"]),
        ("image folder with one class", _folder(tmp, "one", w)),
        ("a class with no readable image", _folder(tmp, "half", w)),
        ("train.steps=1e20", ["train", *QUICK, *w, "--set", "train.steps=99999999999999999999"]),
        ("image folder without images", _folder(tmp, "junk", w)),
        ("config file with a syntax error", ["train", "--config", str(tmp / "syntax.py"), *w]),
        ("config file whose get_config raises", ["train", "--config", str(tmp / "raises.py"),
                                                 *w]),
        ("--workdir an existing file", ["train", *QUICK, "--workdir", str(tmp / "afile")]),
        ("--workdir a dangling symlink", ["train", *QUICK, "--workdir", str(tmp / "dangling")]),
        ("export --out an existing file", ["export", "--workdir", str(tmp / "run"), "--format",
                                           "safetensors", "--out", str(tmp / "afile")]),
        ("--print-config | head -1", ["train", "--print-config"]),
        ("ray cluster unreachable", [*sweep, "--executor", "ray", "--ray-address",
                                     "127.0.0.1:1"]),
        ("optim.lr=1e300", ["train", *QUICK, *w, "--set", "optim.lr=1e300"]),
        ("method.temperature=1e-300", ["train", *QUICK, *w, "--set",
                                       "method.temperature=1e-300"]),
        ("data.num_examples=5", ["train", *QUICK, *w, "--set", "data.num_examples=5"]),
        ("--executor slurm without SLURM", [*sweep, "--executor", "slurm"]),
        ("--slurm-time -5", [*sweep, "--executor", "slurm", "--slurm-time", "-5"]),
    ]


def _folder(tmp: Path, name: str, w: list[str]) -> list[str]:
    return ["train", "--config", "simclr_shapes:quick", *w, "--set",
            f"data.name=imagefolder:{tmp / name}", "--set", "data.num_examples=0", "--set",
            "train.batch_size=4"]


def _prepare(tmp: Path) -> None:
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for name, classes, readable in (("one", ("a",), True), ("half", ("a", "b"), False),
                                    ("junk", ("a", "b"), None)):
        for c in classes:
            (tmp / name / c).mkdir(parents=True)
            for i in range(12):
                path = tmp / name / c / f"{i}.png"
                good = readable or (readable is False and c == "a")
                if good:
                    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(path)
                else:
                    path.write_bytes(b"not an image")
    (tmp / "syntax.py").write_text("def get_config(arg=None):\n    x = 1 +\n")
    (tmp / "raises.py").write_text("def get_config(arg=None):\n    return {}['k']\n")
    (tmp / "afile").write_text("x")
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    (tmp / "full").mkdir()
    (tmp / "full" / "old.txt").write_text("x")
    subprocess.run([sys.executable, "-m", "repr_jax.cli", "train", *QUICK, "--workdir",
                    str(tmp / "run"), "--no-progress", "--set", "train.steps=2", "--set",
                    "eval.evaluators=('knn',)", "--set", "eval.reference_rows=False"],
                   check=True, capture_output=True)


def run(what: str, argv: list[str], tmp: Path) -> dict:
    shutil.rmtree(tmp / "w", ignore_errors=True)
    cmd = [sys.executable, "-m", "repr_jax.cli", *argv]
    if what.startswith("--print-config"):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.close()  # the reader leaves before the output comes
        err, rc = proc.stderr.read(), proc.wait()
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "TQDM_DISABLE": "1"})
        err, rc = proc.stderr, proc.returncode
    lines = [line for line in err.splitlines() if line.strip()]
    said = [line for line in lines if "error:" in line] or lines[-1:] or ["(nothing)"]
    return {"case": what, "exit": rc, "line": said[-1][:160], "lines": len(lines),
            "traceback": "Traceback" in err, "left": (tmp / "w").exists()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", type=int, default=0, help="run case N only (1-based)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="repr_jax_bad_") as t:
        tmp = Path(t)
        _prepare(tmp)
        rows = []
        for i, (what, a) in enumerate(cases(tmp), 1):
            if args.case and i != args.case:
                continue
            rows.append(run(what, a, tmp))
            r = rows[-1]
            print(f"{i:2d} {what}: exit {r['exit']}, {r['line']}", file=sys.stderr, flush=True)
    print("| # | case | exit | traceback | run folder left | what it says |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, r in enumerate(rows, 1):
        text = r["line"].replace("|", "\\|")
        yes = {True: "yes", False: "no"}
        print(f"| {args.case or i} | {r['case']} | {r['exit']} | {yes[r['traceback']]} | "
              f"{yes[r['left']]} | {text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
