"""The pictures of the attention layouts (docs/figures/layout-*.svg), drawn by running the code.

    python -m tools.render_docs            # draws them with the other figures (the plot-layout blocks)

Each figure takes the worked example of a module's docstring, builds its layout with that module's
own functions (core/unilm/pmlm.py pmlm_layout; core/mlae/model.py mlae_layout, collate and decoder_inputs;
core/elmer/model.py ELMER.decoder_loop), runs a `tiny` model with random weights on it under the
reference attention, and draws the masks that attention computed with the rule of
kernels/reference.py (`visible`): a change to a layout or to the rule changes the figure. Plain
SVG text, no plotting library, so that `render_docs --check` draws each one again and compares it
with the committed file byte for byte.
"""

import contextlib
import os
from types import SimpleNamespace
from xml.sax.saxutils import escape

import numpy as np
import torch

import kernels
from core.config import preset
from core.tokenizer import EOS, MASK, PAD, PSEUDO as P_ID, SOS
from kernels import CONTEXT, ORIGINAL, PSEUDO, reference
from tools import figures

VOCAB = 64
X = 10  # the id of x1 in the examples: x_i is X + i - 1
NAMES = {SOS: "[SOS]", EOS: "[EOS]", MASK: "[M]", P_ID: "[P]"}

BLUE, GREEN, ORANGE, GREY = "#4c72b0", "#55a868", "#dd8452", "#c9ced6"
CELL = 20
SANS = "DejaVu Sans, Arial, sans-serif"
MONO = "DejaVu Sans Mono, monospace"


def name(t):
    return NAMES.get(int(t), f"x{int(t) - X + 1}")


def sequence(n):
    """[SOS] x1 .. xn [EOS] as ids."""
    return np.array([SOS] + [X + i for i in range(n)] + [EOS], dtype=np.int64)


@contextlib.contextmanager
def recorded_masks():
    """The (Lq, Lk) bool mask of the first row of every attention call inside the block, in call
    order, as kernels/reference.py's rule gives it: the reference backend forced, its rule wrapped
    (not replaced) for the block's length."""
    masks, rule = [], reference.visible

    def record(*args, **kwargs):
        see = rule(*args, **kwargs)
        masks.append(see[0].clone())
        return see

    reference.visible = record
    try:
        with kernels.use_backend("reference"), torch.no_grad():
            yield masks
    finally:
        reference.visible = rule


def runs(labels):
    """[(label, start, end)] of the runs of equal labels in a list."""
    out = []
    for i, lab in enumerate(labels):
        if out and out[-1][0] == lab:
            out[-1][2] = i + 1
        else:
            out.append([lab, i, i + 1])
    return [tuple(r) for r in out]


# -----------------------------------------------------------------------------
# SVG text


class Svg:
    def __init__(self):
        self.items = []
        self.panel = 0  # the panel being drawn, named in its cells

    def rect(self, x, y, w, h, fill, stroke="none", width=0.5, extra=""):
        self.items.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{width}"{extra}/>'
        )

    def line(self, x1, y1, x2, y2, color="#222", width=1.2):
        self.items.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" stroke-width="{width}"/>')

    def circle(self, x, y, r, fill):
        self.items.append(f'<circle cx="{x}" cy="{y}" r="{r}" fill="{fill}"/>')

    def text(self, x, y, s, size=10, anchor="start", color="#000", mono=False, rotate=False, bold=False):
        turn = f' transform="rotate(-90 {x} {y})"' if rotate else ""
        weight = ' font-weight="bold"' if bold else ""
        self.items.append(
            f'<text x="{x}" y="{y}" font-family="{MONO if mono else SANS}" font-size="{size}" '
            f'text-anchor="{anchor}" fill="{color}"{weight}{turn}>{escape(s)}</text>'
        )

    def render(self, width, height, desc):
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">\n<desc>{escape(desc)}</desc>\n'
            f'<rect width="{width}" height="{height}" fill="#fff"/>\n' + "\n".join(self.items) + "\n</svg>\n"
        )


GROUP_H, TOKEN_H, POS_H = 16, 40, 12  # above the grid: group names, token names (upright), position ids
GROUP_W, TOKEN_W, POS_W = 16, 46, 16  # left of it, the same for the rows


def matrix(svg, x, y, rows, cols, fill, row_groups, col_groups, mark=None, title=None):
    """A grid of len(rows) x len(cols) cells at (x, y): rows and cols are (name, position id or None);
    fill(i, j) the cell's colour or None (white); mark(i, j) True puts a dot in it; the groups
    [(label, start, end)] bracket runs of rows and columns and are ruled across the grid. A filled
    cell carries class="filled", its panel and its data-q / data-k. Returns the (width, height) it took."""
    top = y + (14 if title else 0)
    gx, gy = x + GROUP_W + TOKEN_W + POS_W, top + GROUP_H + TOKEN_H + POS_H
    W, H = len(cols) * CELL, len(rows) * CELL
    if title:
        svg.text(gx, y + 10, title, size=10, bold=True)
    for lab, a, b in col_groups:
        svg.text(gx + (a + b) * CELL // 2, top + 10, lab, size=9, anchor="middle")
        svg.line(gx + a * CELL + 2, top + 13, gx + b * CELL - 2, top + 13, width=1)
    for lab, a, b in row_groups:
        mid = gy + (a + b) * CELL // 2
        svg.text(x + 10, mid, lab, size=9, anchor="middle", rotate=True)
        svg.line(x + 13, gy + a * CELL + 2, x + 13, gy + b * CELL - 2, width=1)
    for j, (lab, pos) in enumerate(cols):
        cx = gx + j * CELL + CELL // 2
        svg.text(cx + 4, gy - POS_H - 3, lab, mono=True, rotate=True)
        if pos is not None:
            svg.text(cx, gy - 3, str(pos), size=8, anchor="middle", color="#777")
    for i, (lab, pos) in enumerate(rows):
        cy = gy + i * CELL + CELL // 2
        svg.text(gx - POS_W - 3, cy + 4, lab, anchor="end", mono=True)
        if pos is not None:
            svg.text(gx - 3, cy + 3, str(pos), size=8, anchor="end", color="#777")
    for i in range(len(rows)):
        for j in range(len(cols)):
            c = fill(i, j)
            extra = f' class="filled" data-panel="{svg.panel}" data-q="{i}" data-k="{j}"' if c else ""
            svg.rect(gx + j * CELL, gy + i * CELL, CELL, CELL, c or "#fff", "#d0d0d0", extra=extra)
            if mark and mark(i, j):
                svg.circle(gx + j * CELL + CELL // 2, gy + i * CELL + CELL // 2, 4, "#fff")
    for _, a, _ in col_groups[1:]:
        svg.line(gx + a * CELL, gy, gx + a * CELL, gy + H)
    for _, a, _ in row_groups[1:]:
        svg.line(gx, gy + a * CELL, gx + W, gy + a * CELL)
    svg.rect(gx, gy, W, H, "none", "#222", 1.2)
    return gx - x + W, gy - y + H


def legend(svg, x, y, entries):
    """(swatch, text) one a line: a swatch is a colour, "dot" (the exit mark) or None (a note
    without one); returns the height taken."""
    for k, (swatch, text) in enumerate(entries):
        cy = y + 14 * k
        if swatch == "dot":
            svg.rect(x, cy, 10, 10, BLUE, "#999")
            svg.circle(x + 5, cy + 5, 2.5, "#fff")
        elif swatch:
            svg.rect(x, cy, 10, 10, swatch, "#999")
        svg.text(x + (16 if swatch else 0), cy + 9, text, size=10)
    return 14 * len(entries)


def figure(svg, panels, entries, title, desc):
    """Panels (each a function of (svg, x, y) -> (w, h)) side by side under a title, the legend below."""
    svg.text(8, 16, title, size=11, bold=True)
    x, height = 8, 0
    for k, panel in enumerate(panels):
        svg.panel = k
        w, h = panel(svg, x, 26)
        x, height = x + w + 24, max(height, h)
    y = 26 + height + 14
    y += legend(svg, GROUP_W + 8, y, entries)
    return svg.render(x - 16, y + 6, desc)


# -----------------------------------------------------------------------------
# the three layouts


def pmlm():
    """core/unilm/pmlm.py's example: the factorization order <{x4, x5}, {x2}> of x1 .. x6 (UniLMv2 Figure 4),
    one stack over the AE part and the appended steps, and who may attend to whom (its Figure 5)."""
    from core.masking import corrupt
    from core.model import UnifiedLM
    from core.unilm.pmlm import pmlm_layout

    ids = sequence(6)
    blocks = [np.array([4, 5]), np.array([2])]
    # every masked token of the AE part [MASK], as the docstring draws it
    ae = corrupt(ids, np.concatenate(blocks), np.random.default_rng(0), MASK, 0, 1, p_mask=1.0)
    ex = pmlm_layout(ids, np.zeros_like(ids), ae, blocks, P_ID)
    t = {k: torch.as_tensor(v)[None] for k, v in ex.items()}
    torch.manual_seed(0)
    model = UnifiedLM(preset("tiny", vocab_size=VOCAB))
    with recorded_masks() as masks:
        model(t["tokens"], t["pos"], t["seg"], t["kind"], t["step"], torch.ones_like(t["tokens"], dtype=torch.bool))
    see = masks[0]
    assert len(masks) == len(model.layers) and all(torch.equal(m, see) for m in masks)  # one Meta for every layer
    kind, step = ex["kind"], ex["step"]
    names = [(name(tok), int(p)) for tok, p in zip(ex["tokens"], ex["pos"])]
    groups = runs(["AE part" if k == CONTEXT else f"step {s}" for k, s in zip(kind, step)])
    color = {CONTEXT: BLUE, ORIGINAL: GREEN, PSEUDO: ORANGE}
    order = ", ".join("{" + ", ".join(name(ids[p]) for p in b) + "}" for b in blocks)
    svg = Svg()
    panel = lambda svg, x, y: matrix(
        svg, x, y, names, names, lambda i, j: color[int(kind[j])] if see[i, j] else None, groups, groups
    )
    entries = [
        (BLUE, "seen: a key of the AE part (CONTEXT)"),
        (GREEN, "seen: an ORIGINAL copy of a masked token"),
        (ORANGE, "seen: a pseudo mask [P] (PSEUDO)"),
        ("#fff", "not seen"),
        (None, "(AE part: the masked LM over the whole text; step s: the s-th block"),
        (None, " of the PAR factorization, partially autoregressive; row: the query;"),
        (None, " column: the key; grey: position ids)"),
    ]
    return (
        figure(
            svg,
            [panel],
            entries,
            f"UniLMv2's PMLM, factorization order <{order}>",
            "drawn by tools/layouts.py from core/unilm/pmlm.py pmlm_layout and kernels/reference.py visible",
        ),
        see,
        ex,
    )


def mlae():
    """core/mlae/model.py's example: x2 x3 and x6 of x1 .. x6 masked; the encoder over the rest and the
    decoder of each variant, (a) self-attention over the latents put back and [MASK]s, (b) the
    [MASK]s alone with cross-attention to the latents."""
    from core.mlae.model import MLAE, VARIANTS, collate, decoder_inputs, mlae_layout

    ids = sequence(6)
    masked = np.isin(np.arange(len(ids)), [2, 3, 6])
    batch = collate([mlae_layout(ids, masked, MASK)], SimpleNamespace(pad_id=PAD))
    cfg = preset("tiny", vocab_size=VOCAB)
    enc = [(name(tok), int(p)) for tok, p in zip(batch.enc_tok[0], batch.enc_pos[0])]
    U = len(enc)
    panels, seen = [], {}
    for variant in VARIANTS:
        torch.manual_seed(0)
        model = MLAE(cfg, variant)
        dec_tok, dec_pos, dec_valid, _, _ = decoder_inputs(batch, variant, MASK)
        with recorded_masks() as masks:
            model(batch.enc_tok, batch.enc_pos, batch.enc_valid, dec_tok, dec_pos, dec_valid)
        n_enc, per_layer = len(model.enc_layers), 1 + (model.dec_layers[0].cross is not None)
        assert len(masks) == n_enc + per_layer * len(model.dec_layers)
        self_, cross = masks[n_enc], masks[n_enc + 1] if per_layer == 2 else None
        # (a): the latents enter at their positions (core/mlae/model.py place), a [MASK] elsewhere
        dec = [("[M]" if tok == MASK else f"h{int(p)}", int(p)) for tok, p in zip(dec_tok[0], dec_pos[0])]
        D = len(dec)
        seen[variant] = (masks[0], self_, cross)

        def fill(i, j, enc_see=masks[0], self_=self_, cross=cross):
            if i < U:
                return BLUE if j < U and enc_see[i, j] else None
            if j >= U:
                return GREEN if self_[i - U, j - U] else None
            return ORANGE if cross is not None and cross[i - U, j] else None

        groups = [("encoder", 0, U), (f"decoder ({variant})", U, U + D)]
        title = {"a": "(a) self-attention only", "b": "(b) [M]s, cross-attention"}[variant]
        panels.append(
            lambda svg, x, y, rows=enc + dec, fill=fill, groups=groups, title=title: matrix(
                svg, x, y, rows, rows, fill, groups, groups, title=title
            )
        )
    masked_names = " ".join(name(t) for t in ids[masked])
    entries = [
        (BLUE, "seen by the encoder's self-attention"),
        (GREEN, "seen by the decoder's self-attention"),
        (ORANGE, "seen by the decoder's cross-attention (the encoder's output)"),
        ("#fff", "not seen"),
        (None, "(h_i: the encoder's output for position i, put back in decoder (a)'s input;"),
        (None, " the masked tokens never enter the encoder; grey: position ids)"),
    ]
    svg = Svg()
    return (
        figure(
            svg,
            panels,
            entries,
            f"MLAE pretraining, {masked_names} masked: the encoder and each decoder",
            "drawn by tools/layouts.py from core/mlae/model.py mlae_layout, decoder_inputs and MLAE, "
            "and kernels/reference.py visible",
        ),
        seen,
        batch,
    )


EXITS = (2, 4, 1, 3, 4, 2)  # each decoder token's exit layer (LPLM assigns them: core/elmer/lplm.py lplm_batch)
SHOWN = 3  # the layer whose attention the right panel draws


def elmer():
    """core/elmer/model.py's decoder loop on [MASK] x T with an exit layer per token: which tokens run
    each layer (as queries) and, at one layer, what its queries see."""
    from core.elmer.model import ELMER

    T, L = len(EXITS), max(EXITS)
    torch.manual_seed(0)
    model = ELMER(preset("tiny", vocab_size=VOCAB, n_dec_layers=L), dec_len=T)
    src = torch.as_tensor(sequence(3)[1:])[None]  # x1 x2 x3 [EOS]
    src_valid = torch.ones_like(src, dtype=torch.bool)
    exits, ran = torch.as_tensor(EXITS), []

    def decide(l, idx, h, x_in):  # assigned exit layers, as core/elmer/model.py assigned_loss_sums
        ran.append(idx.tolist())
        return exits[idx] == l + 1, None

    with kernels.use_backend("reference"), torch.no_grad():
        memory = model.encode_source(src, src_valid)
    with recorded_masks() as masks:
        model.decoder_loop(memory, src_valid, T, decide, gather=True)
    assert len(masks) == 2 * len(ran) == 2 * L  # per layer: self-attention, cross-attention
    self_, cross = masks[2 * (SHOWN - 1)], masks[2 * (SHOWN - 1) + 1]
    queries = ran[SHOWN - 1]
    last = {t: max(l for l in range(L) if t in ran[l]) for t in range(T)}  # the layer each token left at
    layers = [(f"layer {l + 1}", None) for l in reversed(range(L))]
    tokens = [("[M]", t) for t in range(T)]

    def state(i, j):
        l = L - 1 - i
        return BLUE if j in ran[l] else GREY if l > last[j] else None

    S = src.shape[1]
    rows = [("[M]", t) for t in queries]
    cols = tokens + [(name(t), p) for p, t in enumerate(src[0])]
    fill = lambda i, j: (GREEN if self_[i, j] else None) if j < T else (ORANGE if cross[i, j - T] else None)
    panels = [
        lambda svg, x, y: matrix(
            svg,
            x,
            y,
            layers,
            tokens,
            state,
            [("decoder", 0, L)],
            [("[MASK] x T", 0, T)],
            mark=lambda i, j: last[j] == L - 1 - i,
            title="which tokens run each layer",
        ),
        lambda svg, x, y: matrix(
            svg,
            x,
            y,
            rows,
            cols,
            fill,
            [("queries", 0, len(rows))],
            [("decoder", 0, T), ("source", T, T + S)],
            title=f"what layer {SHOWN}'s queries see",
        ),
    ]
    entries = [
        (BLUE, "runs the layer: its query, attention, FFN are computed"),
        ("dot", "its exit layer: the off-ramp predicts its token there"),
        (GREY, "exited below: its state copied up, a key and value only"),
        (GREEN, "seen: a decoder token (exited ones too)"),
        (ORANGE, "seen: a source token (cross-attention)"),
        ("#fff", "not seen / not run"),
        (None, "(grey numbers: position ids)"),
    ]
    svg = Svg()
    exit_at = " ".join(str(last[t] + 1) for t in range(T))
    return (
        figure(
            svg,
            panels,
            entries,
            f"ELMER's decoder with early exit, exit layers {exit_at}",
            "drawn by tools/layouts.py from core/elmer/model.py ELMER.decoder_loop and kernels/reference.py visible",
        ),
        (ran, self_, cross),
        model,
    )


LAYOUTS = {
    "core/unilm/pmlm.py": ("layout-pmlm", pmlm),
    "core/mlae/model.py": ("layout-mlae", mlae),
    "core/elmer/model.py": ("layout-elmer", elmer),
}


def plot_layout(path, where):
    """The figure of the layout of the module PATH (core/unilm/pmlm.py, core/mlae/model.py,
    core/elmer/model.py), written to docs/figures/, or with figures.DRAW off (--check) compared with
    the file there; its markdown line for the doc WHERE."""
    if path not in LAYOUTS:
        raise SystemExit(f"error: {where}: no layout figure for {path} (one of {', '.join(LAYOUTS)})")
    name, build = LAYOUTS[path]
    svg, where_to = build()[0], f"{figures.FIGURES}/{name}.svg"
    out = os.path.join(figures.ROOT, where_to)
    if figures.DRAW["on"]:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(svg)
    elif not os.path.exists(out):
        raise SystemExit(f"error: {where}: figure {where_to} is missing: run python -m tools.render_docs")
    else:
        with open(out) as f:
            if f.read() != svg:
                raise SystemExit(
                    f"error: {where}: figure {where_to} is not what the code draws now: run python -m tools.render_docs"
                )
    rel = os.path.relpath(out, os.path.dirname(os.path.join(figures.ROOT, where)))
    return (
        f"![{name}]({rel})\n\n(`{where_to}`, drawn by `tools/layouts.py` from `{path}` and the rule of "
        f"`kernels/reference.py`.)\n"
    )
