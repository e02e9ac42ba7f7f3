"""``naiad analyze``: Model Analyzer's job, a pruned search over a model's configuration on this machine."""
