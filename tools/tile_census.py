"""Which loop of the dK/dV kernel each tile of a training step runs in, counted on the CPU.

    python -m tools.tile_census --json results/aot/census-base.json     # bench_step's base PMLM and seq2seq steps

The step's micro-batches are bench_step's (bench/bench_step.py batches_and_model, the same
defaults). For each, the rule of kernels/reference.py classifies every (query tile, key tile) pair
at the dK/dV kernel's CUDA blocks (kernels/tilemap.py reference_classes, attention_plan.CUDA_CONFIGS),
and each key tile's program is marked as `_bwd_kv_kernel` marks it: its keys run when their live
keys' positions are k0, k0 + 1, ... (kernels/attention_backward.py). Each visited tile is then one
iteration of one loop: FAR, FULL, GATHER, PARTIAL or EDGE, and for a program whose keys do not run
PARTIAL atomic or EDGE atomic. GATHER and the two atomic copies add the bias table's gradient pair by
pair by atomics; the others sum it in registers (module docstring there). With the windows off
(attention_plan.Tuning.grad_windows) there is one PARTIAL and one EDGE loop, and every loop but FAR
adds it pair by pair.

Weighted by one iteration's SASS instructions and atomic adds of each loop, compiled for sm_90a
(`--aot`, tools/aot_tables.py backward_table; the compile case the step launches, rel_fused at D 64,
and rel_fused_atomics for the windows off), the counts give what a step's dK/dV kernel issues per
thread and adds to global memory both ways, and which share the per-pair atomics' loops take: a
proxy of where its time goes, read without a GPU. The metadata is the same in every layer and head,
so the counts are per (layer, head).
"""

import argparse
import json
import sys
from collections import Counter

import torch

from kernels import reference
from kernels.attention_plan import TUNING
from kernels.tilemap import EMPTY, FAR, FULL, GATHER, PARTIAL, reference_classes

CLASS_LOOPS = {FULL: "FULL", FAR: "FAR", GATHER: "GATHER"}
PER_PAIR = ("GATHER", "PARTIAL atomic", "EDGE atomic")  # the loops that add the table's gradient by atomics
CASES = {True: "rel_fused-bfloat16-d64", False: "rel_fused_atomics-bfloat16-d64"}  # windows -> its compile case


def loops_of(see, pos, valid, BM, BN, max_dist, windows=True):
    """{loop name: iterations} of the dK/dV kernel over one micro-batch, and (programs, of
    which their keys run). see: (B, Lq, Lk) visibility; pos, valid: (B, Lk) key positions and
    validity (self-attention: queries share them)."""
    B, Lq, Lk = see.shape
    cls, _ = reference_classes(see, BM, BN, pos, pos, max_dist)  # (B, n_qt, n_kt)
    n_qt, n_kt = cls.shape[1:]
    kp = torch.zeros(B, n_kt * BN, dtype=torch.long)
    kp[:, :Lk] = pos
    live = torch.zeros(B, n_kt * BN, dtype=torch.bool)
    live[:, :Lk] = valid
    run = (kp - torch.arange(n_kt * BN) % BN).view(B, n_kt, BN)
    live = live.view(B, n_kt, BN)
    big = torch.iinfo(torch.long).max
    hi = torch.where(live, run, -big).amax(2)
    lo = torch.where(live, run, big).amin(2)
    runs = (hi == lo) & windows  # (B, n_kt): no live key counts as running (no tile to visit)
    loops = Counter()
    edge_tail = Lq % BM != 0
    for b in range(B):
        for kt in range(n_kt):
            col = cls[b, :, kt]
            for c, name in CLASS_LOOPS.items():
                loops[name] += int((col == c).sum())
            part = (col == PARTIAL).nonzero().flatten()
            suffix = "" if bool(runs[b, kt]) or not windows else " atomic"  # one copy with no windows
            edge = int(len(part) > 0 and int(part[-1]) == n_qt - 1 and edge_tail)
            loops["PARTIAL" + suffix] += len(part) - edge
            loops["EDGE" + suffix] += edge
    assert int((cls != EMPTY).sum()) == sum(loops.values())
    return {n: k for n, k in loops.items() if k}, (B * n_kt, int(runs.sum()))


def step_census(objective, model="base", windows=True):
    """The census of bench_step's step for `objective` (pmlm or s2s) at the CUDA blocks of the
    model's head dim, the table's gradient by windows or not: per loop its iterations (per layer and
    head), and the programs."""
    from bench.bench_step import batches_and_model, get_args

    args = get_args(["--model", model, "--objective", objective, "--methods", "reference"])
    micro, _, cfg = batches_and_model(args, torch.device("cpu"))
    D = cfg.head_dim
    tuning = TUNING._replace(grad_windows=windows)
    blocks = tuning.config(torch.device("cuda"), D)  # the blocks a launch on a GPU runs (no GPU needed to read them)
    loops, programs, running, tokens = Counter(), 0, 0, 0
    for batch in micro:
        see = reference.visible(batch.kind, batch.step, batch.kind, batch.step, batch.valid)
        got, (n, r) = loops_of(
            see,
            batch.pos,
            batch.valid,
            blocks.BMK,
            blocks.BNK,
            cfg.rel_max_distance,
            tuning.windows(D),
        )
        loops.update(got)
        programs, running, tokens = programs + n, running + r, tokens + int(batch.n_tokens)
    return dict(
        objective=objective,
        model=model,
        windows=windows,
        head_dim=D,
        tile=[blocks.BMK, blocks.BNK],
        micro_batches=len(micro),
        shapes=[list(b.tokens.shape) for b in micro],
        tokens=tokens,
        programs=programs,
        running_programs=running,
        iterations=dict(loops),
    )


def weigh(census, loops):
    """The census weighted by one iteration of each loop (backward_table's row `loops`): SASS
    instructions a thread and atomic elements, in all and in the per-pair atomics' loops."""
    it = census["iterations"]
    per_pair = PER_PAIR if census["windows"] else tuple(n for n in it if n != "FAR")
    sass = {n: k * loops[n]["instructions"] for n, k in it.items()}
    atomics = {n: k * loops[n]["atomics"] for n, k in it.items()}
    every = sum(it.values())
    return dict(
        per_pair_iterations=sum(it.get(n, 0) for n in per_pair) / every,
        sass=sum(sass.values()),
        per_pair_sass=sum(sass.get(n, 0) for n in per_pair) / sum(sass.values()),
        atomic_elements=sum(atomics.values()),
        per_pair_atomic_elements=sum(atomics.get(n, 0) for n in per_pair) / max(1, sum(atomics.values())),
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="base", help="preset (core/config.py), as bench_step's --model")
    p.add_argument("--objectives", default="pmlm,s2s", help="bench_step's --objective values, comma-separated")
    p.add_argument("--aot", default="results/aot/sm90a-triton-3.9.json", help="python -m tools.aot --json's record")
    p.add_argument("--json", default=None, help="write the census here")
    args = p.parse_args(argv)
    from tools import aot_tables

    with open(args.aot) as f:
        _, table = aot_tables.backward_table(json.load(f))
    kv = {r["case"]: r for r in table if r["kernel"] == "_bwd_kv_kernel"}
    missing = [c for c in CASES.values() if c not in kv]
    if missing:
        sys.exit(f"error: {args.aot} has no _bwd_kv_kernel row for case {', '.join(missing)}")
    out = []
    for objective in args.objectives.split(","):
        for windows, case in CASES.items():
            c = step_census(objective, args.model, windows)
            lacking = set(c["iterations"]) - set(kv[case]["loops"])
            if lacking:
                sys.exit(f"error: {case} in {args.aot} has no loop {sorted(lacking)}, which the step runs")
            c.update(weigh(c, kv[case]["loops"]), case=case)
            out.append(c)
            loops = ", ".join(f"{n} {k}" for n, k in sorted(c["iterations"].items()))
            print(
                f"{args.model} {objective}, {'windows' if windows else 'no windows'} ({case}): "
                f"{c['micro_batches']} micro-batches, {c['programs']} dK/dV programs a head, "
                f"{c['running_programs']} whose keys run; iterations: {loops}; {c['sass']:,} SASS a thread, "
                f"{c['atomic_elements']:,} atomic elements; per-pair atomics' loops take "
                f"{c['per_pair_iterations']:.1%} of the iterations, {c['per_pair_sass']:.1%} of the SASS and "
                f"{c['per_pair_atomic_elements']:.1%} of the atomic adds"
            )
    if args.json:
        from tools import records

        loops = [n for n in aot_tables.ALL_LOOP_NAMES if any(n in c["iterations"] for c in out)]
        rows_out = [dict(c, **{"it " + n: c["iterations"].get(n, 0) for n in loops}) for c in out]
        for c in rows_out:
            c["gradient"] = "by windows where keys run" if c["windows"] else "by atomics"
        columns = (
            [("step", "objective", "{}"), ("table's gradient", "gradient", "{}"), ("tokens", "tokens", "{:,}")]
            + [("dK/dV programs a head", "programs", "{:,}"), ("of which by windows", "running_programs", "{:,}")]
            + [(f"{n} iterations", "it " + n, "{:,}") for n in loops]
            + [("SASS issued a thread", "sass", "{:,}"), ("atomic elements", "atomic_elements", "{:,}")]
            + [
                ("per-pair loops' share of iterations", "per_pair_iterations", "{:.1%}"),
                ("of SASS", "per_pair_sass", "{:.1%}"),
                ("of atomic adds", "per_pair_atomic_elements", "{:.1%}"),
            ]
        )
        note = (
            f"Counts per layer and head of bench_step's `{args.model}` steps, at the dK/dV kernel's CUDA tile "
            f"(query rows x keys) {out[0]['tile'][0]} x {out[0]['tile'][1]}, in {out[0]['micro_batches']} and "
            f"{out[-1]['micro_batches']} micro-batches; weighted by one iteration of each loop of `{CASES[True]}` "
            f"(by windows) and `{CASES[False]}` (by atomics) in {args.aot}."
        )
        records.write(
            args.json,
            ["python", "-m", "tools.tile_census"] + list(argv if argv is not None else sys.argv[1:]),
            columns,
            rows_out,
            note=note,
        )


if __name__ == "__main__":
    main()
