"""What a container needs to read the repository's source: the ``naiad repo sync`` arguments, and the
credentials as environment variables and files.

Two kinds of pod read the source: the sync Job (every storage mode) and, with ``storage.mode: perPod``
or ``nodeCache``, each server pod's init step. Both get exactly the same access from here, so a
setting that works for one works for the other. Files matter: google-auth reads
``GOOGLE_APPLICATION_CREDENTIALS`` as a path and botocore reads ``AWS_CA_BUNDLE`` as a path, so a key
or a CA bundle in a Secret must be mounted, not only exported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from naiad_operator.api.modelrepository import ModelRepositorySpec, Verify
from naiad_operator.reconcile import names

CREDENTIALS_DIR = "/var/run/naiad/credentials"
GCS_KEY_FILE = f"{CREDENTIALS_DIR}/gcs/key.json"
CA_BUNDLE_FILE = f"{CREDENTIALS_DIR}/ca/ca-bundle.pem"
#: Read by ``naiad.repository.sources.s3`` (botocore has no environment variable for either).
ADDRESSING_STYLE_ENV = "NAIAD_S3_ADDRESSING_STYLE"
VERIFY_TLS_ENV = "NAIAD_S3_VERIFY_TLS"


@dataclass(frozen=True, slots=True)
class SourceAccess:
    """The pieces of a pod spec that give one container read access to the source."""

    args: list[str]
    env: list[dict[str, Any]] = field(default_factory=list)
    env_from: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    service_account_name: str | None = None

    def apply(self, container: dict[str, Any]) -> dict[str, Any]:
        """``container`` with this access's environment and credential mounts added."""
        container["env"] = [*container.get("env", []), *self.env]
        if self.env_from:
            container["envFrom"] = list(self.env_from)
        container["volumeMounts"] = [*container.get("volumeMounts", []), *self.mounts]
        return container


def access(spec: ModelRepositorySpec, keep: int) -> SourceAccess:
    """Arguments and credentials for ``naiad repo sync SOURCE /repository --keep keep``."""
    source = spec.source
    args = [source.sync_uri(), names.REPOSITORY_MOUNT, "--keep", str(keep)]
    if spec.sync.verify is Verify.SHA256:
        args += ["--verify", "sha256"]
    env: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if source.region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": source.region})
    if source.addressing_style is not None:
        env.append({"name": ADDRESSING_STYLE_ENV, "value": source.addressing_style.value})
    if not source.verify_tls:
        env.append({"name": VERIFY_TLS_ENV, "value": "false"})
    creds = source.credentials
    env_from = [{"secretRef": {"name": creds.secret_ref.name}}] if creds.secret_ref else []
    if creds.gcs_key_secret is not None:
        ref = creds.gcs_key_secret
        volumes.append(_file_volume("gcs-key", "secret", ref.name, ref.key, "key.json"))
        mounts.append({"name": "gcs-key", "mountPath": f"{CREDENTIALS_DIR}/gcs", "readOnly": True})
        env.append({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": GCS_KEY_FILE})
    bundle = source.ca_bundle
    if bundle is not None and (bundle.secret_ref or bundle.config_map_ref):
        kind, found = "secret", bundle.secret_ref
        if found is None:
            kind, found = "configMap", bundle.config_map_ref
        assert found is not None
        volumes.append(_file_volume("ca-bundle", kind, found.name, found.key, "ca-bundle.pem"))
        mounts.append({"name": "ca-bundle", "mountPath": f"{CREDENTIALS_DIR}/ca", "readOnly": True})
        env.append({"name": "AWS_CA_BUNDLE", "value": CA_BUNDLE_FILE})
    return SourceAccess(args, env, env_from, volumes, mounts, creds.service_account_name)


def _file_volume(name: str, kind: str, source: str, key: str, path: str) -> dict[str, Any]:
    ref_key = "secretName" if kind == "secret" else "name"
    return {"name": name, kind: {ref_key: source, "items": [{"key": key, "path": path}]}}
