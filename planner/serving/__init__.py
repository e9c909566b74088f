"""A workload served by an engine whose runtime is replayed step by step.

``serve`` sets the replay up (the engine's start-up pool, the step time from ``step_source``, the
runtime options), replays a workload at a rate scale through ``replicas`` (one replay per
data-parallel replica) and searches the highest rate a deployment sustains; ``report`` condenses
what a replay observed into the figures every command shows. ``simulate --engine``,
``--find-capacity`` and ``sweep``'s engine axis all come through here.
"""
