"""Naiad's Kubernetes operator: ModelRepository and InferenceService custom resources, run by kopf.

The package is layered so the layering can be checked (``lint-imports``): ``handlers`` (kopf glue) sit on
``k8s`` (the only API and network I/O) and ``reconcile`` (pure decisions), which both sit on ``api`` (typed
spec, status and observations) and ``settings``.
"""

GROUP = "serving.naiad.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
