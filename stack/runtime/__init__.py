"""asyncio runtime: the only I/O in the stack."""
from .host import Runtime

__all__ = ["Runtime"]
