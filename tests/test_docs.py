"""The docs' generated blocks match the committed result files they are rendered from
(python -m tools.render_docs --check)."""
import subprocess
import sys

from conftest import ROOT


def test_generated_blocks_match_their_result_files():
    r = subprocess.run([sys.executable, "-m", "tools.render_docs", "--check"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_stale_block_is_caught(tmp_path):
    from tools import render_docs
    text = "<!-- render: exit results/h200-2026-11-26/exit.json -->\nedited by hand\n<!-- /render -->\n"
    assert render_docs.render_text(text, "x") != text
    assert render_docs.render_text(render_docs.render_text(text, "x"), "x") == render_docs.render_text(text, "x")
