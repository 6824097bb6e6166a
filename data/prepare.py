"""Build the embedded corpus, data/debian.jsonl.xz, from apt's Debian bookworm lists.

    apt-get -o Acquire::Languages=en update      # fetches ..._i18n_Translation-en.lz4 as well
    python data/prepare.py                       # reads /var/lib/apt/lists, writes data/debian.jsonl.xz

Every Debian package has a one-line synopsis written by a person (the `summary`) and a long
description of about 55 words (the `document`): an extreme-summarization data set in the manner
of XSum. Its Section (libs, python, games, ...) makes a classification task. The Packages list
gives package -> (source, section, Description-md5); the Translation-en list gives
Description-md5 -> (synopsis, long description); they are joined on Description-md5.

The split is by a hash of the *source* package, so that sibling binaries (libfoo1, libfoo-dev,
libfoo-doc), whose descriptions are near copies, never straddle train and test. A document that
occurs in an earlier split (train < valid < test) is dropped from the later one.
Records: package, source, section, summary, document, split; sorted by package name.
"""

import argparse
import glob
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys

LISTS = "/var/lib/apt/lists"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "debian.jsonl.xz")
SPLIT_PERCENT = (("train", 90), ("valid", 95), ("test", 100))  # cumulative shares of sources


def read_list(path):
    """The text of an apt list file, plain or lz4-compressed (through the lz4 command)."""
    if path.endswith(".lz4"):
        try:
            return subprocess.run(["lz4", "-dc", path], check=True, capture_output=True).stdout.decode("utf-8")
        except FileNotFoundError:
            sys.exit("error: the lz4 command is needed to read .lz4 lists (apt-get install lz4)")
    with open(path, encoding="utf-8") as f:
        return f.read()


def stanzas(text):
    """Yield the paragraphs of a Debian control file as {field: value}; continuation lines
    (starting with a space) are kept with their leading space, one per line."""
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        if fields:
            yield fields


def long_description(lines):
    """Debian's description format -> plain text: ' .' is a paragraph break, the rest is joined."""
    words = []
    for line in lines:
        line = line.strip()
        if line == ".":
            continue
        words.append(line)
    return re.sub(r"\s+", " ", " ".join(words)).strip()


def split_of(source):
    h = int(hashlib.sha1(source.encode()).hexdigest(), 16) % 100
    return next(name for name, upto in SPLIT_PERCENT if h < upto)


def find(lists, pattern):
    paths = sorted(glob.glob(os.path.join(lists, pattern)))
    if not paths:
        sys.exit(f"error: no {pattern} in {lists}; run: apt-get -o Acquire::Languages=en update")
    return paths[0]


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lists", default=LISTS, help="apt's lists folder")
    p.add_argument("--out", default=OUT)
    p.add_argument("--min-words", type=int, default=8, help="drop documents shorter than this")
    args = p.parse_args()

    packages = find(args.lists, "*_dists_bookworm_main_binary-*_Packages*")
    translations = find(args.lists, "*_dists_bookworm_main_i18n_Translation-en*")
    print(f"reading {packages}\n        {translations}")
    text_of = {}
    for st in stanzas(read_list(translations)):
        if "Description-md5" in st and "Description-en" in st:
            first, *rest = st["Description-en"].split("\n")
            text_of[st["Description-md5"]] = (first.strip(), long_description(rest))

    records, seen = [], set()
    for st in stanzas(read_list(packages)):
        name, md5 = st.get("Package"), st.get("Description-md5")
        if not name or md5 not in text_of or name in seen:
            continue
        seen.add(name)
        summary, document = text_of[md5]
        if len(document.split()) < args.min_words or not summary:
            continue
        source = st.get("Source", name).split()[0]
        section = st.get("Section", "unknown").split("/")[-1]
        records.append(
            dict(
                package=name, source=source, section=section, summary=summary, document=document, split=split_of(source)
            )
        )

    # a document seen in an earlier split is dropped from the later ones
    kept, earlier = [], set()
    for split, _ in SPLIT_PERCENT:
        docs = [r for r in records if r["split"] == split]
        kept += [r for r in docs if r["document"] not in earlier]
        earlier |= {r["document"] for r in docs}
    kept.sort(key=lambda r: r["package"])

    tmp = args.out + ".tmp"
    with lzma.open(tmp, "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as f:
        for r in kept:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, args.out)
    counts = {s: sum(r["split"] == s for r in kept) for s, _ in SPLIT_PERCENT}
    words = sum(len(r["summary"].split()) for r in kept) / len(kept)
    print(
        f"wrote {args.out}: {len(kept)} records {counts}, {len(records) - len(kept)} cross-split duplicates "
        f"dropped, {len({r['section'] for r in kept})} sections, summary {words:.1f} words on average, "
        f"{os.path.getsize(args.out) / 1e6:.1f} MB"
    )
