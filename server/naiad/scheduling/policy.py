"""The scheduling settings of one model version, read once from its configuration.

The scheduler consults these on every request, so they are plain frozen values taken out of the
``ModelConfig`` protobuf at load time (protobuf field access is slow), and checked here with Triton's
messages so that a bad ``dynamic_batching`` section fails that model's load, not its requests.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

    from naiad.core.request import InferRequest

#: ``ModelQueuePolicy.TimeoutAction.DELAY`` (REJECT is 0, the default).
_DELAY = 1


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How one priority level's queue treats its requests (``ModelQueuePolicy``).

    ``delay_on_timeout``: a request past its timeout moves behind the level's other requests instead
    of being rejected.  ``default_timeout_us`` 0 means no timeout; ``max_queue_size`` 0 no bound.
    """

    delay_on_timeout: bool = False
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    def timeout_us(self, requested_us: int) -> int:
        """The timeout a request gets: a client's ``timeout`` may only shorten a non-zero default.

        This is Triton's rule (a request timeout against a default of 0 has no effect).
        """
        if self.allow_timeout_override and 0 < requested_us < self.default_timeout_us:
            return requested_us
        return self.default_timeout_us


@dataclass(frozen=True, slots=True)
class PriorityLevels:
    """A queue's priority levels: ``count`` of them (index 0 served first), each under the policy
    ``configured`` for it (by index), else the ``default`` one.

    Sparse because Triton takes any ``priority_levels`` a uint64 holds (qa's L0_model_queue loads a
    model with 18446744073709551615 of them): a queue holds the levels its requests use, not all.
    """

    count: int = 1
    default: QueuePolicy = QueuePolicy()
    configured: tuple[tuple[int, QueuePolicy], ...] = ()

    @classmethod
    def of(cls, *policies: QueuePolicy) -> PriorityLevels:
        """One level per policy, in order."""
        return cls(len(policies), QueuePolicy(), tuple(enumerate(policies)))

    def policy(self, index: int) -> QueuePolicy:
        for level, policy in self.configured:
            if level == index:
                return policy
        return self.default


@dataclass(frozen=True, slots=True)
class SchedulingPolicy:
    """Everything the scheduler needs to know about a model version.

    ``dynamic_batching`` says the config has that section; ``batching`` is false for models without it
    (Triton's default scheduler: one request per execution) and for models whose ``max_batch_size``
    is 0.  ``levels`` are the priority
    levels and their queue policies, highest priority first; ``default_level`` is an index into them.
    ``shape_inputs`` names the inputs whose shapes must agree for two requests to share a batch
    (variable-size, not ragged); ``value_inputs`` the shape tensors, whose contents must agree too;
    ``optional_inputs`` says requests may differ in which inputs they carry (those never share).
    """

    model_name: str
    dynamic_batching: bool = False
    batching: bool = False
    max_batch_size: int = 0
    preferred_batch_sizes: frozenset[int] = frozenset()
    max_queue_delay_ns: int = 0
    preserve_ordering: bool = False
    levels: PriorityLevels = PriorityLevels()
    default_level: int = 0
    shape_inputs: frozenset[str] = frozenset()
    value_inputs: frozenset[str] = frozenset()
    optional_inputs: bool = False

    @property
    def keyed(self) -> bool:
        """Whether requests carry a :meth:`shape_key` (some of them may not share a batch)."""
        return bool(self.shape_inputs or self.value_inputs or self.optional_inputs)

    def shape_key(self, request: InferRequest) -> Hashable:
        """Equal for requests that may share a batch: same inputs, same shapes where it matters."""
        key: list[Hashable] = []
        for tensor in request.inputs:
            name = tensor.name
            if name in self.shape_inputs:
                key.append((name, tensor.data.shape[1:]))
            elif name in self.value_inputs:
                key.append((name, tensor.data.tobytes()))
            elif self.optional_inputs:
                key.append(name)
        key.sort(key=str)
        return tuple(key)

    @property
    def max_preferred_batch_size(self) -> int:
        """The batch size at which waiting for more stops paying (Triton's max preferred size)."""
        return max(self.preferred_batch_sizes) if self.preferred_batch_sizes else self.max_batch_size

    def level_of(self, priority: int) -> int:
        """The queue index for a request ``priority``: 0 or out of range means the default level."""
        if 0 < priority <= self.levels.count:
            return priority - 1
        return self.default_level


def _queue_policy(message: mc.ModelQueuePolicy) -> QueuePolicy:
    return QueuePolicy(
        delay_on_timeout=message.timeout_action == _DELAY,
        default_timeout_us=int(message.default_timeout_microseconds),
        allow_timeout_override=bool(message.allow_timeout_override),
        max_queue_size=int(message.max_queue_size),
    )


def equal_inputs(config: mc.ModelConfig) -> tuple[frozenset[str], frozenset[str]]:
    """Triton's inputs whose shapes must agree within a batch (variable-size and not ragged) and
    its shape tensors, whose contents must agree too."""
    shapes = frozenset(
        tensor.name
        for tensor in config.input
        if not tensor.is_shape_tensor and not tensor.allow_ragged_batch and any(d < 0 for d in tensor.dims)
    )
    return shapes, frozenset(tensor.name for tensor in config.input if tensor.is_shape_tensor)


def policy_of(config: mc.ModelConfig) -> SchedulingPolicy:
    """The scheduling policy of a normalized ``ModelConfig`` (whose sections the repository checked
    when it polled the model: :mod:`naiad.repository.validation`)."""
    name = config.name
    if not config.HasField("dynamic_batching"):
        return SchedulingPolicy(model_name=name)
    dynamic = config.dynamic_batching
    max_batch_size = int(config.max_batch_size)
    preferred = frozenset(int(size) for size in dynamic.preferred_batch_size)
    levels_count = int(dynamic.priority_levels)
    default_policy = _queue_policy(dynamic.default_queue_policy)
    levels = PriorityLevels(1, default_policy)
    default_level = 0
    if levels_count > 0:
        configured = sorted(
            (level - 1, _queue_policy(policy)) for level, policy in dynamic.priority_queue_policy.items()
        )
        levels = PriorityLevels(levels_count, default_policy, tuple(configured))
        default_level = int(dynamic.default_priority_level) - 1
    shape_inputs, value_inputs = equal_inputs(config)
    return SchedulingPolicy(
        model_name=name,
        dynamic_batching=True,
        batching=max_batch_size > 0,
        max_batch_size=max_batch_size,
        preferred_batch_sizes=preferred,
        max_queue_delay_ns=int(dynamic.max_queue_delay_microseconds) * 1000,
        preserve_ordering=bool(dynamic.preserve_ordering),
        levels=levels,
        default_level=default_level,
        shape_inputs=shape_inputs,
        value_inputs=value_inputs,
        optional_inputs=any(tensor.optional for tensor in config.input),
    )
