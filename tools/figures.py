"""The figures of the docs, drawn from committed result files by `python -m tools.render_docs`.

matplotlib is needed by this command only, not by the project (`pip install -r requirements-docs.txt`);
each figure is a deterministic SVG in docs/figures/, so that a redraw of the same data changes no
byte. With DRAW off (`render_docs --check`) nothing is drawn: a block's line is checked and its
figure must exist.
"""

import glob
import json
import os

from core.data import held_out_key
from reproduce.orderings import parse_chain
from reproduce.plan import BY_NAME, MASK_SWEEP

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(path):
    """A result file's JSON, or one `error:` line naming the file and what is wrong with it."""
    try:
        with open(os.path.join(ROOT, path)) as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"error: {path} is not a readable JSON result file ({e})") from None
    return data


def _jsonl(path):
    """The records of a JSONL log, or one `error:` line naming the file and the line that is not one."""
    rows = []
    try:
        with open(os.path.join(ROOT, path)) as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    rows.append(json.loads(line))
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: {path} cannot be read ({e})") from None
    except json.JSONDecodeError:
        raise SystemExit(f"error: {path} line {i} is not a JSON record") from None
    return rows


def held_out(path):
    """(the held-out records of a pretraining log, the key of the loss it is judged by), or one
    `error:` line where it has none."""
    evals = [r for r in _jsonl(path) if "unigram_entropy" in r]
    if not evals:
        raise SystemExit(
            f"error: {path} holds no held-out record (train.py writes one every --eval-every steps): "
            f"not a finished pretraining's log"
        )
    try:
        return evals, held_out_key(evals[-1], path)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


FIGURES = "docs/figures"
DRAW = {"on": True}  # --check draws nothing: it checks that each figure was drawn from the data as it is


def data_digest(path):
    """The SHA-1 of the data a figure is drawn from: a file's bytes, or a folder's files' names and bytes."""
    import hashlib

    full = os.path.join(ROOT, path.split("::")[0])
    files = [full] if os.path.isfile(full) else sorted(os.path.join(d, f) for d, _, fs in os.walk(full) for f in fs)
    h = hashlib.sha1()
    for f in files:
        h.update(os.path.relpath(f, full).encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def _figure(path, where, name, draw):
    """Draw figure NAME from the result file PATH (draw(plt, data_path) -> fig) unless checking, and
    return its markdown line, relative to the doc WHERE. The SVG carries the digest of the data it
    was drawn from; --check refuses a figure whose data has changed since."""
    out = os.path.join(ROOT, FIGURES, name + ".svg")
    digest = data_digest(path)
    if not DRAW["on"]:
        if not os.path.exists(out):
            raise SystemExit(f"error: {where}: figure {FIGURES}/{name}.svg is missing: run python -m tools.render_docs")
        with open(out) as f:
            if f"data sha1 {digest}" not in f.read():
                raise SystemExit(
                    f"error: {where}: figure {FIGURES}/{name}.svg was drawn from other data than {path} "
                    f"holds now: run python -m tools.render_docs"
                )
    else:
        try:
            import matplotlib
        except ImportError:
            raise SystemExit(
                "error: drawing the figures needs matplotlib (pip install matplotlib); --check does not"
            ) from None
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.rcParams.update({"svg.hashsalt": "textgen", "svg.fonttype": "none", "font.size": 9})
        fig = draw(plt, path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        fig.savefig(
            out,
            format="svg",
            bbox_inches="tight",
            metadata={"Date": None, "Creator": None, "Description": f"drawn from {path}, data sha1 {digest}"},
        )
        plt.close(fig)
    rel = os.path.relpath(out, os.path.dirname(os.path.join(ROOT, where)))
    return f"![{name}]({rel})\n\n(`{FIGURES}/{name}.svg`, drawn from `{path}`.)\n"


def _draw_pretraining(plt, path):
    rows = _jsonl(path)
    evals, key = held_out(path)
    train_key = key[6:]  # the same loss on the training batches
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    train = [r for r in rows if train_key in r and "unigram_entropy" not in r]
    if train:
        ax.plot(
            [r["step"] for r in train],
            [r[train_key] for r in train],
            color="0.65",
            lw=1,
            label=f"training batches ({train_key})",
        )
    ax.plot([r["step"] for r in evals], [r[key] for r in evals], "o-", color="C0", label=f"held-out ({train_key})")
    ax.axhline(
        evals[-1]["unigram_entropy"], ls="--", color="C3", label=f"unigram entropy {evals[-1]['unigram_entropy']:.3f}"
    )
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(f"{os.path.basename(path).split('-log')[0]}: loss against the unigram entropy", fontsize=9)
    ax.legend(frameon=False, loc="lower left", fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def _draw_pretrainings(plt, folder):
    """Every pretraining log of a folder on one axis: held-out loss against step, the unigram line."""
    import glob

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    entropy = None
    for i, path in enumerate(sorted(glob.glob(os.path.join(ROOT, folder, "*-log.jsonl")))):
        rel = os.path.relpath(path, ROOT)
        evals, key = held_out(rel)
        entropy = evals[-1]["unigram_entropy"]
        ax.plot(
            [r["step"] for r in evals],
            [r[key] for r in evals],
            "o-",
            ms=2.5,
            lw=1.2,
            color=f"C{i % 10}",
            label=f"{os.path.basename(path).split('-log')[0]} ({key[6:]})",
        )
    if entropy is not None:
        ax.axhline(entropy, ls="--", color="k", lw=0.9, label=f"unigram entropy {entropy:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out loss (nats per token)")
    ax.set_title("The pretrainings: held-out loss against the unigram entropy", fontsize=9)
    ax.legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    return fig


def plot_pretrainings(folder, where):
    """Every pretraining of a folder of logs, held-out losses on one axis with the unigram entropy."""
    return _figure(folder, where, "pretrainings-" + os.path.basename(folder.rstrip("/")), _draw_pretrainings)


def plot_pretraining(path, where):
    """A pretraining's loss against step: its training batches, its held-out loss and the unigram entropy."""
    name = os.path.basename(os.path.dirname(path)) + "-" + os.path.basename(path).split(".")[0]
    return _figure(path, where, name, _draw_pretraining)


def _draw_attention(plt, path):
    d = _load(path)
    dims = sorted({r["D"] for r in d["records"]})
    fig, axes = plt.subplots(1, len(dims), figsize=(3.6 * len(dims) + 0.6, 3.4), squeeze=False)
    labels = {
        "ours": "ours (codes)",
        "sdpa-mask": "SDPA, dense mask",
        "flex": "Flex, block mask (fused)",
        "sdpa-nomask": "SDPA, no mask (the floor)",
    }
    for ax, dim in zip(axes[0], dims):
        recs = sorted(
            (r for r in d["records"] if r["D"] == dim and r["layout"].startswith("s2s")), key=lambda r: r["L"]
        )
        for k, (method, label) in enumerate(labels.items()):
            pts = [(r["L"], r["methods"][method]["fwdbwd_ms"]) for r in recs if method in r["methods"]]
            if pts:
                ax.plot(*zip(*pts), "o-", color=f"C{k}", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["L"] for r in recs], [str(r["L"]) for r in recs])
        ax.set_ylim(bottom=0)
        ax.set_title(f"seq2seq layout, head dim {dim}", fontsize=9)
        ax.set_xlabel("sequence length L (B*L fixed)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("forward + backward, ms")
    axes[0][-1].legend(frameon=False, fontsize=7)
    fig.suptitle(f"{d['device']}, torch {d['torch']}, {d['date']}", fontsize=8)
    return fig


def plot_attention(path, where):
    """Attention forward+backward time against sequence length, ours beside its baselines."""
    return _figure(path, where, "attention-" + os.path.basename(os.path.dirname(path)), _draw_attention)


# -----------------------------------------------------------------------------
# decoders: a folder of eval.py result files (eval-*.json), one per checkpoint and setting


def decoder_rows(folder):
    """The eval.py rows of a folder, each with its family (AR greedy/beam, Mask-Predict, ELMER per exit
    measure), the setting that varies within the family, and the run it came from; sorted."""
    rows = []
    for p in sorted(glob.glob(os.path.join(ROOT, folder, "*.json"))):
        r = _load(os.path.relpath(p, ROOT))
        if "rougeL" not in r:
            continue
        g = r["generation"]
        r["run"] = os.path.basename(os.path.dirname(r["model"]))
        if r["arch"] == "elmer":
            measure = r.get("exit_measure") or "none"
            r["family"], r["setting"] = f"ELMER, exit by {measure}", r.get("exit_threshold")
            r["shown"] = f"{measure} {'<' if measure == 'entropy' else '>'} {r['exit_threshold']:g}"
            if r.get("mean_exit") == len(r["exit_frac"].split("/")) and r.get("dec_flops") == 1.0:
                r["shown"] += " (exit disabled)"
        elif r["arch"] == "nar":
            r["family"], r["setting"] = "Mask-Predict", g["iterations"]
            n = g["iterations"]
            r["shown"] = f"{n} iteration{'s' * (n != 1)}, {g.get('length_beam') or 3} lengths"
        else:
            r["family"], r["setting"] = f"AR ({r['arch']})", g["beam"]
            r["shown"] = r["decoding"]
        rows.append(r)
    return sorted(rows, key=lambda r: (r["family"], r["run"], _order(r)))


def _families(rows):
    out = {}
    for r in rows:
        out.setdefault((r["family"], r["run"]), []).append(r)
    return out


def _order(r):
    """A family's points in the order of their setting: AR by beam, Mask-Predict by iterations, ELMER
    from exit disabled to every token leaving first (mean exit layer falling)."""
    return -r["mean_exit"] if "mean_exit" in r else r["setting"]


def _draw_decoders(plt, folder):
    rows = decoder_rows(folder)
    fig, ax = plt.subplots(figsize=(5.8, 3.6))
    markers = {"AR": "s", "Mask-Predict": "^", "ELMER": "o"}
    for k, ((family, run), rs) in enumerate(_families(rows).items()):
        rs = sorted(rs, key=_order)
        ax.plot(
            [r["latency_ms"] for r in rs],
            [r["rougeL"] for r in rs],
            marker=markers[family.split(" ")[0].rstrip(",")],
            color=f"C{k}",
            label=f"{family}: {run}",
        )
    ax.set_xscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    lo, hi = min(r["latency_ms"] for r in rows), max(r["latency_ms"] for r in rows)
    ax.set_xticks([t for t in (10, 20, 30, 50, 100, 200, 300, 500, 1000) if lo / 1.5 <= t <= hi * 1.5])
    ax.set_xlabel("latency per summary at batch 1, ms (log)")
    ax.set_ylabel("ROUGE-L")
    ax.set_title("Quality against batch-1 latency: AR beam, Mask-Predict, ELMER's exits", fontsize=9)
    ax.legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3, which="both")
    return fig


def plot_decoders(folder, where):
    """ROUGE-L against batch-1 latency: AR beam search, Mask-Predict's iterations, ELMER's exits."""
    return _figure(folder, where, "decoders-" + os.path.basename(folder.rstrip("/")), _draw_decoders)


def _draw_exits(plt, folder):
    rows = [r for r in decoder_rows(folder) if r["arch"] == "elmer"]
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.3), sharey=True)
    for k, ((family, run), rs) in enumerate(_families(rows).items()):
        for ax, x in zip(axes, ("dec_flops", "latency_ms")):
            rs = sorted(rs, key=lambda r: r[x])  # joined along the axis, not in threshold order
            ax.plot([r[x] for r in rs], [r["rougeL"] for r in rs], "o-", color=f"C{k}", label=family[6:])
    off = [r for r in rows if r["shown"].endswith("(exit disabled)")][:1]
    for ax, x in zip(axes, ("dec_flops", "latency_ms")):
        ax.plot(
            [r[x] for r in off],
            [r["rougeL"] for r in off],
            "k*",
            ms=10,
            label="exit disabled" if x == "dec_flops" else None,
        )
    axes[0].set_xlabel("decoder multiply-adds / exit disabled")
    axes[1].set_xlabel("latency per summary at batch 1, ms")
    axes[0].set_ylabel("ROUGE-L (point values: no per-example outputs were kept)")
    axes[0].legend(frameon=False, fontsize=7)
    fig.suptitle("ELMER's exit measures: quality against the decoder's work and its time", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig


def plot_exits(folder, where):
    """ELMER's Figure 2: ROUGE-L against the decoder's work and time, one line per exit measure."""
    return _figure(folder, where, "exits-" + os.path.basename(folder.rstrip("/")), _draw_exits)


# -----------------------------------------------------------------------------
# the papers' orderings: reproduce's results.json


def orderings_of(d, path):
    """results.json's orderings, each checked against the plan and the file: a chain names runs of
    the plan, and a run given a value, seeds or a pair has its row in the file's runs (an archived
    ordering's runs are the archive's, reproduce/claims.py); else one `error:` line naming the ordering
    and the run."""
    for o in d["orderings"]:
        chain = parse_chain(o["chain"])[0]
        measured = (
            [n for n, v in o.get("values", {}).items() if v is not None]
            + [s for seeds in o.get("seeds", {}).values() for s in seeds]
            + [n for p in o["pairs"] for n in (p["a"], p["b"])]
        )
        unplanned = [n for n in chain + list(o.get("values", {})) if n not in BY_NAME]
        unrun = [] if o.get("archived") else [n for n in measured if n not in d["runs"]]
        if unplanned or unrun:
            raise SystemExit(
                f"error: {path}: the ordering {o['chain']!r} names "
                + (
                    f"{unplanned[0]!r}, which is no run of the plan (reproduce/plan.py)"
                    if unplanned
                    else f"{unrun[0]!r} as measured, but the file has no row of it under runs"
                )
            )
    return d["orderings"]


def _draw_scorecard(plt, path):
    d = _load(path)
    pairs = [(o, p) for o in orderings_of(d, path) for p in o["pairs"] + o.get("controls", []) if "low" in p]
    colors = {"holds": "C2", "not resolved": "0.5", "reversed": "C3"}
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.42 * max(len(pairs), 1)))
    for i, (o, p) in enumerate(pairs):
        y = len(pairs) - 1 - i
        ax.errorbar(
            p["difference"],
            y,
            xerr=[[p["difference"] - p["low"]], [p["high"] - p["difference"]]],
            fmt="o",
            color=colors.get(p["verdict"], "C0"),
            capsize=3,
        )
    ax.set_yticks([len(pairs) - 1 - i for i in range(len(pairs))])
    ax.set_yticklabels(
        [
            f"{o['paper']}: {p['a']} {p['op']} {p['b']} ({o['metric']}" + (", a control)" if p.get("control") else ")")
            for o, p in pairs
        ],
        fontsize=7,
    )
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("difference, first minus second: 95% interval over test examples and seeds")
    ax.set_ylim(-0.7, max(len(pairs), 1) - 0.3)
    ax.set_title(f"The papers' claims, pair by pair, at the {d['budget']} budget", fontsize=9)
    for verdict, c in colors.items():
        ax.plot([], [], "o", color=c, label=verdict)
    ax.legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3, axis="x")
    return fig


def plot_scorecard(path, where):
    """Every measured pair of the papers' orderings: its difference and 95% interval, by verdict."""
    return _figure(path, where, "scorecard-" + os.path.basename(os.path.dirname(path)), _draw_scorecard)


# -----------------------------------------------------------------------------
# MLAE's Figure 3: the initial mask ratio of the linear schedule


def mask_sweep_rows(path):
    """(m0, run, its results.json row or None) for each run of MLAE Figure 3's sweep, by m0."""
    runs = _load(path)["runs"]
    return [(m, name, runs.get(name)) for name, m in sorted(MASK_SWEEP.items(), key=lambda kv: kv[1])]


def _rouge2_bar(ax, x, r, **style):
    """One run's ROUGE-2 at x with its 95% interval (none drawn where results.json has none)."""
    v = r["metrics"]["rouge2"]
    low, high = (r.get("intervals") or {}).get("rouge2", (v, v))
    ax.errorbar(x, v, yerr=[[v - low], [high - v]], capsize=3, **style)


def _draw_mask_ratio(plt, path):
    rows = mask_sweep_rows(path)
    have = [(m, r) for m, _, r in rows if r and "rouge2" in r["metrics"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for m, r in have:
        _rouge2_bar(ax, m, r, fmt="o", color="C0")
    if len(have) > 1:
        ax.plot([m for m, _ in have], [r["metrics"]["rouge2"] for _, r in have], color="C0", lw=1)
    constant = _load(path)["runs"].get("sum-mlae-constant")
    if constant:
        _rouge2_bar(ax, 0.62, constant, fmt="s", color="C1", label="constant schedule, m0 0.6")
        ax.legend(frameon=False, fontsize=7)
    missing = [f"{m:g}" for m, _, r in rows if not r]
    ax.set_title(
        "MLAE Figure 3: ROUGE-2 against the initial mask ratio"
        + ("\n(not run yet: m0 " + ", ".join(missing) + ")" if missing else ""),
        fontsize=8,
    )
    ax.set_xlabel("initial mask ratio m0 of the decoder input (linear schedule; 0 = none)")
    ax.set_ylabel("test ROUGE-2, 95% bootstrap interval")
    ax.set_xlim(-0.05, 0.95)
    ax.grid(alpha=0.3)
    return fig


def plot_mask_ratio(path, where):
    """MLAE's Figure 3: ROUGE-2 against the initial mask ratio m0, one point per run of the sweep."""
    return _figure(path, where, "mask-ratio-" + os.path.basename(os.path.dirname(path)), _draw_mask_ratio)
