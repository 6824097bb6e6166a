"""The reproduction of the three papers' comparisons: the plan of every run (plan.py), the runner
that executes it over several sittings (runner.py, `python -m reproduce`), what it knows of each run
(runstate.py), its workers (workers.py), RESULTS.md and results.json (report.py) and the paired
bootstrap every ordering is judged by (significance.py)."""
