# The generated gRPC stubs stay untyped (the perf tool's control client is their only user here).
from typing import Any

def __getattr__(name: str) -> Any: ...
