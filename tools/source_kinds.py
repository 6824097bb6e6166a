"""The kinds of source a number typed in the docs is pinned to (tools/typed_sources.py pins each one,
tools/typed_numbers.py holds it to its pin), how a typed number agrees with a value, and the
formulas some pins name.

    Field(path, key)          a JSON file's value at key ("runs/sum-pmlm/metrics/params_M"; a list's
                              element by index, by "field=value&other=value", or "field^=its start"),
                              or, in any other file, the numbers on the first line holding the marker
                              key ("marker#2": the second such line; in a .py file blanks do not
                              count, and code wrapped over lines is read as its statement joined onto
                              one, so that a pin holds however ruff format lays the code out)
    Field(path, key, div=60)  the value divided (seconds typed as minutes)
    Field(path, key, at=C)    the file as it was at commit C (CHANGELOG's "was N"; needs git history)
    Field(path, m, after=w)   the first number after the words w on the line holding the marker m
    Paper("UniLMv2 4.1")      a paper's setting or figure, by paper and place
    Word("at batch 1")        0 or 1 standing for a word: a first layer, a batch of one, a ratio's 1
    a function                a formula whose value the number is
"""

import functools
import io
import json
import lzma
import math
import os
import re
import subprocess
import tokenize
from typing import NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPERS = ("UniLMv2", "MLAE", "ELMER", "BERT", "RoBERTa", "T5", "Wu et al.", "CMLM", "FlashAttention", "XSum", "CALM")


class Paper(str):
    """A setting or figure a paper states, named by paper and place: Paper("UniLMv2 4.1")."""


class Word(str):
    """0 or 1 as a word, with the reason: Word("a batch of one")."""


class Field(NamedTuple):
    path: str
    key: str
    div: float = 1.0
    at: Optional[str] = None
    after: Optional[str] = None  # a text file's line: only the first number after these words


# -----------------------------------------------------------------------------
# agreement: a typed number against a value, as printed or as a rounding of it

UNIT = {"k": (1e3, 1024.0), "M": (1e6, 2.0**20), "G": (1e9, 2.0**30)}
VERSION = re.compile(r"^\d+\.\d+\.\d+$")
IN_TEXT = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)*(?:e[-+]?\d+)?")


def parse(number):
    """'1,600' / '15%' / '1.94x' / '−0.26' / '5.4M' / '1e-3' -> (value, unit or '', decimals as printed),
    or (the version string, 'version', 0)."""
    s = number.replace("−", "-").replace(",", "")
    if VERSION.match(s):
        return s, "version", 0
    unit = s[-1] if s[-1] in "%xkMG" else ""
    body = s[:-1] if unit else s
    decimals = len(body.split(".")[1]) if "." in body and "e" not in body else None if "e" in body else 0
    return float(body), unit, decimals


def agrees_with_value(number, value):
    """Whether `number` as typed is `value` (a number, or a string of numbers) as printed or rounded:
    a percentage is the value or a hundred times it, 5.4M a count in millions (or the value already
    in millions), 1e-3 the value itself, a version the same or a prefix of one."""
    if isinstance(value, str):
        return any(agrees(number, w) for w in _numbers_in(value))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    v, unit, decimals = parse(number)
    if unit == "version":
        return False
    cands = [value] + ([value * 100] if unit == "%" else []) + [value / s for s in UNIT.get(unit, ())]
    if decimals is None:  # an exponent: the value itself
        return any(math.isclose(abs(c), abs(v), rel_tol=1e-9) for c in cands)
    return any(round(abs(c), decimals) == abs(v) for c in cands)


def _numbers_in(text):
    """The numbers of a text (a log line, a JSON string) as floats, and each version as a string."""
    out = []
    for tok in IN_TEXT.findall(text):
        tok = tok.replace(",", "")
        if tok.count(".") > 1:
            out.append(tok)
        else:
            try:
                out.append(float(tok))
            except ValueError:
                pass
    return out


def agrees(number, value):
    """agrees_with_value, where a version in the value ("3.11.7") is also matched as printed or by
    its first parts ("3.11")."""
    if not isinstance(value, str):
        return agrees_with_value(number, value)
    typed = number.replace(",", "")
    return any(
        t == typed or t.startswith(typed + ".") if isinstance(t, str) else agrees_with_value(number, t)
        for t in _numbers_in(value)
    )


# -----------------------------------------------------------------------------
# reading a field


@functools.lru_cache(maxsize=None)
def _text(path, at):
    if at is None:
        with open(os.path.join(ROOT, path), errors="replace") as f:
            return f.read()
    r = subprocess.run(["git", "show", f"{at}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise OSError(
            f"git show {at}:{path} failed ({r.stderr.strip()[:80]}): the check needs the repository's history"
        )
    return r.stdout


def _walk(data, key):
    for part in key.split("/"):
        if isinstance(data, list):
            if "=" in part:  # the first element whose fields are so: "batch=64&what=...", "what^=its start"
                want = [c.partition("=")[::2] for c in part.split("&")]
                data = next(
                    x
                    for x in data
                    if all(
                        str(x.get(k.rstrip("^"))).startswith(v) if k.endswith("^") else str(x.get(k)) == v
                        for k, v in want
                    )
                )
            else:
                data = data[int(part)]
        else:
            data = data[part]
    return data


def _statements(text):
    """A Python file's lines, each statement joined onto one (a call or a def's header however the
    formatter wraps it), comments and blank lines between statements as they are."""
    rows = text.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return rows
    out, row, start = [], 1, None
    for tok in tokens:
        if start is None and tok.type not in (
            tokenize.NL,
            tokenize.COMMENT,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            start = tok.start[0]
        if tok.type == tokenize.NEWLINE:
            out += rows[row - 1 : start - 1] + [" ".join(r.strip() for r in rows[start - 1 : tok.end[0]])]
            row, start = tok.end[0] + 1, None
    return out + rows[row - 1 :]


def _span(words, line, spaced):
    """(start, end) of the first `words` in `line`, or None; `spaced`: blanks do not count (in a Python
    file, `2 ** 30` and `2**30` are one text, as a call and the same call wrapped and joined are)."""
    if not spaced:
        i = line.find(words)
        return None if i < 0 else (i, i + len(words))
    m = re.search(r"\s*".join(map(re.escape, "".join(words.split()))), line)
    return m and m.span()


def field_values(source):
    """([values the field holds], '') or ([], why not)."""
    try:
        text = _text(source.path, source.at)
    except OSError as e:
        return [], f"its source {source.path} cannot be read ({e})"
    if source.path.endswith((".json", ".jsonl")):
        try:
            data = (
                json.loads(text)
                if source.path.endswith(".json")
                else [json.loads(line) for line in text.splitlines() if line.strip()]
            )
            value = _walk(data, source.key)
        except (ValueError, KeyError, IndexError, StopIteration, TypeError, AttributeError):
            return [], f"{source.path} has no field {source.key!r}"
        values = value if isinstance(value, list) else [value]
    else:
        marker, nth = source.key, 1
        if re.search(r"#\d+$", marker):
            marker, nth = marker.rsplit("#", 1)
            nth = int(nth)
        spaced = source.path.endswith(".py")
        lines = [(line, 0) for line in text.splitlines() if _span(marker, line, spaced)]
        if spaced and len(lines) < nth:  # code the formatter wrapped: its statement, from the marker on
            lines = [(line, span[0]) for line in _statements(text) if (span := _span(marker, line, True))]
        if len(lines) < nth:
            return [], f"{source.path} has no line holding {marker!r}" + (f" (#{nth})" if nth > 1 else "")
        line, start = lines[nth - 1]
        if source.after is not None:
            if not (span := _span(source.after, line[start:], spaced)):
                return [], f"{source.path}: its line holding {marker!r} has no {source.after!r}"
            values = _numbers_in(line[start + span[1] :])[:1]
        else:
            values = _numbers_in(line)
    return [v / source.div if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in values], ""


# -----------------------------------------------------------------------------
# formulas behind typed numbers


def entropy_floor(eps, V):
    """The lowest entropy label smoothing eps over V classes leaves an off-ramp (docs/elmer.md)."""
    top, rest = 1 - eps + eps / V, eps / V
    return -top * math.log(top) - (V - 1) * rest * math.log(rest)


def entropy_exit_cost(layers, T=32, S=128):
    """Multiply-adds of an ELMER decoder projecting every token at every layer, over one projecting
    once at the top (core/exit_decode.decoder_macs; `small`, V 8000)."""
    from core.config import PRESETS, ModelConfig
    from core.elmer.exit_decode import decoder_macs

    cfg = ModelConfig(**PRESETS["small"], vocab_size=8000)
    every = dict(queries=[T] * layers, ramp=[T] * layers, measure=[0] * layers)
    top = dict(queries=[T] * layers, ramp=[0] * (layers - 1) + [T], measure=[0] * layers)
    return decoder_macs(cfg, T, S, every) / decoder_macs(cfg, T, S, top)


@functools.lru_cache(maxsize=None)
def corpus():
    """The embedded corpus' records (data/debian.jsonl.xz)."""
    with lzma.open(os.path.join(ROOT, "data", "debian.jsonl.xz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def corpus_size():
    """Packages in the embedded corpus."""
    return len(corpus())


@functools.lru_cache(maxsize=None)
def mean_words(field):
    """Mean words of one field of the corpus' records."""
    return sum(len(r[field].split()) for r in corpus()) / corpus_size()


def summary_words():
    """Mean words of the corpus' summaries (data/prepare.py prints it)."""
    return mean_words("summary")


def value(field):
    """The one value of a field, for a formula over fields."""
    values, why = field_values(field)
    if why or len(values) != 1:
        raise ValueError(why or f"{field} holds {len(values)} values")
    return values[0]


def lplm_steps():
    """ELMER's LPLM pretraining steps at the cpu budget (reproduce/plan.py)."""
    from reproduce.plan import BUDGETS, BY_NAME, steps_of

    return steps_of(BY_NAME["pre-elmer"], BUDGETS["cpu"])


def offramp_chunk(V):
    """The off-ramp loss's token rows per chunk at vocabulary V (kernels/offramp_loss.py)."""
    from kernels.offramp_loss import default_chunk

    return default_chunk(V)


def split(name):
    """The records of one split of the embedded corpus (its `split` field, data/prepare.py)."""
    return [r for r in corpus() if r["split"] == name]


def _compile_record():
    return [value(Field("README.md", "12 steps of the", at="fa80356", after=w)) for w in ("CPU.**", "took", "and")]


def compiled_more():
    """The seconds torch.compile added to 12 steps of the `small` PMLM on the CPU, as the README of
    fa80356 recorded them (eager and compiled)."""
    _, eager, compiled = _compile_record()
    return compiled - eager


def eager_step():
    """The seconds of one eager step in that record."""
    steps, eager, _ = _compile_record()
    return eager / steps
