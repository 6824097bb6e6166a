"""The reproduction of the three papers' comparisons: the plan of every run (plan.py), the papers' claims
and the tables that show the runs (orderings.py), the runner that executes it over several sittings
(runner.py, `python -m reproduce`), what it knows of each run (runstate.py), whether a run's files are
the plan's run as it is now (staleness.py), its workers (workers.py), RESULTS.md and results.json
(report.py), each claim read pair by pair (claims.py), the interval over test examples and seeds every
pair is judged by (significance.py), and the runs and verdicts kept without weights (archive.py)."""
