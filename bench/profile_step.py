"""One training step of a preset on the GPU, as train.py takes it, for bench/gpu_check.py's profile:

    from bench.profile_step import make_step
    step = make_step("pmlm", "base"); step()   # forward + backward + AdamW under bf16 autocast
    step.n_params, step.tokens                 # parameters, and tokens of the last step (MFU)

The embedded corpus with its 8000-piece tokenizer (train.py's default, cached under data/cache),
windows of 512 tokens, 16 examples per step (one micro-batch), the optimizer train.py makes.
"""

import dataclasses
import sys
from types import SimpleNamespace

if __name__ == "__main__" and not __package__:  # a module of gpu_check.py's profile, not a script
    sys.exit(
        "error: bench/profile_step.py is the step that `python -m bench.gpu_check --part profile` profiles, not a "
        "script; to time a training step with each attention, run python -m bench.bench_step (--help)"
    )

import torch

from core.config import preset
from core.data import TokenStream, pretraining_texts
from core.distributed import Dist, resolve_dtype
from core.elmer.model import ELMER, lplm_batch, lplm_loss_sums
from core.objectives import OBJECTIVES
from core.model import UnifiedLM
from core.optim import lr_at, make_optimizer
from core.unilm.pmlm import pmlm_batch, pmlm_loss_sums
from core.tokenizer import cached_tokenizer
from core.training import TOKENIZER_CACHE
from bench.step import train_step


def make_step(objective="pmlm", model="base", seq_len=512, batch=16, device="cuda", dtype="auto"):
    """dtype as train.py's --dtype: auto is bf16 autocast on CUDA, as a training run there."""
    texts = pretraining_texts()[0]
    tok, _ = cached_tokenizer(texts, 8000, TOKENIZER_CACHE)
    stream = TokenStream(tok.encode(texts[:20000]), OBJECTIVES[objective].window(seq_len), 0, sep=tok.eos_id)
    cfg = preset(model, vocab_size=tok.vocab_size, dropout=0.0, pad_id=tok.pad_id)
    if objective == "elmer":
        cfg = dataclasses.replace(cfg, n_dec_layers=cfg.n_layers)
        net = ELMER(cfg, dec_len=32)
        make = lambda ix: lplm_batch(stream, ix, tok, len(net.dec_layers), 10)
        loss_sums = lplm_loss_sums
    else:
        net = UnifiedLM(cfg)
        make = lambda ix: pmlm_batch(stream, ix, tok, "ae+par")
        loss_sums = pmlm_loss_sums
    net = net.to(device)
    optimizer = make_optimizer(net, 1e-4, 0.01)
    d = Dist(0, 1, 0, torch.device(device), resolve_dtype(dtype, torch.device(device)))
    args = SimpleNamespace(lr=1e-4, warmup=10, steps=1000, seed=0, clip=1.0)
    state = {"step": 0}

    def step():
        ix = list(range(state["step"] * batch, (state["step"] + 1) * batch))
        b = make(ix)
        step.tokens = b.n_tokens
        train_step(
            net,
            net,
            optimizer,
            [b],
            loss_sums,
            d,
            step=state["step"],
            lr=lr_at(state["step"], args.lr, args.warmup, args.steps),
        )
        state["step"] += 1

    step.n_params = sum(p.numel() for p in net.parameters())
    step.tokens = 0
    return step


if __name__ == "__main__":  # a module of gpu_check.py's profile, with no flags of its own
    sys.exit(
        "error: bench/profile_step.py is the step that `python -m bench.gpu_check --part profile` profiles, not a "
        "script; to time a training step with each attention, run python -m bench.bench_step (--help)"
    )
