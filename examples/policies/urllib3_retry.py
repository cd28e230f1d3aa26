"""A service's urllib3 retries: `stormlab certify ./urllib3_retry.py:retries`."""

from urllib3.util.retry import Retry

retries = Retry(total=5, backoff_factor=0.5, backoff_max=10, backoff_jitter=0.5, status_forcelist=[503])
