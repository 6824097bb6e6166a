"""Every number typed by hand in the prose of the README, docs/, bench/RESULTS.md, releases/README.md
and CHANGELOG.md, held to the one place it comes from.

    python -m tools.typed_numbers      # each typed number and its source; exit 1 on one without

A typed number is any numeral outside render blocks, code (a fenced block with a language, or a
span), links and comments, so in a plain fenced block's diagram or file tree too: an integer
(62,588), a decimal, a percentage, a ratio (1.94x), a scaled count (5.4M, 64k), an exponent (1e-3),
a version (2.13.0). Names and pointers are not numbers: section, table, figure, algorithm, equation
and call numbers ("Table 10", "call 2"), dates, a list's "1.", commit hashes, and digits inside a
word (bf16, H200, 6L-6L, sm_90a).

Each one is pinned in tools/typed_sources.py under its document, by the number as typed (with a few
words of its line where one document types it with two meanings): a named field of a named file
(Field: a key path in a JSON file, or the line of a text file that holds a marker, or either at an
earlier commit), a paper's place (Paper), a formula, or, for 0 and 1 only, a word (Word: "at batch
1"). A number that no pin backs fails, and so does a pin no longer typed: editing a number means
editing its pin. Numbers inside render blocks are drawn from their files by tools/render_docs.py.
docs/LOG.md is the dated record: its numbers stand as they were recorded and are not checked here.
"""

import glob
import os
import re
import sys

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m tools.typed_numbers")

from tools.source_kinds import PAPERS, Field, Paper, Word, agrees, agrees_with_value, field_values  # noqa: E402
from tools.typed_sources import SOURCES  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"<!-- render: (\S+) (\S+) -->\n.*?<!-- /render -->", re.S)
# a numeral not inside a word: a version, or digits with thousands commas, a decimal part, an
# exponent, and a unit of its own (%, x, k, M, G); the second of a range ("3.5-3.8") too
NUMBER = re.compile(
    r"(?:(?<![\w.\-/#=])|(?<=\d-))[-−]?(?:\d+\.\d+\.\d+|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
    r"(?:e-?\d+)?)(?:%|x(?![\w])|[kMG](?![\w]))?(?![\w]|\.\d)"
)
POINTERS = re.compile(
    r"\b(?:[Ss]ections?|Tables?|Figures?|Fig\.|Algorithms?|Equations?|Eq\.|[Aa]ppendix|[Cc]alls?|§)"
    r"\s+\d+(?:\.\d+)*(?:(?:,\s*|\s+and\s+|-)\d+(?:\.\d+)*)*"
)
DATE = re.compile(r"\b\d{4}-\d\d-\d\d(?:\s+(?:to|and)\s+\d\d?\b)?")
HIDDEN = (
    re.compile(r"```[^`\n]+\n.*?```", re.S),
    re.compile(r"`[^`\n]+(?:\n[^`\n]+)?`"),
    re.compile(r"\]\([^)]*\)"),
    re.compile(r"<!--(?! render| /render).*?-->", re.S),
    BLOCK,
    POINTERS,
    DATE,
    re.compile(r"^\s*\d+\.\s", re.M),
)  # a numbered list's item


def files():
    """The documents checked, relative to the repository root."""
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    paths = [
        os.path.join(ROOT, "README.md"),
        os.path.join(ROOT, "CHANGELOG.md"),
        os.path.join(ROOT, "bench", "RESULTS.md"),
        os.path.join(ROOT, "releases", "README.md"),
    ] + [p for p in docs if not p.endswith("LOG.md")]
    return [os.path.relpath(p, ROOT) for p in paths]


def _blank(m):
    return re.sub(r"[^\n]", " ", m.group(0))


def typed(text):
    """[(line number, number as typed, (its line as checked, start, end))] of a document's prose."""
    for pattern in HIDDEN:
        text = pattern.sub(_blank, text)
    return [
        (i, m.group(0), (line, m.start(), m.end()))
        for i, line in enumerate(text.split("\n"), 1)
        for m in NUMBER.finditer(line)
    ]


def pin_of(number, where, pins):
    """The pin of one typed number: the first "NUMBER @ words" whose words, which hold the number,
    are on its line around it; else the plain "NUMBER". (key, source) or (None, None)."""
    line, start, end = where
    for key, source in pins.items():
        n, _, words = key.partition(" @ ")
        if n != number or not words:
            continue
        at = words.find(number)
        if at < 0:
            raise SystemExit(f"error: tools/typed_sources.py: the words of {key!r} do not hold its number")
        if line[start - at : start - at + len(words)] == words:
            return key, source
    return (number, pins[number]) if number in pins else (None, None)


def check_source(number, source):
    """'' when the source backs the number, else why not."""
    if isinstance(source, tuple) and not isinstance(source, Field):  # any of them
        whys = [check_source(number, s) for s in source]
        return "" if "" in whys else "; ".join(whys)
    if isinstance(source, Paper):
        if not source.startswith(PAPERS):
            return f"Paper({source!r}) names no paper of {PAPERS}"
        return "" if re.search(r"\d|appendix", source) else f"Paper({source!r}) names no place in it"
    if isinstance(source, Word):
        return "" if number in ("0", "1") else f"Word({source!r}) stands for 0 or 1 only, not {number}"
    if callable(source):
        try:
            value = source()
        except (OSError, ValueError, KeyError, IndexError, StopIteration) as e:
            return f"its formula cannot be computed ({type(e).__name__}: {e})"
        return "" if agrees_with_value(number, value) else f"its formula gives {value:.6g}"
    values, why = field_values(source)
    if why:
        return why
    return (
        ""
        if any(agrees(number, v) for v in values)
        else f"it is not {source.path} {source.key!r}"
        + (f" at {source.at}" if source.at else "")
        + f" ({', '.join(str(v) for v in values[:6])})"
    )


def problems(texts=None):
    """[(file, line, number, why)] of every typed number no pin backs, and of every pin no longer
    typed. `texts` maps a document to a text to check in place of the file's."""
    bad = []
    for doc in files():
        if texts and doc in texts:
            text = texts[doc]
        else:
            with open(os.path.join(ROOT, doc)) as f:
                text = f.read()
        pins, used = SOURCES.get(doc, {}), set()
        for line, number, where in typed(text):
            key, source = pin_of(number, where, pins)
            if key is None:
                bad.append((doc, line, number, "no source is named for it in tools/typed_sources.py"))
                continue
            used.add(key)
            why = check_source(number, source)
            if why:
                bad.append((doc, line, number, why))
        bad += [
            (doc, 0, key, "pinned in tools/typed_sources.py but no longer typed there")
            for key in pins
            if key not in used
        ]
    return bad


def main():
    bad = problems()
    for doc, line, number, why in bad:
        print(f"{doc}:{line}: {number}: {why}")
    print(
        f"{len(bad)} typed number(s) without a source"
        if bad
        else f"every typed number in {len(files())} documents agrees with its source"
    )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
