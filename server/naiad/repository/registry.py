"""The published models: the one thing the request path reads to find which version serves a request.

Loading, reloading, polling and syncing repositories take seconds to minutes and hold locks, thread
pools and cloud clients; answering "which version runs this request" takes a dictionary lookup.  So the
two are apart: the repository manager (:mod:`naiad.repository.manager`) works beside the request path
and, when a load is complete, publishes the model here in one assignment (a request sees a model or its
predecessor, never a half-built one); the data plane, ensembles' steps and BLS calls only resolve here.
A frontend worker keeps a registry of its own, filled from the engine's catalog, so metadata, config
and readiness are answered by the same rules in every process.

Requests naming no version follow the model's routing: the pinned default version, Triton's highest
READY version, or version weights (:mod:`naiad.repository.routing`).  :meth:`ModelRegistry.route` makes
the weighted choice for a request that runs, once, in the engine; :meth:`ModelRegistry.resolve` is the
deterministic answer for everything else (the heaviest READY version stands for the model).

Under ``--model-namespacing`` models are published by key (their name in their repository), and a
name finds the one model of that name, or fails as ambiguous when several repositories hold one, as
Triton's does; an ensemble's steps look in their ensemble's repository first (:meth:`ModelRegistry.scope`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from naiad.core.errors import InvalidArgumentError, NotFoundError, UnavailableError, unknown_model
from naiad.core.request import InferRequest
from naiad.repository import routing
from naiad.repository.layout import model_key
from naiad.repository.model import Model, ModelState, ModelVersion


class ModelRegistry:
    """The models requests can see, by name: published by whoever decides (the repository manager in
    the engine, the catalog in a worker), read by the request path."""

    def __init__(self) -> None:
        self._models: dict[str, Model] = {}
        self._view = MappingProxyType(self._models)
        #: Namespaced models by name, then namespace (empty without ``--model-namespacing``).
        self._named: dict[str, dict[str, Model]] = {}

    def models(self) -> Mapping[str, Model]:
        """A read-only, live view of the published models by key (statistics, metrics, the catalog)."""
        return self._view

    def publish(self, model: Model) -> None:
        """Make ``model`` the one requests for its key see (replacing any earlier one at once)."""
        self._models[model.key] = model
        if model.namespace:
            self._named.setdefault(model.name, {})[model.namespace] = model

    def retire(self, key: str) -> None:
        """Forget ``key``: requests for it fail as for a model never loaded."""
        model = self._models.pop(key, None)
        if model is not None and model.namespace:
            named = self._named.get(model.name, {})
            named.pop(model.namespace, None)
            if not named:
                self._named.pop(model.name, None)

    def find(self, name: str, namespace: str = "") -> Model | None:
        """The model a request naming ``name`` means (``None``: none is published): the one of that
        name; under namespacing the one in ``namespace`` if there is one, else the only one of that
        name, else INVALID_ARG in Triton's words (a name several repositories hold)."""
        model = self._keyed(name)  # (without namespacing, the only lookup)
        if model is not None or not self._named:
            return model
        if namespace and (model := self._models.get(model_key(name, namespace))) is not None:
            return model
        named = self._named.get(name)
        if not named:
            return None
        if len(named) > 1:
            raise InvalidArgumentError(
                f"There are {len(named)} identifiers of model '{name}' in global map, model namespace "
                "must be provided to resolve ambiguity."
            )
        return next(iter(named.values()))

    def named(self, name: str) -> list[Model]:
        """Every published model called ``name`` (several only under namespacing)."""
        model = self._keyed(name)
        return ([model] if model is not None else []) + list(self._named.get(name, {}).values())

    def _keyed(self, name: str) -> Model | None:
        """The model published with ``name`` as its key, if that is its name: a namespaced model's
        key (its name, a NUL, its repository) is no name a client may give, or a request naming
        ``composing\\x00/models/a`` would pass over the ambiguity ``composing`` has (the NUL
        arrives through a URL's ``%00`` or a gRPC string)."""
        model = self._models.get(name)
        return None if model is None or model.namespace else model

    def unique(self, name: str, namespace: str = "") -> Model | None:
        """:meth:`find`, where an ambiguous name finds nothing (what Triton answers for an unknown
        model there: statistics, trace settings, an ensemble's step)."""
        try:
            return self.find(name, namespace)
        except InvalidArgumentError:
            return None

    def scope(self, namespace: str) -> Mapping[str, Model]:
        """The models by name as an ensemble in ``namespace`` sees its steps' (see :meth:`find`)."""
        return self._view if not namespace else _Scope(self, namespace)

    def resolve(self, name: str, version: str, namespace: str = "") -> tuple[Model, ModelVersion]:
        """The model and the version that serves a request for ``version``, with Triton's errors.

        ``""`` means the pinned default version if the model has one, else the highest READY one; with
        version weights, the READY version with the largest weight (what answers for the model outside
        a request: readiness, metadata; requests themselves go through :meth:`route`).
        """
        model = self._models.get(name)
        if model is None or model.namespace:  # (a namespaced model's key is no name, see ``_keyed``)
            model = self.find(name, namespace)
        if model is None:
            raise unknown_model(name)
        if not version:
            if model.version_weights is not None:
                return model, _weighted(
                    model, routing.heaviest(model.version_weights, model.ready_versions())
                )
            return model, _unversioned(model)
        number = int(version) if version.isdigit() else -1
        model_version = model.versions.get(number)
        if model_version is None:
            raise NotFoundError(f"Request for unknown model: '{name}' version {version} is not found")
        if model_version.state is not ModelState.READY:
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return model, model_version

    def route(self, request: InferRequest, namespace: str = "") -> tuple[Model, ModelVersion]:
        """:meth:`resolve` for a request that runs: one naming no version of a model with version
        weights goes to a version chosen by weight (a sequence's by its correlation id).  Called once
        per request, where it runs (the engine); ``namespace``: an ensemble step's (see :meth:`find`)."""
        if request.model_version:
            return self.resolve(request.model_name, request.model_version, namespace)
        model = self._models.get(request.model_name)
        if model is None or model.namespace:  # (a namespaced model's key is no name, see ``_keyed``)
            model = self.find(request.model_name, namespace)
        if model is None:
            raise unknown_model(request.model_name)
        weights = model.version_weights
        if weights is None:
            return model, _unversioned(model)
        ready = [number for number, mv in model.versions.items() if mv.state is ModelState.READY]
        return model, _weighted(model, routing.choose(weights, ready, request.sequence_id))

    @staticmethod
    def mirror(model: Model, chosen: ModelVersion, request: InferRequest) -> ModelVersion | None:
        """The READY mirror version ``request`` (naming no version, run by ``chosen``) is also copied
        to, if it falls in the mirrored share; ``None`` otherwise."""
        mirror = model.mirror
        if (
            mirror is None
            or request.model_version
            or not routing.mirrors(mirror, chosen.version, request.sequence_id)
        ):
            return None
        target = model.versions.get(mirror.version)
        return target if target is not None and target.state is ModelState.READY else None


def _unversioned(model: Model) -> ModelVersion:
    """Without version weights: the pinned default version, else the highest READY one (Triton)."""
    pinned = model.default_version
    if pinned is not None:
        mv = model.versions.get(pinned)
        if mv is None or mv.state is not ModelState.READY:
            raise UnavailableError(
                f"Request for unknown model: '{model.name}' version {pinned} is not at ready state"
            )
        return mv
    latest = model.latest_ready()
    if latest is None:
        if not model.versions:  # (its config never polled: Triton keeps no record of such a model)
            raise unknown_model(model.name)
        raise NotFoundError(f"Request for unknown model: '{model.name}' has no available versions")
    return latest


def _weighted(model: Model, chosen: int | None) -> ModelVersion:
    if chosen is None:
        raise UnavailableError(
            f"Request for unknown model: '{model.name}' has no version with a routing weight at ready state"
        )
    return model.versions[chosen]


class _Scope(Mapping[str, Model]):
    """The published models by name, as seen from one namespace (:meth:`ModelRegistry.scope`): a
    name held there means that model; another name means the only model of that name."""

    def __init__(self, registry: ModelRegistry, namespace: str) -> None:
        self._registry = registry
        self._namespace = namespace

    def __getitem__(self, name: str) -> Model:
        model = self._registry.unique(name, self._namespace)
        if model is None:
            raise KeyError(name)
        return model

    def __iter__(self) -> Iterator[str]:
        return iter({model.name for model in self._registry.models().values()})

    def __len__(self) -> int:
        return len({model.name for model in self._registry.models().values()})
