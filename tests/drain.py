"""Take every message a work queue holds, accepting each: what the durable tests count."""
from raygroups.stack.workqueue import AcquireTimeout


def drain(q, timeout_s: float = 3.0) -> list:
    """Acquire and accept until nothing comes within ``timeout_s``; the deliveries."""
    left = []
    while True:
        try:
            batch = q.acquire_many(50, timeout_s=timeout_s)
        except AcquireTimeout:
            return left
        if not batch:
            return left
        left += batch
        for d in batch:
            d.accept()
