"""A service's tenacity configuration: `stormlab certify ./tenacity_retrying.py:renew`."""

import tenacity


@tenacity.retry(
    wait=tenacity.wait_random_exponential(multiplier=0.5, max=10),
    stop=tenacity.stop_after_attempt(5),
    retry=tenacity.retry_if_exception_type(OSError),
)
def renew(node: str) -> bytes:
    raise NotImplementedError("the lab reads this function's retry configuration, it does not call it")
