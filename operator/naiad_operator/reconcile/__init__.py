"""Pure decisions: spec + observations in, desired child objects, rollout plans and status out.

Nothing here does I/O or imports kopf or a Kubernetes client (``lint-imports`` checks it), so every
decision is a plain function tested with plain data.
"""
