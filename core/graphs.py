"""CUDA graphs for decoding: steps run once eagerly on a side stream (Triton compiles, caches fill),
then each captured into a graph that shares one memory pool. Used by ELMER's static-shape pass
(core/exit_pass.py) and Mask-Predict's static step (core/nar.py)."""
import torch


def capture(steps):
    """One CUDA graph per callable of `steps`, each step first run once, in order, outside any capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for step in steps:
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graphs, pool = [], None
    for step in steps:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            step()
        pool = g.pool()
        graphs.append(g)
    return graphs


def weights_version(model):
    """Changes whenever a parameter of the model is written in place: a captured graph is then stale."""
    return tuple(t._version for t in model.parameters())
