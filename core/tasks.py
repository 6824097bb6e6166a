"""Downstream data: summarization pairs and classification examples, from the embedded corpus or
the user's JSONL files, and the order in which fine-tuning visits them.

summarize: document -> the package's one-line summary (extreme summarization, like XSum);
           a user's file gives --src-field / --tgt-field (XSum: document/summary, CNN/DM:
           article/highlights, SQuAD-QG: context+answer/question joined beforehand).
classify:  document -> section (58 classes); a user's file gives --text-field / --label-field.
"""

import math
from dataclasses import dataclass

import numpy as np

from .data import embedded_records, field, read_jsonl
from .errors import UserError
from .flags import Applies

TASKS = ("summarize", "classify")
# finetune.py's flags of one task (core/flags.py Applies: (config, the checkpoint's Arch) -> whether they apply)
SUMMARIZE = Applies(lambda config, arch: config.task == "summarize", "to --task summarize")
CLASSIFY = Applies(lambda config, arch: config.task == "classify", "to --task classify")


@dataclass
class Examples:
    """One split of a task: source texts and targets (summaries, or label strings)."""

    split: str
    sources: list
    targets: list
    origin: str
    skipped: int = 0  # examples of the file left out: an empty source or target

    def __len__(self):
        return len(self.sources)

    def shuffled(self, seed=0):
        """The same examples in an order fixed by `seed`, so that any head [:k] is a sample of the
        whole split: the embedded corpus is sorted by package, and its first 200 validation
        examples would all be packages from "2to3" to "dibbler"."""
        order = np.random.default_rng([seed, len(self)]).permutation(len(self))
        return Examples(
            self.split, [self.sources[i] for i in order], [self.targets[i] for i in order], self.origin, self.skipped
        )

    def sample(self, n=None):
        """n examples fixed by seed 0, the head of shuffled(), the same at every call; for n None,
        the split as it is."""
        if not n:
            return self
        mixed = self.shuffled(seed=0)
        return Examples(self.split, mixed.sources[:n], mixed.targets[:n], self.origin, self.skipped)

    def share(self, fraction):
        """A fixed share of the examples, spread evenly over the file (every other one at 0.5): the
        same examples for every run given the same fraction."""
        if not 0 < fraction <= 1:
            raise ValueError(f"a share of the examples is in (0, 1], not {fraction}")
        keep = [i for i in range(len(self)) if math.floor((i + 1) * fraction) > math.floor(i * fraction)]
        return Examples(
            self.split,
            [self.sources[i] for i in keep],
            [self.targets[i] for i in keep],
            f"{self.origin} (a share of {fraction:g})",
            self.skipped,
        )


def load_split(task, split, path=None, src_field=None, tgt_field=None, note=None):
    """The examples of one split. path None: the embedded corpus. Fields default to the task's.
    Examples whose source or target is empty are left out, counted in `skipped`, and said through
    `note` (print to stderr by default)."""
    default_src, default_tgt = ("document", "summary") if task == "summarize" else ("document", "section")
    src_field, tgt_field = src_field or default_src, tgt_field or default_tgt
    if path is None:
        records, origin = embedded_records(split), f"embedded corpus ({split})"
    else:
        records, origin = read_jsonl(path), path
    sources, targets = field(records, src_field, origin), field(records, tgt_field, origin, text=task == "summarize")
    keep = [i for i, (s, t) in enumerate(zip(sources, targets)) if s.strip() and t.strip()]
    if not keep:
        raise UserError(f"{origin}: the {split} split has no example with a non-empty {src_field!r} and {tgt_field!r}")
    skipped = len(sources) - len(keep)
    if skipped:
        import sys

        (note or (lambda msg: print(msg, file=sys.stderr)))(
            f"note: {origin}: {skipped} of {len(sources)} examples left out, their {src_field!r} or {tgt_field!r} "
            f"empty ({len(keep)} kept)"
        )
    return Examples(split, [sources[i] for i in keep], [targets[i] for i in keep], origin, skipped)


def lead(text, words=None):
    """The LEAD baselines: the first `words` words, or (words None) the first sentence."""
    if words is not None:
        return " ".join(text.split()[:words])
    cuts = [c for c in (text.find(end) for end in (". ", "! ", "? ")) if c > 0]
    return text[: min(cuts) + 1] if cuts else text


class Labels:
    """Label strings <-> ids, fixed by the training split and stored in the checkpoint."""

    def __init__(self, names):
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}

    @classmethod
    def from_targets(cls, targets, valid_targets=(), origin="the training split", note=print):
        """The labels of the training split. One label is an error; validation labels it lacks
        are said (they can only be scored wrong), since a small training subset may lack rare ones."""
        names = sorted(set(targets))
        if len(names) < 2:
            raise UserError(f"{origin} has only one label ({names[0]!r}); classification needs at least two")
        unseen = sorted(set(valid_targets) - set(names))
        if unseen:
            n = sum(t in set(unseen) for t in valid_targets)
            note(
                f"note: {n} validation examples have labels that {origin} never has, and count as wrong: "
                f"{', '.join(map(repr, unseen[:5]))}{' ...' if len(unseen) > 5 else ''} ({len(unseen)} labels)"
            )
        return cls(names)

    def ids(self, targets):
        """Label ids; a label the training split never had maps to -1 (counted as wrong)."""
        return [self.index.get(t, -1) for t in targets]

    def __len__(self):
        return len(self.names)


def epoch_order(n, epoch, seed):
    """A permutation of range(n) that depends only on (seed, epoch): the data position of a
    fine-tuning run is one integer, the number of examples consumed."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def examples_for_step(n, step, per_step, seed):
    """Indices of the examples of optimizer step `step` (global, before splitting over
    processes): walks through epochs of shuffled order, each example once per epoch."""
    first = step * per_step
    out = []
    while len(out) < per_step:
        epoch, offset = divmod(first + len(out), n)
        order = epoch_order(n, epoch, seed)
        out.extend(order[offset : offset + per_step - len(out)].tolist())
    return out
