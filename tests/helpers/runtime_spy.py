"""A runtime seen through ``loop.replay``: every call goes to the wrapped engine runtime, and a
subclass overrides the calls it logs or checks (``schedule``, ``complete``)."""

from __future__ import annotations


class RuntimeSpy:
    def __init__(self, rt):
        self.rt, self.log = rt, []
        # the loop reads these as attributes of the runtime it steps
        self.pools, self.usable_units, self.pipeline_depth, self.label = (rt.pools, rt.usable_units,
                                                                          rt.pipeline_depth, rt.label)

    def __getattr__(self, name):
        return getattr(self.rt, name)
