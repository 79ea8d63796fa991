"""Writes ``gemma3_tokens_reference.json``: transformers' token ids of Gemma 3's tokenizer (read
from the Gemma 3 270M GGUF) for ``TEXTS``, the reference of ``test_gemma3_tokenizer.py``. Needs
transformers (5.x) and gguf (not torch; CI installs neither); run it in that environment::

    python tests/data/make_gemma3_tokens_reference.py --gguf /tmp/gemma/gemma-3-270m-q4_k_m.gguf

Each entry is ``{"text", "ids": tok(text)["input_ids"], "ids_plain": tok(text,
add_special_tokens=False)["input_ids"]}`` with ``tok = AutoTokenizer.from_pretrained(folder,
gguf_file=name)`` (a ``GemmaTokenizer``: BPE whose merges transformers rebuilds from the
vocabulary's order, byte fallback, spaces normalised to ``▁``; ``ids`` start with BOS, 2).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEXTS = [
    "The capital of France is Paris, and it is known for the Eiffel Tower.",
    "Le chat dort sur le canapé pendant que la pluie tombe doucement. Ça va, déjà vu ?",
    "北京是中华人民共和国的首都，也是政治和文化中心。",
    "القاهرة هي عاصمة جمهورية مصر العربية وأكبر مدنها.",
    "Москва — столица России, город на реке Москве.",
    "Die Straße führt über die Brücke zum Größenwahn.",
    "I love pizza 🍕 and sunshine ☀️ — ça va? 😀👍",
    "Family: 👨‍👩‍👧‍👦, flags: 🇫🇷🇯🇵🏳️‍🌈, skin tone: 👋🏽",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after a literal bos<eos><pad><unk><mask>",
    "tab\tseparated\tvalues\tand  two   three    four spaces",
    "line one\nline two\n\n\nline five\r\nwindows",
    "  leading and trailing spaces  ",
    " one leading space",
    "Numbers: 1234567.89, 3.14159, 1,000,000 and 2024-01-15.",
    "def f(x):\n    return x ** 2  # square\n\tif x: pass",
    "See https://example.org/path?q=1&lang=en#top or mail someone@example.com.",
    "",
    "     ",
    "\n",
    "a",
    "UPPER lower MiXeD camelCaseWord snake_case_word",
    "Mixed: English, français, 中文, العربية, русский 🙂.",
    "Rare characters: \u0e01\u0e02 \u10d0 \u16a0 \U0001d11e \u2603\ufe0f \u00ad\u200b",
    "[multimodal] <unused0> <start_of_image> <think>",
]


def main() -> None:
    from transformers import AutoTokenizer
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", default="/tmp/gemma/gemma-3-270m-q4_k_m.gguf")
    parser.add_argument("--out", default=str(HERE / "gemma3_tokens_reference.json"))
    args = parser.parse_args()
    gguf = Path(args.gguf)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out = [{"text": t, "ids": tok(t)["input_ids"],
            "ids_plain": tok(t, add_special_tokens=False)["input_ids"]} for t in TEXTS]
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n",
                              encoding="utf-8")
    print(f"wrote {len(out)} texts to {args.out}")


if __name__ == "__main__":
    main()
