"""The ONNX Runtime backend: Triton's ``onnxruntime`` backend, on ONNX Runtime's Python API.

Model files, ``config.pbtxt`` fields, auto-complete rules and load-error messages follow Triton's
onnxruntime_backend, so a Triton model repository of ONNX models serves unchanged.
"""

from naiad.backends.onnxruntime.backend import OnnxRuntimeBackend

__all__ = ["OnnxRuntimeBackend"]
