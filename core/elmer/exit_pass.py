"""ELMER's decoder pass with early exit at static shapes, and as CUDA graphs.

core/elmer/model.py's decoder_loop compacts the active tokens every layer (kernels.active_index, a host
sync for the count, then a gather and a scatter), which does the least arithmetic: right for big
batches. At small batch a GPU is limited by launches and syncs, not arithmetic, so this pass keeps
every shape fixed instead ("masked" layout):

  * every token is a query at every layer; an exited token's row is not updated (x keeps h^l, as
    ELMER 4.1 asks) and its decision is ignored: its query, attention output and FFN are computed
    and discarded, the launches and syncs of the compaction are not spent;
  * the metadata, the relative bias and so the attention's codes and tile maps are made once per
    pass, not once per layer;
  * under a cheap exit measure (state, classifier) the vocabulary projection runs once, after the
    last layer, on every token's frozen state: with the shared off-ramp (the default) that is each
    token's off-ramp at its exit layer. Under the entropy measure (or soft exit) it runs at every
    layer, as the rule needs;
  * the only host sync is the one that ends the loop: whether any token is still active, read
    after each layer but the last (none at all when exits are disabled).
On CUDA each layer is captured once as a CUDA graph over static buffers and replayed (one launch a
layer instead of ~100; the start joins layer 1's graph), and with exits disabled the whole pass is
one graph, one launch; the graphs are kept per (model, batch, source length, measure, threshold)
and rebuilt when the model's parameters change. The results equal decoder_loop's (the tests check
it on the CPU, where the same pass runs eagerly); work counts are those of this layout: every
query row of every layer that ran.
"""

import weakref

import torch

from ..elmer.exit_measures import cheap_exit, disabled
from ..graphs import capture, weights_version
from ..model import Meta
from ..tokenizer import MASK

MASKED_MAX_TOKENS = 2048  # decode_exit takes this layout on CUDA up to B * T tokens (bench/bench_early_exit.py)


def masked_ok(model):
    """The masked pass needs the shared off-ramp: its one final projection stands for the off-ramp
    of each token's exit layer."""
    return model.ramps is None


class MaskedExitPass:
    """decode_exit's pass for a batch of B sources of S tokens, T decoder positions, one measure
    and threshold. run(memory, src_valid) -> (tokens (B, T), exit layers (B, T), entropies
    (B, T, L), layers run). graphs: capture each layer as a CUDA graph (CUDA only).
    measure "plan" (benchmarks): each token leaves at the layer run(..., plan=(B*T,) 1-based) names,
    with the vocabulary projection at every layer if ramp_every_layer, else once at the end."""

    def __init__(self, model, B, S, T, measure, delta, graphs, ramp_every_layer=False):
        p = next(model.parameters())
        self.model, self.B, self.S, self.T = model, B, S, T
        self.measure, self.delta = measure, delta
        self.off = measure != "plan" and disabled(measure, delta)
        self.per_layer_ramp = model.soft is not None or (measure == "entropy" and not self.off) or ramp_every_layer
        self.graphs = graphs and p.is_cuda
        dev, C = p.device, model.cfg.d_model
        L = len(model.dec_layers)
        self.L = L
        # static buffers: the inputs, the running state, the outputs
        self.memory = torch.zeros(B, S, C, dtype=p.dtype, device=dev)
        self.src_valid = torch.zeros(B, S, dtype=torch.bool, device=dev)
        self.x = torch.zeros(B * T, C, dtype=p.dtype, device=dev)
        self.active = torch.ones(B * T, dtype=torch.bool, device=dev)
        self.anyone = torch.ones((), dtype=torch.bool, device=dev)  # whether anybody is active: the stop flag
        self.tokens = torch.zeros(B * T, dtype=torch.long, device=dev)
        self.layer_of = torch.zeros(B * T, dtype=torch.long, device=dev)
        self.entropies = torch.full((B * T, L), float("nan"), device=dev)
        self.pos = torch.arange(T, device=dev).expand(B, T)
        self.plan = torch.zeros(B * T, dtype=torch.long, device=dev)
        z = torch.zeros(B, T, dtype=torch.long, device=dev)
        self.meta = Meta(z, z)  # bidirectional self-attention, made once: its codes and map too
        self.mem_meta = Meta(
            torch.zeros(B, S, dtype=torch.long, device=dev),
            torch.zeros(B, S, dtype=torch.long, device=dev),
            self.src_valid,
        )
        self.version = self._version()
        self._graphs = None

    def _version(self):
        return weights_version(self.model)

    # -- the steps ------------------------------------------------------------------------------
    def _start(self):
        # the source's padding is in src_valid, which a run rewrites: the attention's codes and maps
        # are built anew at layer 0 (inside its graph) and read by the layers above
        self.meta.cache.clear()
        self.mem_meta.cache.clear()
        m = self.model
        self.x.copy_(
            m.emb(torch.full((self.B, self.T), MASK, device=self.x.device, dtype=torch.long), self.pos).reshape(
                self.B * self.T, -1
            )
        )
        self.active.fill_(True)
        self.tokens.zero_()
        self.layer_of.zero_()
        self.entropies.fill_(float("nan"))

    def _exit(self, l, h):
        if self.measure == "plan":
            return self.active & (self.plan == l + 1)
        return self.active & cheap_exit(self.model, self.measure, self.delta, l, None, h, self.x)

    def _layer(self, l):
        m, B, T = self.model, self.B, self.T
        if l == 0:
            self.bias = m.rel_bias(m.dec_rel_table, self.pos, self.pos)  # made once a pass, read by every layer
        y, _ = m.dec_layers[l](
            self.x.view(B, T, -1), self.meta, bias=self.bias, memory=self.memory, mem_meta=self.mem_meta
        )
        h = y.reshape(B * T, -1)
        active = self.active
        argmax = None
        if l == self.L - 1:
            exit_ = active.clone()
            if self.per_layer_ramp:
                argmax, entropy, _ = m.ramp_stats(l, h)
                self.entropies[:, l] = torch.where(active, entropy.float(), self.entropies[:, l])
        elif self.per_layer_ramp:
            argmax, entropy, _ = m.ramp_stats(l, h)
            self.entropies[:, l] = torch.where(active, entropy.float(), self.entropies[:, l])
            if self.off:
                exit_ = torch.zeros_like(active)
            elif self.measure == "entropy":
                exit_ = active & (entropy < self.delta)
            else:
                exit_ = self._exit(l, h)
        elif self.off:
            exit_ = torch.zeros_like(active)
        else:
            exit_ = self._exit(l, h)
        if argmax is not None:
            self.tokens.copy_(torch.where(exit_, argmax, self.tokens))
        self.layer_of.copy_(torch.where(exit_, l + 1, self.layer_of))
        fed = h
        if m.soft is not None and l < self.L - 1:
            fed = torch.where(exit_[:, None], h, m.soft(torch.cat([m.emb.tok(argmax), h], -1)))
        self.x.copy_(torch.where(active[:, None], fed, self.x))
        self.active.copy_(active & ~exit_)
        if not self.off and l < self.L - 1:  # the stop flag, inside the layer's graph: the host only reads it
            self.anyone.copy_(self.active.any())

    def _finish(self):
        """Under a cheap measure or exit disabled: one vocabulary projection of every token's state at
        its exit layer (the shared off-ramp)."""
        if self.per_layer_ramp:
            return
        argmax, entropy, _ = self.model.ramp_stats(self.L - 1, self.x)
        self.tokens.copy_(argmax)
        self.entropies.scatter_(1, (self.layer_of - 1).clamp_min(0)[:, None], entropy.float()[:, None])

    # -- running ----------------------------------------------------------------------------------
    def _steps(self):
        """The pass as steps between which the host may stop it: the start with layer 1, each layer
        above, the finish; with exits disabled (nobody can stop it) one step."""
        layers = [lambda: (self._start(), self._layer(0))] + [lambda l=l: self._layer(l) for l in range(1, self.L)]
        if self.off:
            return [lambda: [step() for step in layers + [self._finish]]]
        return layers + [self._finish]

    def _capture(self):
        """One CUDA graph per step (_steps), each step run once eagerly first (the Triton kernels
        compile, the attention's codes and maps are built into the Metas' caches, which the
        captured layers then only read)."""
        return capture(self._steps(), self.model)

    @torch.no_grad()
    def run(self, memory, src_valid, plan=None, lag=None):
        """lag 0 (the default): after each layer but the last, wait for the device and stop if nobody
        is active. lag 1: read that flag one layer late, while the next layer already runs, so the
        device never waits for the host; a pass whose tokens all left then runs one layer more than
        it needs (on frozen rows: the result is the same). The wait costs less than that extra
        layer where every token leaves early (bench/RESULTS.md), so lag 0 is the default."""
        self.memory.copy_(memory)
        self.src_valid.copy_(src_valid)
        if plan is not None:
            self.plan.copy_(plan)
        cuda = self.x.is_cuda
        lag = 0 if lag is None else lag
        if self.graphs:
            if self._graphs is None or self.version != self._version():
                self.version, self._graphs = self._version(), self._capture()
            steps = [g.replay for g in self._graphs]
        else:
            steps = self._steps()
        run, flags = self.L, []
        if not self.off:  # steps: layers 1..L (the start with layer 1), then the finish
            for l in range(self.L - 1):
                steps[l]()
                if lag and cuda:
                    if len(flags) >= lag and not self._read(flags[-lag]):
                        run = l + 1
                        break
                    flags.append(self._flag())
                elif not bool(self.anyone):  # the one host sync of a layer
                    run = l + 1
                    break
            else:
                steps[self.L - 1]()  # the top: everyone still here leaves
        steps[-1]()  # exits disabled: the whole pass
        B, T = self.B, self.T
        return (
            self.tokens.view(B, T).clone(),
            self.layer_of.view(B, T).clone(),
            self.entropies.view(B, T, self.L).clone(),
            run,
        )

    def _flag(self):
        """Whether anybody is active, copied to pinned host memory behind an event (no wait)."""
        host = torch.empty((), dtype=torch.bool, pin_memory=True)
        host.copy_(self.anyone, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event

    @staticmethod
    def _read(flag):
        host, event = flag
        event.synchronize()
        return bool(host)


_PASSES = weakref.WeakKeyDictionary()  # model -> {shapes and rule: its pass}


def masked_pass(model, B, S, T, measure, delta, graphs=True, ramp_every_layer=False):
    """The pass for these shapes, made once and kept (with its graphs) for later calls."""
    key = (B, S, T, measure, float(delta), graphs, ramp_every_layer)
    passes = _PASSES.setdefault(model, {})
    if key not in passes:
        passes[key] = MaskedExitPass(model, B, S, T, measure, delta, graphs, ramp_every_layer)
    return passes[key]
