"""CUDA graphs for decoding: steps run once eagerly on a side stream (Triton compiles, caches fill),
then each captured into a graph that shares one memory pool. Used by ELMER's static-shape pass
(core/elmer/exit_pass.py), Mask-Predict's static decoding (core/mlae/mask_predict.py) and the beam
search at fixed shapes (core/static_beam.py)."""

import contextlib
import weakref

import torch

SOURCE_BUCKET = 64  # a static decoder pads its sources to a multiple of this: a few shapes, a few graphs


def source_bucket(n):
    """The padded length of N source positions: the next multiple of SOURCE_BUCKET."""
    return -(-n // SOURCE_BUCKET) * SOURCE_BUCKET


def capture(steps, model=None):
    """One CUDA graph per callable of `steps`, each step first run once, in order, outside any capture.
    Under autocast the steps run with its weight-cast cache off: a graph captured with the cache on
    would read the cached casts, which the cache frees when the caller's autocast region ends, so a
    later replay reads freed memory (an illegal memory access). So that a replay need not cast the weights it uses
    either, the nn.Linear weights and
    biases of `model` hold their casts while the steps are captured (`cast_linears`): the graphs
    read casts made once, which the returned list keeps alive (its `.keep`)."""
    stream = torch.cuda.Stream()
    graphs, pool = Graphs(), None
    with cast_linears(model, "cuda") as casts:
        stream.wait_stream(torch.cuda.current_stream())  # the casts are made on the current stream
        with torch.cuda.stream(stream), _no_cast_cache():
            for step in steps:
                step()
        torch.cuda.current_stream().wait_stream(stream)
        for step in steps:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool), _no_cast_cache():
                step()
            pool = g.pool()
            graphs.append(g)
    graphs.keep = casts
    return graphs


class Graphs(list):
    """capture's graphs, and `keep`: the tensors they read that nothing else holds."""

    keep = ()


@contextlib.contextmanager
def cast_linears(model, device_type):
    """While inside, under autocast on `device_type`, every nn.Linear's float32 weight and bias hold
    their cast to the autocast dtype (autocast then casts nothing, and a linear layer computes what
    it computes with the cast done by autocast); restored on the way out, even on an error. A
    parameter that another kind of module also uses (a weight tied to an embedding) is left alone.
    Yields the casts (empty when autocast is off or model is None)."""
    casts, saved = [], []
    if model is None or not torch.is_autocast_enabled(device_type):
        yield casts
        return
    dtype = torch.get_autocast_dtype(device_type)
    shared = {id(p) for m in model.modules() if not isinstance(m, torch.nn.Linear) for p in m.parameters(recurse=False)}
    try:
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                for p in (m.weight, m.bias):
                    if p is not None and p.dtype == torch.float32 and id(p) not in shared:
                        saved.append((p, p.data))
                        p.data = p.data.to(dtype)
                        casts.append(p.data)
        yield casts
    finally:
        for p, data in saved:
            p.data = data


def _no_cast_cache():
    if not torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)


def weights_version(model):
    """Changes whenever a parameter of the model is written in place (an optimizer step,
    load_state_dict) or given new storage (`.data =`): a captured graph is then stale. The list of
    parameters is read once per model, since model.parameters() walks every module, on the host,
    before every replay, for about as long as a batch-1 pass takes on a GPU; a model given new
    Parameter objects after its first capture needs a new pass."""
    params = _PARAMS.get(model)
    if params is None:
        params = _PARAMS[model] = list(model.parameters())
    return tuple((t._version, t.data_ptr()) for t in params)


_PARAMS = weakref.WeakKeyDictionary()  # model -> its parameters, listed once
