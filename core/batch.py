"""A padded batch of named (B, L) tensors, plus the two numbers the training loop needs."""

import numpy as np
import torch


class Batch:
    """Named tensors as attributes. `norm` is the count the summed loss is divided by (e.g. the
    masked tokens), `n_tokens` the input tokens processed (for tokens/s)."""

    def __init__(self, norm=0.0, n_tokens=0, **tensors):
        self.tensors = tensors
        self.norm, self.n_tokens = float(norm), int(n_tokens)
        self.__dict__.update(tensors)

    def to(self, device):
        """On the device; a CUDA copy goes through pinned memory, so that it does not wait for the GPU."""
        cuda = torch.device(device).type == "cuda"
        return Batch(
            self.norm,
            self.n_tokens,
            **{
                k: (v.pin_memory() if cuda and v.device.type == "cpu" else v).to(device, non_blocking=True)
                for k, v in self.tensors.items()
            },
        )

    def __len__(self):
        return next(iter(self.tensors.values())).shape[0]


def flat_positions(mask, values):
    """(flat indices of the True entries of a (B, L) bool mask, `values` there), made on the host with
    the batch: a model reads them by index_select with no host sync, where a boolean index on the
    device would read its count."""
    idx = mask.flatten().nonzero().squeeze(1)
    return idx, values.flatten()[idx]


def source_array(ids, tok, max_src, sos=False):
    """An encoder's source: "SRC [EOS]", or "[SOS] SRC [EOS]" with sos, at most max_src tokens in all."""
    head = [tok.sos_id] if sos else []
    return np.array(head + list(ids)[: max(0, max_src - 1 - len(head))] + [tok.eos_id], dtype=np.int64)


def pad_stack(arrays, fill):
    """list of 1-D numpy arrays -> (B, Lmax) long tensor padded with `fill`, and the (B, Lmax)
    bool validity mask."""
    L = max(1, max(len(a) for a in arrays))
    out = torch.full((len(arrays), L), fill, dtype=torch.long)
    valid = torch.zeros(len(arrays), L, dtype=torch.bool)
    for b, a in enumerate(arrays):
        out[b, : len(a)] = torch.as_tensor(a, dtype=torch.long)
        valid[b, : len(a)] = True
    return out, valid
