"""Every ``repr-jax train`` command README.md shows resolves: a user copies them before reading
anything else, so one that stops resolving (a renamed key, a value a switched-to kind refuses)
fails here, not in their terminal. Each is resolved in-process with ``--print-config`` (no
training, no data read)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from repr_jax import cli, config

README = Path(__file__).resolve().parents[1] / "README.md"
_FENCE = re.compile(r"```(?:bash|sh)\n(.*?)```", re.S)
_INLINE = re.compile(r"`(repr-jax train[^`]*)`")


def train_commands(text: str) -> list[str]:
    """The ``repr-jax train`` commands of a markdown text: each line of a bash block (joined at
    its trailing backslashes, its ``#`` comment dropped) and each inline code span. O(len(text))."""
    found = []
    for block in _FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for i, word in enumerate(words):  # `pip install -e . && repr-jax train` too
                if word == "repr-jax" and words[i + 1:i + 2] == ["train"]:
                    end = next((j for j in range(i, len(words)) if words[j] in ("&&", ";", "|")),
                               len(words))
                    found.append(shlex.join(words[i:end]))
    return found + _INLINE.findall(text)


def resolve(command: str, saved_config: Path, capsys) -> tuple[int, str]:
    """``command`` with ``--print-config``, in this process: its exit code and its stderr. A
    placeholder ``--config DIR/config.json`` reads ``saved_config`` (a run's saved config)."""
    argv = shlex.split(command)[1:]
    argv = [str(saved_config) if a == "DIR/config.json" else a for a in argv]
    capsys.readouterr()
    rc = cli.main([*argv, "--print-config"])
    out, err = capsys.readouterr()
    if rc == 0:
        json.loads(out)  # the resolved config, whole
    return rc, err


@pytest.fixture
def saved_config(tmp_path):
    path = tmp_path / "config.json"
    config.save_json(config.load("simclr_mnist1d"), path)
    return path


def test_every_readme_train_command_resolves(saved_config, capsys):
    commands = train_commands(README.read_text())
    assert len(commands) >= 10, commands
    failed = {}
    for command in commands:
        rc, err = resolve(command, saved_config, capsys)
        if rc != 0:
            failed[command] = err.strip()
    assert not failed, "README commands that do not resolve:\n" + "\n".join(
        f"{c}\n  {e}" for c, e in failed.items())


def test_a_readme_command_broken_on_purpose_fails(saved_config, capsys):
    """The check above can fail: the README's reranker command with a misspelt method, and with a
    value its method refuses given explicitly (only a value kept from the old kind is reset)."""
    text = README.read_text()
    reranker = next(c for c in train_commands(text) if "method.name=cross_encoder" in c)
    for broken in (reranker.replace("method.name=cross_encoder", "method.name=cross_encodr"),
                   reranker + " --set method.objective=info_nce"):
        broken_text = text.replace(reranker, broken) if broken in text else text + f"\n`{broken}`\n"
        assert broken in train_commands(broken_text)
        rc, err = resolve(broken, saved_config, capsys)
        assert rc == 2 and err.startswith("repr-jax: error:"), (broken, err)


def test_commands_are_read_from_blocks_continuations_and_inline_spans():
    text = ("Run `repr-jax train --config a` or\n```bash\npython3 -m pip install -e . && repr-jax "
            "train  # the default\nrepr-jax train --set x=1 \\\n  --set \"y='a b'\"\n"
            "repr-jax eval --workdir w\n```\n")
    assert train_commands(text) == ["repr-jax train", "repr-jax train --set x=1 --set 'y='\"'\"'a b'"
                                    "\"'\"''", "repr-jax train --config a"]


def test_a_switched_kind_resets_a_shared_value_it_refuses_and_says_so():
    """finetune_minilm_wordnet's method.objective='info_nce' is not a cross-encoder objective:
    switching keeps the value only when the new kind takes it."""
    notes = []
    cfg = config.override(config.load("finetune_minilm_wordnet"),
                          ["method.name=cross_encoder"], notes=notes)
    assert cfg.method.objective == "listwise"
    assert len(notes) == 1 and "method.objective='info_nce'" in notes[0]
    assert "reset to its default 'listwise'" in notes[0]
    notes = []
    cfg = config.override(config.load("finetune_minilm_wordnet"),
                          ["method.objective=bce", "method.name=cross_encoder"], notes=notes)
    assert cfg.method.objective == "bce" and notes == []  # set explicitly: never reset
    kept = config.override(config.load("finetune_minilm_wordnet"), ["method.name=colbert"])
    assert kept.method.temperature == config.load("finetune_minilm_wordnet").method.temperature


def test_print_config_says_which_values_were_reset_and_which_warmup_wins(capsys):
    assert cli.main(["train", "--config", "finetune_minilm_wordnet", "--set",
                     "method.name=cross_encoder", "--print-config"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["method"]["objective"] == "listwise"
    assert "repr-jax: note: method.name='cross_encoder' does not take method.objective=" in err
    steps = config.load("finetune_minilm_wordnet").train.steps
    assert (f"warmup: {0.1 * steps:g} steps, from optim.warmup_fraction=0.1 of train.steps="
            f"{steps:,} (optim.warmup_steps is not used)") in err
    assert cli.main(["train", "--print-config"]) == 0
    assert "warmup: 100 steps, from optim.warmup_steps=100" in capsys.readouterr().err


def test_ci_installs_exactly_as_the_readme_says_and_runs_its_test_command():
    text = README.read_text()
    command = _FENCE.findall(text.split("Run the tests:", 1)[1])[0].strip()
    install, _, test = command.rpartition(" && ")
    assert test == "python3 -m pytest -q"
    ci = (README.parent / ".ci" / "run").read_text()
    assert install + " || exit 1" in ci and f"\n{test}\n" in ci
    assert "python3 -m venv .venv && . .venv/bin/activate" in install  # nothing outside .venv
