"""Modules imported at their first use, declared at the top of the module that uses them.

Every `stormlab` process builds the whole command line, and three of its commands' tools cost
more than all the rest: matplotlib (charts), hypothesis and schemathesis (the fuzzer) and the
Kubernetes client (the k8s backend) took ~1.2 s of the 2 s a `stormlab chaos list` spent
importing. A module names them here instead::

    pyplot = Later("matplotlib.pyplot")   # at the top, beside the other imports
    ...
    pyplot.figure()                       # imported here, the first time a name is read

so the import stays where a reader looks for it (the house rule: no import inside a function)
and a command that never draws a chart never pays for matplotlib. ``installed`` says whether
the module can be imported, without importing it (the lab image leaves the charts out).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any


class Later:
    """A module by its dotted name, imported when one of its names is first read."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Later({self.name!r})"

    @property
    def installed(self) -> bool:
        """Whether its top package can be found (found, not imported: nothing is run)."""
        return importlib.util.find_spec(self.name.partition(".")[0]) is not None

    def load(self) -> ModuleType:
        """The module itself (imported once; later calls find it in sys.modules)."""
        return importlib.import_module(self.name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.load(), attr)
