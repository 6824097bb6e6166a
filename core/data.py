"""Reading text and pairs from the embedded corpus or the user's files; the pretraining stream.

The embedded corpus (data/debian.jsonl.xz, see data/README.md) holds Debian package descriptions:
fields package, source, section, summary, document, split. User data:
  * pretraining: .txt (one document per line, or blank-line separated paragraphs when the file
    has blank lines) or .jsonl with a text field;
  * seq2seq: .jsonl with source/target fields; classification: .jsonl with text/label fields.
.xz and .gz files are read transparently.
"""

import gzip
import hashlib
import json
import lzma
import os

import numpy as np

from .errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBEDDED = os.path.join(ROOT, "data", "debian.jsonl.xz")
SPLITS = ("train", "valid", "test")


# -----------------------------------------------------------------------------
# files


def _open_text(path):
    if not os.path.exists(path):
        raise UserError(f"data file not found: {path}")
    if os.path.isdir(path):
        raise UserError(f"data path is a directory, not a file: {path}")
    opener = lzma.open if path.endswith(".xz") else gzip.open if path.endswith(".gz") else open
    return opener(path, "rt", encoding="utf-8")


def _is_jsonl(path):
    name = path[:-3] if path.endswith((".xz", ".gz")) else path
    return name.endswith((".jsonl", ".json"))


def read_jsonl(path):
    """List of dicts, one per non-blank line; a malformed line is an error naming file and line."""
    records = []
    try:
        with _open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}, line {n}: malformed JSON ({e.msg})") from None
                if not isinstance(r, dict):
                    raise UserError(f"{path}, line {n}: expected a JSON object, got {type(r).__name__}")
                records.append(r)
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if not records:
        raise UserError(f"{path} holds no records")
    return records


def field(records, name, path, text=True):
    """The values of one field; a record without it, or with a null or (text=True) non-string
    value, is an error naming the field and record. Labels (text=False) may be numbers."""
    out = []
    for n, r in enumerate(records, 1):
        if name not in r:
            raise UserError(f"{path}: record {n} has no field {name!r} (it has {sorted(r)})")
        v = r[name]
        if v is None or (not isinstance(v, str) if text else isinstance(v, (dict, list))):
            raise UserError(
                f"{path}: record {n} field {name!r} is {json.dumps(v)[:40]}, not {'a string' if text else 'a label'}"
            )
        out.append(str(v))
    return out


def read_texts(path, text_field="text"):
    """Documents of a pretraining file (.txt or .jsonl)."""
    if _is_jsonl(path):
        texts = field(read_jsonl(path), text_field, path)
    else:
        try:
            with _open_text(path) as f:
                raw = f.read()
        except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read {path}: {e}") from None
        lines = raw.strip("\n").splitlines()  # a trailing blank line separates nothing
        if any(not l.strip() for l in lines):  # blank-line separated paragraphs
            texts = [" ".join(p.split()) for p in raw.split("\n\n")]
        else:
            texts = lines
    texts = [t.strip() for t in texts if t.strip()]
    if not texts:
        raise UserError(f"{path} holds no text")
    return texts


def embedded_records(split):
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    records = [r for r in read_jsonl(EMBEDDED) if r["split"] == split]
    if not records:
        raise UserError(f"the embedded corpus has no {split!r} records")
    return records


def held_out(text, percent=2):
    """Deterministic train/valid split of a user's pretraining file by a hash of each document."""
    return int(hashlib.sha1(text.encode()).hexdigest(), 16) % 100 < percent


def pretraining_texts(path=None, valid_path=None, text_field="text"):
    """(train texts, valid texts): the embedded corpus's documents, or the user's files."""
    if path is None:
        return ([r["document"] for r in embedded_records("train")], [r["document"] for r in embedded_records("valid")])
    texts = read_texts(path, text_field)
    if valid_path is not None:
        return texts, read_texts(valid_path, text_field)
    train = [t for t in texts if not held_out(t)]
    valid = [t for t in texts if held_out(t)]
    if not valid or not train:  # too small to hold anything out: validate on the training text
        return texts, texts
    return train, valid


def token_counts(ids, vocab_size):
    return np.bincount(np.asarray(ids), minlength=vocab_size)


def unigram_entropy(ids, vocab_size):
    """Entropy (nats) of the token frequencies of `ids`: the per-token loss of a model that
    predicts every token from its frequency alone. A pretrained model must do well below it."""
    p = token_counts(ids, vocab_size).astype(np.float64)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log(p)).sum())


# the held-out loss a pretraining is judged by against the unigram entropy, in order of preference:
# the text tokens' loss where an objective reports one (span corruption's sentinels and [EOS] are
# easy targets that would take its loss under the unigram entropy on their own), and a masked LM's
# over the targets not in view (a kept token can be copied: core/unilm/pmlm.py)
HELD_OUT_KEYS = (
    "valid_ae_hidden_loss",
    "valid_ae_loss",
    "valid_text_loss",
    "valid_loss",
    "valid_par_hidden_loss",
    "valid_par_loss",
)


def held_out_key(rec, path=None):
    """The key of HELD_OUT_KEYS a held-out record of train.py's log holds; None if it holds none,
    or, given the log's path, an error that names it."""
    key = next((k for k in HELD_OUT_KEYS if k in rec), None)
    if key is None and path is not None:
        raise ValueError(f"{path}: its last held-out record has none of the losses {', '.join(HELD_OUT_KEYS)}")
    return key


# -----------------------------------------------------------------------------
# the pretraining stream


class TokenStream:
    """All documents' token ids end to end; example i is a window drawn by a generator seeded
    with (seed, i). The batch of step t is examples [t*G, (t+1)*G), so the data position is one
    integer: resuming, or splitting a step over N processes, yields exactly the same examples.

    With `sep` (train.py passes [EOS]) the documents are separated by it, as UniLMv2's input
    "[SOS] S1 [EOS] S2 [EOS]" (section 2.2) marks where a text ends, and a window begins where a
    document begins: a random token is drawn, and the window starts at its document's first
    token, or, in a document longer than the window, at a random place inside it. Documents are
    drawn in proportion to their length, as the tokens of a plain stream would be."""

    def __init__(self, docs_ids, window, seed, sep=None):
        docs = [list(d) for d in docs_ids if len(d)]
        if sep is not None:
            docs = [d + [sep] for d in docs]
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)  # (D,) first token of each
        self.lengths = lengths - (sep is not None)  # (D,) tokens of each document, its separator excluded
        self.ids = np.fromiter((i for d in docs for i in d), dtype=np.int32)
        if len(self.ids) < window + 1:
            raise UserError(f"the corpus has {len(self.ids)} tokens, fewer than one window of {window}")
        self.window, self.seed, self.sep = window, seed, sep

    def __len__(self):
        return len(self.ids)

    def rng(self, i):
        return np.random.default_rng([self.seed, i])

    def window_at(self, i):
        """(token ids of example i, its generator for the masking that follows)."""
        rng = self.rng(i)
        start = int(rng.integers(0, len(self.ids) - self.window + 1))
        if self.sep is not None:
            d = int(np.searchsorted(self.starts, start, side="right")) - 1  # the document of that token
            start = int(self.starts[d])
            if self.lengths[d] > self.window:  # a long document: a window inside it
                start += int(rng.integers(0, self.lengths[d] - self.window + 1))
            start = min(start, len(self.ids) - self.window)  # the last documents: a window that ends the corpus
        return self.ids[start : start + self.window], rng
