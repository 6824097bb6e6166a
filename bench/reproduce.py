"""The runner of the papers' comparisons lives in reproduce/: `python -m reproduce` (--help). This
file keeps `python bench/reproduce.py ...` working as the same command."""
import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT  # not bench/, whose reproduce.py is this file
runpy.run_path(os.path.join(ROOT, "reproduce", "__main__.py"), run_name="__main__")
