"""A training step under torch.profiler (bench/gpu_check.py --part profile and --part all): the top
kernels by time, the shares of our kernels' classes, the total of every kernel's time against the
step's wall time (what the host leaves uncovered) and the model FLOP utilisation.
"""

import sys
import time

if __name__ == "__main__" and not __package__:  # a module the GPU check imports
    sys.exit(
        "error: bench/gpu_profile.py is the module python -m bench.gpu_check imports, with nothing to run: "
        "run that (--help)"
    )

H100_BF16_TFLOPS = 989.0  # dense bf16 peak of an H100 SXM, the MFU denominator


# kernel names as the profiler reports them, matched exactly (a substring such as 'tile' also
# names cuBLAS kernels): what each share of a step is made of
KERNEL_CLASSES = {
    "attention kernels": ("_fwd_kernel", "_bwd_kv_kernel", "_bwd_q_kernel", "_delta_kernel"),
    "codes and tile map": ("_codes_kernel", "_class_kernel", "_list_kernel"),
    "off-ramps": ("_offramp_kernel", "_offramp_combine_kernel"),
    "gather / scatter / index": ("_gather_kernel", "_scatter_kernel", "_compact_kernel"),
}


def part_profile(rep, objectives=("pmlm", "elmer"), tiny=False):
    """A `base` training step under torch.profiler in bf16 autocast (train.py's --dtype auto on CUDA):
    the top kernels by CUDA time (to check the classification by eye), the shares of the kernel
    classes above, and the step's model FLOP utilisation (6 N tokens / time / peak; attention's
    FLOPs not counted). tiny: the `tiny` model at small shapes, on a CPU by its operators' times."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from bench.profile_step import make_step

    cuda = torch.cuda.is_available()
    size, sync = ("tiny", lambda: None) if tiny else ("base", torch.cuda.synchronize)
    kind, attr = ("CUDA", "self_device_time_total") if cuda else ("CPU", "self_cpu_time_total")
    rows_all = []
    for objective in objectives:
        step = make_step(
            objective, size, **(dict(seq_len=64, batch=4, device="cuda" if cuda else "cpu") if tiny else {})
        )
        for _ in range(3):  # compile and warm the allocator
            step()
        sync()
        t0 = time.time()
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                step()
            sync()
        wall = (time.time() - t0) / 2
        events = [e for e in prof.key_averages() if getattr(e, attr) > 0]
        total = sum(getattr(e, attr) for e in events) or 1.0
        share = lambda names: sum(getattr(e, attr) for e in events if e.key in names) / total  # noqa: E731
        top = sorted(events, key=lambda e: -getattr(e, attr))[:15]
        rep.log(prof.key_averages().table(sort_by=attr.replace("device", "cuda") if cuda else attr, row_limit=40))
        rep.rows(
            f"profile: {size} {objective} step ({'bf16' if cuda else 'CPU'}), top kernels by {kind} time",
            ["kernel", "class", "share", "ms per step"],
            [
                [
                    e.key[:80].replace("|", "/"),
                    next((c for c, n in KERNEL_CLASSES.items() if e.key in n), "other"),
                    f"{getattr(e, attr) / total:.1%}",
                    f"{getattr(e, attr) / 2e3:.2f}",
                ]
                for e in top
            ],
        )
        mfu = 6 * step.n_params * step.tokens / wall / (H100_BF16_TFLOPS * 1e12)
        rows_all.append(
            [objective, f"{total / 2e3:.1f}", f"{1000 * wall:.1f}", f"{total / 2e3 / (1000 * wall):.0%}", f"{mfu:.1%}"]
            + [f"{share(n):.1%}" for n in KERNEL_CLASSES.values()]
        )
    rep.rows(
        f"profile: shares of a {size} training step ({'bf16' if cuda else 'CPU'}; kernel time summed over every "
        "kernel, against the profiled step's wall time: what the host leaves uncovered)",
        ["objective", f"{kind} ms per step (all kernels)", "wall ms per step", "kernels / wall", "MFU (6 N tokens)"]
        + list(KERNEL_CLASSES),
        rows_all,
    )
