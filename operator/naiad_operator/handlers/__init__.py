"""kopf glue: registrations that read the object, call ``reconcile`` and ``k8s``, and post Events.

Importing this package registers every handler (``kopf run -m naiad_operator.handlers``).
"""

from naiad_operator.handlers import inferenceservice, periodic, repository, startup, watches

__all__ = ["inferenceservice", "periodic", "repository", "startup", "watches"]
