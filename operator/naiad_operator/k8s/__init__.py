"""All I/O: the Kubernetes API (the only importer of a Kubernetes client) and HTTP to server pods."""
