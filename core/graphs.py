"""CUDA graphs for decoding: steps run once eagerly on a side stream (Triton compiles, caches fill),
then each captured into a graph that shares one memory pool. Used by ELMER's static-shape pass
(core/exit_pass.py) and Mask-Predict's static step (core/nar.py)."""
import contextlib
import weakref

import torch


def capture(steps):
    """One CUDA graph per callable of `steps`, each step first run once, in order, outside any capture.
    Under autocast the steps run with its weight-cast cache off: a graph captured with the cache on
    would read the cached casts, which the cache frees when the caller's autocast region ends, so a
    later replay reads freed memory (on an H200 a replay in a new region ended in an illegal memory
    access). Each replay then casts the weights it uses."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), _no_cast_cache():
        for step in steps:
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graphs, pool = [], None
    for step in steps:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool), _no_cast_cache():
            step()
        pool = g.pool()
        graphs.append(g)
    return graphs


def _no_cast_cache():
    if not torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)


def weights_version(model):
    """Changes whenever a parameter of the model is written in place (an optimizer step,
    load_state_dict) or given new storage (`.data =`): a captured graph is then stale. The list of
    parameters is read once per model, since model.parameters() walks every module (0.7 ms for a
    `base` ELMER on a CPU core, paid before every replay, where a batch-1 pass on an H200 takes
    about 1 ms); a model given new Parameter objects after its first capture needs a new pass."""
    params = _PARAMS.get(model)
    if params is None:
        params = _PARAMS[model] = list(model.parameters())
    return tuple((t._version, t.data_ptr()) for t in params)


_PARAMS = weakref.WeakKeyDictionary()  # model -> its parameters, listed once
