"""Ahead-of-time compile of every Triton kernel in kernels/ for an H100 (sm_90a), with no GPU.

    python -m tools.aot                   # the table: kernel, case, registers, spills, shared memory, wgmma
    python -m tools.aot --loops           # and the SASS per loop iteration of each tile class vs plain FlashAttention
    python -m tools.aot --json out.json --only pseudo_attention
    python -m tools.aot --only pseudo_attention --cases '^rel-bfloat16-d64$' --config 64=64,64,4,3,32,128,8,3,4,3
    python -m tools.aot --only pseudo_attention,yardstick --kernels 'bwd' --loops   # the backward table

The Triton interpreter (how the tests run the kernels on a CPU) accepts code that the GPU compiler
refuses, such as a non-constexpr global read inside a kernel. This runs the real compiler instead:
Triton's frontend, its NVIDIA backend and ptxas (shipped in the triton wheel) need no GPU.

How a launch is made faithful: tools/aot_cases.py gives each kernel module a list of (name, thunk);
each thunk calls the module's own launchers on CPU tensors shaped like a real launch, with the
block sizes, warps and stages the launcher picks for a CUDA device. While a thunk runs, the `.run`
of each @triton.jit kernel of the module is replaced by a recorder, so nothing executes; the recorded
arguments then go through Triton's own binder (the signature, constexprs and the divisibility-by-16
attributes a launch would specialise on) and triton.compile for GPUTarget("cuda", 90, 32).
Registers, spills and whether ptxas serialised the wgmma instructions (its C7515 note: every wgmma
then waits for the one before) come from the log of the `ptxas -v` run inside triton.compile, the one
that made the cubin whose SASS is read (compiled anew, not taken from Triton's cache, which keeps no
log); wgmma from the PTX text.
The tables it prints (and docs/kernels.md renders) are tools/aot_tables.py's.
Runs with TRITON_INTERPRET unset (run as a script, this module unsets it before importing triton;
imported, it leaves the environment alone, so that `loop_table` can be read in a test process).
"""

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # the real compiler, not the interpreter; imported (tests), it changes nothing
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from tools.aot_tables import backward_table, loop_table, table  # noqa: E402


TARGET = GPUTarget("cuda", 90, 32)
MODULES = (
    "pseudo_attention",
    "tilemap",
    "early_exit",
    "offramp_loss",
    "yardstick",
)  # the yardstick: tools/aot_cases.py


def _compile_logged(src, options):
    """triton.compile for TARGET, and the log of the `ptxas -v` run that made its cubin: compiled anew
    (a kernel from Triton's cache comes without one), the log taken from what Triton prints of it."""
    from triton import knobs

    out = io.StringIO()
    with knobs.compilation.scope(), knobs.nvidia.scope(), contextlib.redirect_stdout(out):
        knobs.compilation.always_compile = True
        knobs.nvidia.dump_ptxas_log = True
        ck = triton.compile(src, target=TARGET, options=options)
    log = out.getvalue()
    if "Used " not in log:
        raise RuntimeError(f"triton.compile printed no ptxas log to read registers from: {log[-500:]!r}")
    return ck, log


# -----------------------------------------------------------------------------
# capture: run a module's thunks with every kernel's launch recorded instead of executed


def capture(name, cases=None, tuning=None):
    """[(case, kernel name, args, kwargs)] for every launch of the compile cases of module `name`
    (tools/aot_cases.py) whose case name matches the regular expression `cases` (all by default), the
    attention's launched as `tuning` says (kernels/attention_plan.Tuning; None: the default)."""
    from tools import aot_cases

    module = importlib.import_module(aot_cases.HOME[name])
    kernels = {n: f for n, f in vars(module).items() if isinstance(f, JITFunction)}
    launches, current = [], [None]

    def recorder(kernel):
        def run(*args, grid, warmup, **kwargs):
            launches.append((current[0], kernel, args, kwargs))

        return run

    for kernel, f in kernels.items():
        f.run = recorder(kernel)
    try:
        for case, thunk in aot_cases.cases(name, tuning):
            if cases and not re.search(cases, case):
                continue
            current[0] = case
            thunk()
    finally:
        for f in kernels.values():
            del f.run
    return launches


def _key(fn, args, kwargs):
    """What makes two launches compile to the same binary: the kernel, tensor dtypes, the
    specialisations of scalars (none for do_not_specialize parameters) and the constexprs."""
    fixed = {p.num for p in fn.params if p.do_not_specialize}

    def one(i, a):
        if i in fixed:
            return ("any",)
        if isinstance(a, tuple):  # a NamedTuple of tensors and scalars (kernels/attention_plan.py)
            return tuple(one(None, x) for x in a)
        if isinstance(a, torch.Tensor):
            return ("t", str(a.dtype))
        if isinstance(a, int):
            return ("i", a == 1, a % 16 == 0, a >= 2**31)
        return ("v", repr(a))

    return (
        fn.__name__,
        tuple(one(i, a) for i, a in enumerate(args)),
        tuple(sorted((k, repr(v)) for k, v in kwargs.items())),
    )


# -----------------------------------------------------------------------------
# compile one launch


def compile_launch(module_name, kernel, args, kwargs):
    """Compile one recorded launch; returns its row of the table (no exception escapes)."""
    from tools.aot_cases import HOME

    fn = getattr(importlib.import_module(HOME[module_name]), kernel)
    backend = make_backend(TARGET)
    flags = kwargs.get("F")  # the attention kernels' constexprs (kernels/attention_plan.Flags)
    blocks = (flags.BM, flags.BN) if flags is not None else (kwargs.get("BM"), kwargs.get("BN"))
    row = dict(
        module=module_name,
        kernel=kernel,
        num_warps=kwargs.get("num_warps", 4),
        num_stages=kwargs.get("num_stages", 3),
        blocks=blocks if None not in blocks else None,
    )
    try:
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        kw = dict(kwargs, debug=False)
        bound, specialization, options = binder(*args, **kw)
        options, signature, constexprs, attrs = fn._pack_args(backend, kw, bound, specialization, options)
        ck, log = _compile_logged(ASTSource(fn, signature, constexprs, attrs), options.__dict__)
    except Exception as e:  # noqa: BLE001 - the error is the result
        row.update(compiles=False, error=f"{type(e).__name__}: {e}"[:2000])
        return row
    ptx = ck.asm["ptx"]
    serialized = "C7515" in log or "wgmma.mma_async instructions are serialized" in log
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    row.update(
        compiles=True,
        registers=int(regs.group(1)) if regs else None,
        spill_stores=int(spill.group(1)) if spill else None,
        spill_loads=int(spill.group(2)) if spill else None,
        shared=ck.metadata.shared,
        wgmma=len(re.findall(r"wgmma\.mma_async", ptx)),
        mma_sync=len(re.findall(r"\bmma\.sync", ptx)),
        wgmma_serialized=serialized,
        **_loops(ck.asm["cubin"]),
    )
    return row


def _loops(cubin):
    found = sass_loops(cubin)
    return dict(
        loops=[l["instructions"] for l in found],
        loop_waits=[l["min_wait"] for l in found],
        loop_wgmma=[l["wgmma"] for l in found],
        loop_atomics=[l["atomics"] for l in found],
    )


def sass_loops(cubin):
    """The loops of a compiled kernel's SASS, in address order: a loop is a backward branch (BRA to a
    lower address) and the instructions from its target to it. Per loop: instructions, the fewest
    copy groups left in flight at a wait, wgmma (HGMMA) by shape, and atomic adds to global memory in
    elements per thread (REDG/ATOMG, F32x4 counting 4): both branches of an if count."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True).stdout
    code = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    loops = []
    for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", sass):
        here = int(m.group(1), 16)
        target = m.group(2)
        if target is None:  # a label: find its address
            label = re.search(r"`\((\.L_x_\d+)\)", m.group(0)).group(1)
            at = re.search(re.escape(label) + r":\s*\n\s*/\*([0-9a-f]{4,})\*/", sass)
            if not at:
                continue
            target = at.group(1)
        start = int(target, 16)
        if start < here:
            body = [text for addr, text in code if start <= addr <= here]
            # cp.async waits in the loop: DEPBAR.LE SB0, N lets the N most recent copy groups stay in
            # flight; N = 0 waits for every outstanding copy, the next tiles' included
            waits = [int(w.group(1), 16) for w in (re.search(r"DEPBAR\.LE SB0, (0x[0-9a-f]+)", t) for t in body) if w]
            shapes = {}
            for t in body:
                g = re.search(r"\bHGMMA\.(\d+x\d+x\d+)", t)
                if g:
                    shapes[g.group(1)] = shapes.get(g.group(1), 0) + 1
            atomics = sum(
                int(a.group(1) or 1)
                for a in (re.search(r"\b(?:REDG|ATOMG)\.[\w.]*?F32(?:x(\d))?\b", t) for t in body)
                if a
            )
            loops.append(
                dict(
                    start=start,
                    instructions=(here - start) // 16 + 1,
                    min_wait=min(waits, default=None),
                    wgmma=shapes,
                    atomics=atomics,
                )
            )
    return sorted(loops, key=lambda l: l["start"])


def _compile_job(job):
    module_name, kernel, args, kwargs, cases = job
    row = compile_launch(module_name, kernel, args, kwargs)
    row["cases"] = cases
    return row


def compile_all(modules=MODULES, workers=2, cases=None, kernels=None, tuning=None):
    """Rows of the table for every distinct launch of every module that exists (of the kernels whose
    name matches the regular expression `kernels`, all by default), the attention's as `tuning` says."""
    from tools.aot_cases import HOME

    jobs = {}
    for name in modules:
        module = importlib.import_module(HOME[name])
        for case, kernel, args, kwargs in capture(name, cases, tuning):
            if kernels and not re.search(kernels, kernel):
                continue
            key = (name, _key(getattr(module, kernel), args, kwargs))
            if key not in jobs:
                jobs[key] = [name, kernel, args, kwargs, []]
            jobs[key][4].append(case)
    jobs = [tuple(j) for j in jobs.values()]
    if workers <= 1:
        return [_compile_job(j) for j in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(_compile_job, jobs))


def record_side(path, side, rows, command, commit=None):
    """Keep `rows` under `side` in the before/after record at `path`, with the command, the commit
    (of the working tree, `git describe --dirty`, unless given) and the Triton version."""
    if commit is None:
        r = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        commit = r.stdout.strip() or "unknown"
    record = {}
    if os.path.exists(path):
        with open(path) as f:
            record = json.load(f)
    record[side] = dict(command=command, commit=commit, triton=triton.__version__, rows=rows)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)


def get_args(argv=None):
    """The flags, each refused in one line; --config read into `tuning` (an attention_plan.Tuning)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(MODULES), help="comma-separated kernel modules of kernels/")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    p.add_argument(
        "--side",
        default=None,
        help="with --json: keep the rows under this name in the file, beside the other sides it holds "
        "(a before/after record: {side: {command, commit, triton, rows}})",
    )
    p.add_argument("--workers", type=int, default=2, help="compiles in parallel")
    p.add_argument("--cases", default=None, help="only the cases whose name matches this regular expression")
    p.add_argument("--kernels", default=None, help="only the kernels whose name matches this regular expression")
    p.add_argument(
        "--loops",
        action="store_true",
        help="also print the SASS per loop iteration of each tile class against plain FlashAttention",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="D=BM,BN,...",
        help="compile the attention kernels of head dim D with this launch configuration "
        "(kernels/attention_plan.Config's ten fields) instead of CUDA_CONFIGS': a sweep's candidate",
    )
    a = p.parse_args(argv)
    from kernels import attention_plan

    a.tuning = attention_plan.TUNING
    for text in a.config:
        try:
            D, fields = text.split("=")
            a.tuning = a.tuning.with_config(int(D), attention_plan.Config(*(int(x) for x in fields.split(","))))
        except (ValueError, TypeError) as e:
            p.error(
                f"--config {text}: not D=BM,BN,fwd_warps,fwd_stages,BMK,BNK,kv_warps,kv_stages,dq_warps,dq_stages ({e})"
            )
    unknown = [m for m in a.only.split(",") if m not in MODULES]
    if unknown:
        p.error(
            f"--only {a.only}: no compile cases in {', '.join(unknown)} (the modules with cases: {', '.join(MODULES)})"
        )
    for flag, value in (("--cases", a.cases), ("--kernels", a.kernels)):
        try:
            re.compile(value or "")
        except re.error as e:
            p.error(f"{flag} {value!r} is not a regular expression ({e})")
    if a.side and not a.json:
        p.error("--side names where the rows go in the --json file: give --json too")
    if a.workers < 1:
        p.error("--workers must be at least 1")
    if a.json:  # checked before the compile, which takes minutes
        from core.guards import unwritable

        if unwritable(a.json, "--json"):
            p.error(unwritable(a.json, "--json"))
    return a


def main(argv=None):
    a = get_args(argv)
    t0 = time.time()
    rows = compile_all(tuple(a.only.split(",")), a.workers, a.cases, a.kernels, a.tuning)
    if not rows:
        print(
            f"error: no compile case matched (--only {a.only}" + (f", --cases {a.cases!r}" if a.cases else "") + ")",
            file=sys.stderr,
        )
        return 2
    print(table(rows))
    if a.loops:
        print()
        print(loop_table(rows)[0])
        print()
        print(backward_table(rows)[0])
    bad = [r for r in rows if not r["compiles"] or r["spill_stores"]]
    print(
        f"{len(rows)} distinct kernels compiled for sm_{TARGET.arch}a in {time.time() - t0:.0f}s with triton "
        f"{triton.__version__}; {sum(not r['compiles'] for r in rows)} failed, "
        f"{sum(bool(r.get('spill_stores')) for r in rows)} spill, "
        f"{sum(bool(r.get('wgmma_serialized')) for r in rows)} with wgmma serialised by ptxas"
    )
    if a.json and a.side:
        record_side(a.json, a.side, rows, "python -m tools.aot " + " ".join(sys.argv[1:] if argv is None else argv))
    elif a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
