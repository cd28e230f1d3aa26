"""An asyncio event loop whose clock moves only when a test says so."""

import asyncio


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        super().__init__()
        self.now = 1000.0

    def time(self):
        return self.now

    def advance(self, seconds):
        """Move the clock and run every timer now due, and what they schedule."""
        self.now += seconds
        for _ in range(3):
            self.run_until_complete(asyncio.sleep(0))
