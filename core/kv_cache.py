"""The key/value cache of incremental decoding, one object that a decoder creates once per decoding,
hands to the model's step and reorders with a search's beams (nanochat's engine keeps its KVCache
so).

It holds, per decoder layer, the keys and values (N, H, L, D) of every token fed so far, and what
the attention rule and the relative position bias read of those keys: their kind, step and validity
(a Meta, each (N, L)) and their position ids (N, L). An encoder-decoder keeps beside them the
memory's cross-attention keys and values, projected once per source, and their Meta. A step
attends to the cache's keys followed by its own (`keys`); the keys that later tokens may see then
join the cache (`append`): all of them for T5 and MLAE, the ORIGINAL token's only for UniLMv2's
decoder, since no later token may see a [P].

At fixed shapes (core/static_beam.py) the buffers have a slot for every key a search can make: a
step writes its keys at `write_at` instead of appending, the search updates the metadata in place,
and it reorders the buffers itself (in place, for CUDA graphs)."""

from dataclasses import dataclass
from typing import Optional

import torch

from .model import Meta


def _pick(meta, index):
    rows = lambda t: None if t is None else t.index_select(0, index)  # noqa: E731
    return Meta(rows(meta.kind), rows(meta.step), rows(meta.valid))


@dataclass(eq=False)
class KVCache:
    kv: list  # per layer (k, v), each (N, H, L, D); [] until keys join
    meta: Meta  # the L keys' kind, step and validity (None: all valid), (N, L)
    pos: torch.Tensor  # (N, L) their position ids
    cross: Optional[list] = None  # per decoder layer the memory's (k, v), each (N, H, S, D)
    cross_meta: Optional[Meta] = None  # the memory's keys: CONTEXT, its padding invalid
    write_at: Optional[torch.Tensor] = None  # fixed shapes: the slots a step writes its keys into

    @classmethod
    def empty(cls, rows, device, cross=None, cross_meta=None):
        """No keys yet (an encoder-decoder's decoder before its first token); the keys that will
        join are all valid."""
        none = torch.zeros(rows, 0, dtype=torch.long, device=device)
        return cls([], Meta(none, none), none, cross, cross_meta)

    @property
    def rows(self):
        return self.pos.shape[0]

    @property
    def length(self):
        return self.pos.shape[1]

    def past(self, layer):
        """Layer `layer`'s cached (k, v), None before any key joined."""
        return self.kv[layer] if self.kv else None

    def keys(self, kind, step, pos, valid=None):
        """(Meta, positions) of the cache's keys followed by a step's own, whose kind, step, pos and
        valid (None: all valid) are (N, Lq)."""
        cat = lambda a, b: torch.cat([a, b], 1)  # noqa: E731
        if self.meta.valid is not None:
            valid = cat(self.meta.valid, torch.ones_like(kind, dtype=torch.bool) if valid is None else valid)
        return Meta(cat(self.meta.kind, kind), cat(self.meta.step, step), valid), cat(self.pos, pos)

    def append(self, new, kind, step, pos, valid=None):
        """The step's keys that stay: new, per layer (k, v) each (N, H, Lq, D), with their metadata."""
        self.kv = (
            new
            if not self.kv
            else [(torch.cat([k, nk], 2), torch.cat([v, nv], 2)) for (k, v), (nk, nv) in zip(self.kv, new)]
        )
        self.meta, self.pos = self.keys(kind, step, pos, valid)

    def reorder(self, index):
        """From now on row i is old row index[i] ((N',) long; N' may differ from N)."""
        rows = lambda kv: (kv[0].index_select(0, index), kv[1].index_select(0, index))  # noqa: E731
        self.kv = [rows(kv) for kv in self.kv]
        self.meta, self.pos = _pick(self.meta, index), self.pos.index_select(0, index)
        if self.cross is not None:
            self.cross, self.cross_meta = [rows(kv) for kv in self.cross], _pick(self.cross_meta, index)
