"""Statistics over runs: confidence intervals, summaries, comparisons."""
