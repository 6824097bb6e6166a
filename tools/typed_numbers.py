"""Every number typed by hand in the prose of the README, docs/, bench/RESULTS.md and CHANGELOG.md,
checked against where it comes from.

    python -m tools.typed_numbers      # list each typed number and its source; exit 1 on one without

A typed number is a decimal, a percentage or a ratio ("0.22", "15%", "1.94x") outside render blocks,
code, links and comments; section and table numbers ("section 4.1") are not. It is accepted when
it agrees, as printed or as a rounding of a value, with a file its section cites (the result file of
a render block under the same heading, or any file beside it), or when SOURCES names its source: a
file it must agree with, a paper's setting (Paper), a formula (a function returning the value), or a
tuple of those, any of which backs it.
docs/LOG.md is the dated record: its numbers stand as they were recorded and are not checked here.
"""
import glob
import lzma
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"<!-- render: (\S+) (\S+) -->\n.*?<!-- /render -->", re.S)
NUMBER = re.compile(r"(?<![\w.\-/#])[-+−]?\d[\d,]*\.\d+(?:e-?\d+)?(?:%|x\b)?"
                    r"|(?<![\w.\-/#])\d+(?:\.\d+)?x\b|(?<![\w.\-/#])\d[\d,]*%")
SECTION_REF = re.compile(r"\b(?:[Ss]ections?|Tables?|Figures?|§)\s+\d+(?:\.\d+)*"
                         r"(?:(?:,\s*|\s+and\s+|-)\d+(?:\.\d+)*)*")
HIDDEN = ((re.compile(r"```.*?```", re.S)), re.compile(r"`[^`\n]*`"), re.compile(r"\]\([^)]*\)"),
          re.compile(r"<!--(?! render| /render).*?-->", re.S), SECTION_REF, BLOCK)
IN_FILE = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
PAPERS = ("UniLMv2", "MLAE", "ELMER", "BERT", "RoBERTa", "T5", "Wu et al.", "CMLM", "FlashAttention")


class Paper(str):
    """A setting a paper states, named by paper and place: Paper("UniLMv2 4.1")."""


def files():
    """The documents checked, relative to the repository root."""
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md"),
             os.path.join(ROOT, "bench", "RESULTS.md")] + [p for p in docs if not p.endswith("LOG.md")]
    return [os.path.relpath(p, ROOT) for p in paths]


def _blank(m):
    return re.sub(r"[^\n]", " ", m.group(0))


def typed(text):
    """[(line number, number as typed)] of a document's prose."""
    for pattern in HIDDEN:
        text = pattern.sub(_blank, text)
    return [(i, m.group(0)) for i, line in enumerate(text.split("\n"), 1) for m in NUMBER.finditer(line)]


def cited(text):
    """[(first line, last line, files)] per heading: the result files its render blocks name and
    every file beside them."""
    lines = text.split("\n")
    heads = [1] + [i for i, line in enumerate(lines, 1) if line.startswith("#")] + [len(lines) + 1]
    out = []
    for a, b in zip(heads, heads[1:]):
        paths = {m.group(2).split("::")[0] for m in BLOCK.finditer("\n".join(lines[a - 1:b - 1]))}
        near = {os.path.relpath(f, ROOT) for p in paths
                for f in glob.glob(os.path.join(ROOT, os.path.dirname(p), "**", "*"), recursive=True)
                if os.path.isfile(f)}
        out.append((a, b - 1, sorted(paths | near)))
    return out


def parse(number):
    """'1,600' / '15%' / '1.94x' / '−0.26' -> (value, is a percentage, decimals as printed)."""
    s = number.replace("−", "-").replace(",", "")
    pct = s.endswith("%")
    body = s.rstrip("%x")
    decimals = len(body.split(".")[1]) if "." in body and "e" not in body else 0
    return float(body), pct, decimals


def agrees_with_value(number, value):
    v, pct, decimals = parse(number)
    return any(round(abs(c), decimals) == abs(v) for c in ((value, value * 100) if pct else (value,)))


_numbers_of = {}


def agrees_with_file(number, path):
    """Whether `number` is printed in the file (in a folder: in one of its files' names), or is a
    rounding of a number in it."""
    full = os.path.join(ROOT, path)
    if os.path.isdir(full):
        return any(number in name for name in os.listdir(full))
    if path not in _numbers_of:
        with open(os.path.join(ROOT, path), errors="replace") as f:
            text = f.read()
        _numbers_of[path] = (text, [float(x) for x in IN_FILE.findall(text) if len(x) < 30])
    text, values = _numbers_of[path]
    if number.replace("−", "-") in text:
        return True
    return "e" not in number and any(agrees_with_value(number, w) for w in values)


# formulas behind typed numbers


def entropy_floor(eps, V):
    """The lowest entropy label smoothing eps over V classes leaves an off-ramp (docs/elmer.md)."""
    top, rest = 1 - eps + eps / V, eps / V
    return -top * math.log(top) - (V - 1) * rest * math.log(rest)


def entropy_exit_cost(layers, T=32, S=128):
    """Multiply-adds of an ELMER decoder projecting every token at every layer, over one projecting
    once at the top (core/exit_decode.decoder_macs; `small`, V 8000)."""
    from core.config import PRESETS, ModelConfig
    from core.exit_decode import decoder_macs
    cfg = ModelConfig(**PRESETS["small"], vocab_size=8000)
    every = dict(queries=[T] * layers, ramp=[T] * layers, measure=[0] * layers)
    top = dict(queries=[T] * layers, ramp=[0] * (layers - 1) + [T], measure=[0] * layers)
    return decoder_macs(cfg, T, S, every) / decoder_macs(cfg, T, S, top)


def summary_words():
    """Mean words of the corpus' summaries (data/prepare.py prints it)."""
    with lzma.open(os.path.join(ROOT, "data", "debian.jsonl.xz"), "rt", encoding="utf-8") as f:
        n = [len(json.loads(line)["summary"].split()) for line in f]
    return sum(n) / len(n)


LOG = "docs/LOG.md"
LR_GRID = "results/cpu-finetune-lr/RUN.md"
COMPILE_TEST = "tests/test_compile.py"
def warmup_share():
    """--warmup-frac's default before --warmup-epochs: the same warmup, as a share of the default epochs."""
    with open(os.path.join(ROOT, "results", "defaults.json")) as f:
        d = json.load(f)["defaults"]
    return d["finetune.py --warmup-epochs"] / d["finetune.py --epochs"]


SOURCES = {
    "README.md": {},
    "CHANGELOG.md": {
        "1.5e-4": LR_GRID, "0.05": warmup_share, "0.1": "results/defaults.json", "0.5": "finetune.py",
        "3%": LOG, "3.6": "results/h200-2026-11-26/RUN.md", "80%": Paper("UniLMv2 4.1"),
        "10%": Paper("UniLMv2 4.1"), "4.1": Paper("UniLMv2 4.1"), "90%": "train.py",
        "2.03x": "results/studies/dtype.json",
    },
    "bench/RESULTS.md": {"2.02x": "results/h200-2026-11-27/RUN.md", "2.37x": "results/h200-2026-11-27/RUN.md"},
    "docs/design.md": {
        "80%": Paper("UniLMv2 4.1"), "10%": Paper("UniLMv2 4.1"), "4.6": Paper("UniLMv2 4.6"), "90%": "train.py",
        "0.1": ("core/pmlm.py", Paper("UniLMv2 Table 10: dropout")), "1.5e-4": LR_GRID,
        "0.6": Paper("Wu et al. 2016, UniLMv2 Table 10"),
        "6.6": summary_words, "0.02": Paper("BERT's initializer"), "0.8": lambda: 331 / 400,
        "13%": lambda: (331 / 400) / (75 / 12), "1%": LOG,
    },
    "docs/elmer.md": {
        "1.22": lambda: entropy_floor(0.1, 8000), "0.77": lambda: entropy_floor(0.1, 97), "0.1": "finetune.py",
        "0.5": Paper("ELMER Figure 2: delta 0.5"), "1.94x": lambda: entropy_exit_cost(6),
        "1.77x": lambda: entropy_exit_cost(4),
    },
    "docs/kernels.md": {
        "1.15x": COMPILE_TEST, "1.35x": COMPILE_TEST, "1.4x": COMPILE_TEST, "2.0x": COMPILE_TEST, "2.2x": COMPILE_TEST,
        "3.9": "results/aot", "3.6": "results/h200-2026-11-27/RUN.md",
    },
    "docs/mlae.md": {
        "15%": Paper("MLAE 3.1"),
    },
    "docs/reproducing.md": {
        "0.9": "reproduce/plan.py", "0.5": "reproduce/report.py", "95%": "reproduce/significance.py",
        "80%": "reproduce/significance.py", "0.1": "reproduce/plan.py", "1.96": "reproduce/significance.py",
        "2.8": "reproduce/significance.py",
    },
    "docs/unilmv2.md": {
        "15%": Paper("UniLMv2 Algorithm 1"), "0.4": Paper("UniLMv2 Algorithm 1"), "80%": Paper("UniLMv2 4.1"),
        "10%": Paper("UniLMv2 4.1"), "0.1": Paper("UniLMv2 Table 10"), "0.6": Paper("UniLMv2 Table 10"),
        "16x": "core/model.py",
    },
}


def check_source(number, source):
    """'' when the source backs the number, else why not."""
    if isinstance(source, tuple):  # any of them
        whys = [check_source(number, s) for s in source]
        return "" if "" in whys else "; ".join(whys)
    if isinstance(source, Paper):
        return "" if source.startswith(PAPERS) else f"Paper({source!r}) names no paper of {PAPERS}"
    if callable(source):
        value = source()
        return "" if agrees_with_value(number, value) else f"its formula gives {value:.6g}"
    if not os.path.exists(os.path.join(ROOT, source)):
        return f"its source {source} does not exist"
    return "" if agrees_with_file(number, source) else f"it is not in its source {source}"


def problems():
    """[(file, line, number, why)] of every typed number its source does not back, and of every
    SOURCES entry no longer typed in its file."""
    bad = []
    for doc in files():
        with open(os.path.join(ROOT, doc)) as f:
            text = f.read()
        sections, named, seen = cited(text), SOURCES.get(doc, {}), set()
        for line, number in typed(text):
            seen.add(number)
            if number in named:
                why = check_source(number, named[number])
            else:
                near = next(paths for a, b, paths in sections if a <= line <= b)
                why = "" if any(agrees_with_file(number, p) for p in near) else \
                    "no result file its section cites holds it, and SOURCES names no source"
            if why:
                bad.append((doc, line, number, why))
        bad += [(doc, 0, n, "listed in SOURCES but no longer typed there") for n in named if n not in seen]
    return bad


def main():
    bad = problems()
    for doc, line, number, why in bad:
        print(f"{doc}:{line}: {number}: {why}")
    print(f"{len(bad)} typed number(s) without a source" if bad else f"every typed number in {len(files())} "
          "documents agrees with its source")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
