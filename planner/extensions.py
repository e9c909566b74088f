"""The optional compiled extensions (``cdecide``, ``cvllm``, ``csglang``), each loaded once.

Each is built by ``setup.py`` with ``optional=True``: without a C compiler its Python twin
runs and gives the same answer, only slower. A build from another version of its C source
(its ``ABI`` differs: an editable install not rebuilt since a pull) would be called with the
wrong arguments, so it is set aside as if it were not built.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable, TypeVar

T = TypeVar("T")


class OptionalExtension:
    """One compiled module and the calling convention (``ABI``) its Python caller uses."""

    __slots__ = ("name", "abi", "_module")

    def __init__(self, name: str, abi: int) -> None:
        self.name, self.abi = name, abi
        self._module: ModuleType | None | bool = False  # False: not looked up yet

    def load(self) -> ModuleType | None:
        """The module, or None: not built, or built with another ABI. Looked up as ``from package
        import leaf`` does (the package's attribute, then ``sys.modules``), once."""
        if self._module is False:
            package, _, leaf = self.name.rpartition(".")
            try:
                module = getattr(importlib.import_module(package), leaf, None) or importlib.import_module(self.name)
            except ImportError:
                module = None
            self._module = module if module is not None and getattr(module, "ABI", None) == self.abi else None
        return self._module  # type: ignore[return-value]


def reporting(module: ModuleType, progress: Callable[[int, int], None] | None, call: Callable[[], T]) -> T:
    """``call()`` (a compiled replay) with ``module``'s loop calling ``progress(done, total)`` every few
    thousand turns (``set_progress``). The loops check for signals on the same beat whether or not a
    callback is set, so Ctrl-C ends a compiled replay within a fraction of a second (KeyboardInterrupt)."""
    if progress is None:
        return call()
    module.set_progress(progress)
    try:
        return call()
    finally:
        module.set_progress(None)
