"""Points every notebook here at your copy of repr_jax: sets ``REPO = "URL"`` in each install cell
and, for a GitHub URL, the "Open in Colab" badge to open that notebook from the same repository.

    python colab/set_repo.py https://github.com/<you>/repr_jax [--branch main]

Commit the notebooks afterwards: Colab opens them from GitHub as they are committed. A URL that is
not on GitHub (GitLab, a file:// clone) sets REPO only; Colab's badge opens GitHub repositories
alone. Standard library only, so it runs before repr_jax is installed; notebooks are rewritten
atomically (a temporary file renamed over the old one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

REPO_LINE = re.compile(r'^REPO = "[^"\n]*"', re.M)
BADGE_LINK = re.compile(r"\(https://colab\.research\.google\.com/github/[^)\s]+"
                        r"/colab/([\w.-]+\.ipynb)\)")
GITHUB = re.compile(r"^(?:https://github\.com/|git@github\.com:)([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")


def badge_base(url: str, branch: str) -> str | None:
    """``https://colab.research.google.com/github/OWNER/NAME/blob/BRANCH`` for a GitHub URL."""
    m = GITHUB.match(url)
    return (f"https://colab.research.google.com/github/{m[1]}/{m[2]}/blob/{branch}"
            if m else None)


def set_repo(notebook: Path, url: str, branch: str = "main") -> bool:
    """Rewrites ``notebook``'s install cell (and badge, for GitHub) to ``url``; True when the badge
    was set. Raises ValueError when the notebook has no ``REPO = "..."`` line to set."""
    if '"' in url or "\n" in url:
        raise ValueError(f"not a git URL: {url!r}")
    nb = json.loads(notebook.read_text())
    base, found, badged = badge_base(url, branch), False, False
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and REPO_LINE.search(src):
            src, found = REPO_LINE.sub(f'REPO = "{url}"', src, count=1), True
        elif cell["cell_type"] == "markdown" and base and BADGE_LINK.search(src):
            src, badged = BADGE_LINK.sub(lambda m: f"({base}/colab/{m[1]})", src), True
        cell["source"] = src.splitlines(keepends=True)
    if not found:
        raise ValueError(f'{notebook} has no install cell with a `REPO = "..."` line')
    fd, tmp = tempfile.mkstemp(dir=notebook.parent, prefix=f".{notebook.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, notebook)
    return badged


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", help="the git URL of your copy of repr_jax")
    p.add_argument("--branch", default="main", help="the branch the badges open (default main)")
    p.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent,
                   help="the folder of notebooks (default: this one)")
    args = p.parse_args(argv)
    notebooks = sorted(args.dir.glob("*.ipynb"))
    if not notebooks:
        p.error(f"no notebooks in {args.dir}")
    for nb in notebooks:
        badged = set_repo(nb, args.url, args.branch)
        print(f"{nb.name}: REPO = {args.url}" + ("; badge set" if badged else ""))
    if badge_base(args.url, args.branch) is None:
        print("not a GitHub URL: the Open-in-Colab badges are left as they were (Colab opens "
              "notebooks from GitHub only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
