"""Waiting, in a test, for a state the server reaches on its own (a run ends, a row is stored)."""
import time


def wait_for(condition, timeout: float = 10.0, what: str = "condition"):
    """Polls `condition()` until it returns something true, and returns that; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
