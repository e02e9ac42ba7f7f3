"""The TensorRT backend: Triton's ``tensorrt_plan`` models, on the TensorRT Python runtime.

TensorRT (and a CUDA build of torch, used for device memory and streams) exist only on GPU hosts, so
only :mod:`naiad.backends.tensorrt.backend` and the modules it loads import them; the registry imports
that module when a plan model loads and reports a missing TensorRT as the reason the model is
UNAVAILABLE.  The shape and config logic lives in modules that import neither, and is tested anywhere.
"""
