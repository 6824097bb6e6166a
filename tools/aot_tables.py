"""The tables of tools/aot.py's rows, each compiled launch as the compiler left it: per kernel
(registers, spills, shared memory, wgmma, SASS per loop), per tile-class loop of the attention
kernels against the plain FlashAttention loop of the same blocks (`--loops`; docs/kernels.md renders
it), and the dK/dV kernel's wgmma and atomics per iteration (backward_table). Reading, not
compiling: a test process imports this with the Triton interpreter on."""


def table(rows):
    head = (
        "| kernel | cases | warps | stages | registers | spill st/ld | shared B | wgmma / mma.sync | "
        "SASS per loop iteration | compiles |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        cases = r["cases"][0] + (f" (+{len(r['cases']) - 1} same binary)" if len(r["cases"]) > 1 else "")
        if not r["compiles"]:
            lines.append(
                f"| {r['module']}.{r['kernel']} | {cases} | {r['num_warps']} | {r['num_stages']} |  |  |  |  "
                "| "
                f" | NO: {[l for l in r['error'].splitlines() if l.strip()][-1][:160]} |"
            )
            continue
        lines.append(
            f"| {r['module']}.{r['kernel']} | {cases} | {r['num_warps']} | {r['num_stages']} | "
            f"{r['registers']} | "
            f"{r['spill_stores']}/{r['spill_loads']} | {r['shared']} | {r['wgmma']} / {r['mma_sync']} | "
            f"{', '.join(map(str, r['loops']))} | yes |"
        )
    return "\n".join(lines)


LOOP_NAMES = {True: ("FAR", "FULL", "GATHER", "PARTIAL", "EDGE"), False: ("FULL", "PARTIAL", "EDGE")}
# the dK/dV kernel's second PARTIAL and EDGE loops where it sums the table's gradient by windows
# (kernels/attention_backward.py): those of the programs whose keys do not run, adding it by atomics;
# PARTIAL and EDGE are then the windows' loops
ATOMIC_NAMES = ("PARTIAL atomic", "EDGE atomic")
ALL_LOOP_NAMES = LOOP_NAMES[True] + ATOMIC_NAMES  # the columns of the loop tables, in this order
# the compile cases with a relative bias
REL_CASES = ("rel", "rel_frozen", "rel_fused", "rel_fused_atomics", "seq", "decode", "cross")


def loop_names(row):
    """The tile class of each loop of a compiled attention kernel's row, in address order (the order
    of its source: one loop per class, kernels/tilemap.py), or None where the loops are not those of
    its case. A dK/dV kernel with two more loops than its classes has FAR, FULL and GATHER, then
    PARTIAL and EDGE twice: the copies that group the table's gradient by windows (the wgmma of its
    FULL loop, which sums by windows too) are PARTIAL and EDGE, the copies with the GATHER loop's
    wgmma (each pair by an atomic) PARTIAL atomic and EDGE atomic, each pair in address order."""
    rel = row["cases"][0].split("-")[0] in REL_CASES
    names, n = LOOP_NAMES[rel], len(row["loops"])
    if n == len(names):
        return names
    if not (rel and row["kernel"] == "_bwd_kv_kernel" and n == len(names) + 2 and row.get("loop_wgmma")):
        return None
    wgmma = [sum(w.values()) for w in row["loop_wgmma"]]
    full, gather = wgmma[names.index("FULL")], wgmma[names.index("GATHER")]
    windows = [i for i in range(3, n) if wgmma[i] == full]
    atomic = [i for i in range(3, n) if wgmma[i] == gather]
    if full == gather or len(windows) != 2 or len(atomic) != 2:
        return None
    out = list(names[:3]) + [None] * 4
    for i, name in zip(windows + atomic, ("PARTIAL", "EDGE") + ATOMIC_NAMES):
        out[i] = name
    return tuple(out)


def loop_table(rows):
    """Per attention kernel and case, the SASS instructions per iteration of each class's loop
    (kernels/tilemap.py) against the plain FlashAttention loop compiled with the forward's blocks,
    warps and stages: what the tile lists, the rule and the bias cost per tile."""
    plain = {
        c[-3:]: r["loops"][0]
        for r in rows
        if r["kernel"] == "_plain_flash_fwd" and r["compiles"] and r["loops"]
        for c in r["cases"]
    }
    lines = [
        "| kernel | case | registers | wgmma serialised | "
        + " | ".join(f"{n} (x plain)" for n in ALL_LOOP_NAMES)
        + " |",
        "|" + "---|" * (4 + len(ALL_LOOP_NAMES)),
    ]
    out = []
    for r in rows:
        if r["module"] != "pseudo_attention" or not r["compiles"] or r["kernel"] == "_delta_kernel":
            continue
        case = r["cases"][0]
        names = loop_names(r)
        if names is None:
            continue
        base = plain.get(case[-3:])
        cells = dict(zip(names, r["loops"]))
        row = dict(
            kernel=r["kernel"],
            case=case,
            registers=r["registers"],
            serialized=r.get("wgmma_serialized"),
            loops=cells,
            plain=base,
        )
        out.append(row)
        ratio = lambda n: (
            "-"
            if n not in cells
            else (f"{cells[n]} ({cells[n] / base:.2f})" if base and r["kernel"] == "_fwd_kernel" else str(cells[n]))
        )  # noqa: E731
        lines.append(
            f"| {r['kernel']} | {case} | {r['registers']} | {'YES' if row['serialized'] else 'no'} | "
            + " | ".join(ratio(n) for n in ALL_LOOP_NAMES)
            + " |"
        )
    lines.append("plain FlashAttention loop: " + ", ".join(f"{d}: {n}" for d, n in sorted(plain.items())))
    return "\n".join(lines), out


# an H100's / H200's SM: 64K 32-bit registers, allocated per warp in units of 256; 228 KB of shared
# memory, of which a program gets what it asks plus 1 KB; at most 64 warps
SM_REGISTERS, SM_SHARED, BLOCK_RESERVED, SM_WARPS = 65536, 233472, 1024, 64


def programs_per_sm(row):
    """How many programs of a compiled kernel fit on one SM at once, by registers, shared memory and warps."""
    per_warp = -(-row["registers"] * 32 // 256) * 256
    by_registers = (SM_REGISTERS // per_warp) // row["num_warps"]
    return min(by_registers, SM_SHARED // (row["shared"] + BLOCK_RESERVED), SM_WARPS // row["num_warps"])


def wgmma_macs(shapes, num_warps):
    """Multiply-adds of a loop iteration's wgmma ({'64x32x16': count}): each is issued by every warpgroup."""
    macs = 0
    for shape, n in shapes.items():
        m, k_n, k = (int(x) for x in shape.split("x"))
        macs += n * m * k_n * k
    return macs * (num_warps // 4)


def backward_table(rows):
    """Per dK/dV kernel (ours and the plain FlashAttention-2 yardstick, tools/aot_cases.py) and case:
    registers, spills, shared memory, programs an SM, and per loop iteration (one tile) of each class
    the SASS instructions, the wgmma, and the atomic adds to global memory in elements per tile
    (elements a thread x threads; both branches of an if counted)."""
    lines = [
        "| kernel | case | warps | registers | spill B | shared B | programs / SM | loop: instructions, "
        "wgmma, atomic elements per tile |",
        "|" + "---|" * 8,
    ]
    out = []
    for r in rows:
        if not r["compiles"] or r["kernel"] not in ("_bwd_kv_kernel", "_plain_flash_bwd"):
            continue
        case = r["cases"][0]
        names = ("plain",) if r["kernel"] == "_plain_flash_bwd" else loop_names(r)
        if names is None or len(r["loops"]) != len(names):
            continue
        threads = 32 * r["num_warps"]
        loops = {
            n: dict(instructions=i, wgmma=sum(w.values()), wgmma_shapes=w, atomics=a * threads)
            for n, i, w, a in zip(names, r["loops"], r["loop_wgmma"], r["loop_atomics"])
        }
        row = dict(
            kernel=r["kernel"],
            case=case,
            blocks=r.get("blocks"),
            num_warps=r["num_warps"],
            registers=r["registers"],
            spill=r["spill_stores"],
            shared=r["shared"],
            programs_per_sm=programs_per_sm(r),
            loops=loops,
        )
        out.append(row)
        shapes = lambda l: "+".join(f"{c}x{s}" for s, c in l["wgmma_shapes"].items())  # noqa: E731
        cells = "; ".join(
            f"{n} {l['instructions']}, {l['wgmma']} ({shapes(l)}), {l['atomics']}" for n, l in loops.items()
        )
        lines.append(
            f"| {r['kernel']} | {case} | {r['num_warps']} | {r['registers']} | {r['spill_stores']} | "
            f"{r['shared']} | {row['programs_per_sm']} | {cells} |"
        )
    return "\n".join(lines), out
