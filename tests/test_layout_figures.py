"""The layout figures (tools/layouts.py) draw what the code builds: each drawn cell is the rule of
kernels/reference.py on the layout of the module's example, a change to the rule changes the figure,
the committed figures are what the code draws now, and the reading path names real code."""

import os
import re
import xml.etree.ElementTree as ET

import pytest
import torch

from conftest import ROOT
from kernels import CONTEXT, ORIGINAL, PSEUDO, reference
from tools import figures, layouts


def filled(svg, panel=0):
    """The (row, column) of every filled cell of a panel of the SVG."""
    cells = ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}rect")
    return {
        (int(r.get("data-q")), int(r.get("data-k")))
        for r in cells
        if r.get("class") == "filled" and r.get("data-panel") == str(panel)
    }


def true_cells(mask):
    return {tuple(ij) for ij in mask.nonzero().tolist()}


def test_the_pmlm_figure_draws_the_reference_rule_on_pmlm_layout():
    svg, see, ex = layouts.pmlm()
    kind, step = torch.as_tensor(ex["kind"])[None], torch.as_tensor(ex["step"])[None]
    want = reference.visible(kind, step, kind, step)[0]
    assert filled(svg) == true_cells(want) and torch.equal(see, want)
    # the docstring's example as UniLMv2 Figure 5 draws it: 8 AE tokens, x4 x5 [P] [P], x2 [P]
    labels = [layouts.name(t) for t in ex["tokens"]]
    assert labels == ["[SOS]", "x1", "[M]", "x3", "[M]", "[M]", "x6", "[EOS]", "x4", "x5", "[P]", "[P]", "x2", "[P]"]
    assert ex["pos"].tolist()[8:] == [4, 5, 4, 5, 2, 2] and ex["kind"].tolist()[8:] == [ORIGINAL] * 2 + [PSEUDO] * 2 + [
        ORIGINAL,
        PSEUDO,
    ]
    ae, p2 = range(8), 13  # the AE part sees itself only; step 2's [P] sees step 1's originals and itself
    assert {(i, j) for i, j in filled(svg) if i in ae} == {(i, j) for i in ae for j in ae}
    assert {j for i, j in filled(svg) if i == p2} == set(ae) | {8, 9, 13}


def test_a_changed_rule_changes_the_figure(monkeypatch):
    before = layouts.pmlm()[0]
    rule = reference.visible
    # a rule under which the AE part also sees the appended tokens
    changed = lambda qk, qs, kk, ks, *a, **k: rule(qk, qs, kk, ks, *a, **k) | (qk[:, :, None] == CONTEXT)  # noqa: E731
    monkeypatch.setattr(reference, "visible", changed)
    after = layouts.pmlm()[0]
    assert after != before and (0, 13) in filled(after) and (0, 13) not in filled(before)
    assert reference.visible is changed  # the recording put back what it found


def test_the_mlae_figure_draws_each_decoders_masks():
    svg, seen, batch = layouts.mlae()
    U = batch.enc_tok.shape[1]
    assert batch.enc_pos[0].tolist() == [0, 1, 4, 5, 7] and batch.msk_pos[0].tolist() == [2, 3, 6]
    for panel, variant in enumerate(("a", "b")):
        enc, self_, cross = seen[variant]
        D = self_.shape[0]
        want = true_cells(enc) | {(i + U, j + U) for i, j in true_cells(self_)}
        if cross is not None:
            want |= {(i + U, j) for i, j in true_cells(cross)}
        assert filled(svg, panel) == want
        assert enc.all() and self_.all() and D == (8 if variant == "a" else 3)  # bidirectional, no padding here
        assert (cross is None) == (variant == "a")  # (a) has no cross-attention, (b) sees every latent
    assert seen["b"][2].all()


def test_the_elmer_figure_draws_who_runs_each_layer_and_what_its_queries_see():
    svg, (ran, self_, cross), model = layouts.elmer()
    T, L = len(layouts.EXITS), len(model.dec_layers)
    assert [set(r) for r in ran] == [{t for t in range(T) if layouts.EXITS[t] > l} for l in range(L)]
    # left panel: row i is layer L - i; a token runs layers 1 .. its exit layer
    assert filled(svg, 0) == {(L - 1 - l, t) for l in range(L) for t in ran[l]} | {
        (L - 1 - l, t) for l in range(L) for t in range(T) if l >= layouts.EXITS[t]
    }  # blue, or grey above
    queries = ran[layouts.SHOWN - 1]
    assert self_.shape == (len(queries), T) and self_.all() and cross.all()  # every token, exited too
    assert filled(svg, 1) == {(i, j) for i in range(len(queries)) for j in range(T + cross.shape[1])}


def test_the_committed_figures_are_what_the_code_draws(monkeypatch, tmp_path):
    monkeypatch.setitem(figures.DRAW, "on", False)
    for path in layouts.LAYOUTS:
        line = layouts.plot_layout(path, "docs/x.md")
        assert f"figures/{layouts.LAYOUTS[path][0]}.svg" in line
    # a figure that is not what the code draws is caught, and a missing one
    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    with pytest.raises(SystemExit, match="is missing"):
        layouts.plot_layout("core/unilm/pmlm.py", "docs/x.md")
    (tmp_path / "docs" / "figures" / "layout-pmlm.svg").write_text(layouts.pmlm()[0].replace("x1", "x9"))
    with pytest.raises(SystemExit, match="not what the code draws now"):
        layouts.plot_layout("core/unilm/pmlm.py", "docs/x.md")
    with pytest.raises(SystemExit, match="no layout figure"):
        layouts.plot_layout("core/t5.py", "docs/x.md")


def test_the_reading_path_names_files_and_functions_that_exist():
    """docs/design.md's "Start reading here": each item names a file that exists and, in backticks
    after it, functions or classes defined in that file (Class.method: the method inside the class)."""
    text = open(os.path.join(ROOT, "docs", "design.md")).read()
    section = text.split("## Start reading here\n", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"^\d+\. ", section, flags=re.M)[1:]
    assert 6 <= len(items) <= 8
    for item in items:
        names = re.findall(r"`([^`]+)`", item)
        path, defined = names[0], names[1:]
        assert os.path.isfile(os.path.join(ROOT, path)), f"the reading path names {path}, which does not exist"
        source = open(os.path.join(ROOT, path)).read()
        for name in defined:
            at = 0
            for part in name.split("."):
                m = re.compile(rf"^\s*(def|class) {re.escape(part)}\b", re.M).search(source, at)
                assert m, f"the reading path names {name} in {path}, which defines no {part} there"
                at = m.end()
