"""The PyTorch backend: Triton's ``pytorch`` backend (TorchScript ``model.pt``) on torch's Python API,
plus the newer ``.pt2`` formats (``torch.export`` programs and AOTInductor packages).

Naming conventions, ``parameters`` and load-error messages follow Triton's pytorch_backend, so a Triton
model repository of TorchScript models serves unchanged.  torch is an optional extra
(``naiad[torch]``); this package imports it, so the registry reports a missing torch as the reason a
model is UNAVAILABLE.
"""

from naiad.backends.pytorch.backend import PyTorchBackend

__all__ = ["PyTorchBackend"]
