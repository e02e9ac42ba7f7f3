"""``naiad perf``: perf_analyzer's load generator and report, with perf_analyzer's flags and CSV columns."""
