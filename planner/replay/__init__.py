"""Engines in motion: one replay loop that steps an engine's own scheduler over a trace.

The loop (``loop.replay``) is engine-neutral. It owns the clock, the arrivals, the one
step-time function (``steptime.step_ns``) and the observables; the engine owns every
scheduling and memory decision through the ``EngineRuntime`` protocol (``protocol``),
which an engine plan hands out (``EnginePlan.runtime(sizing, options)`` in
``planner/engines/engine.py``; no caller branches on an engine's name).

The protocol an engine implements (see ``protocol.EngineRuntime``):

* ``pools`` — the names of the pools whose units in use the loop records per step
  (vLLM: one per KV cache group; SGLang: its token pools);
* ``usable_units`` — the units requests can take, over all pools (the plot's limit);
* ``pipeline_depth`` — batches in flight: 1 (a step's output is applied before the next
  step is scheduled) or 2 (vLLM async scheduling: step k+1 is scheduled before step k's
  output is applied);
* ``refuse(r) -> str | None`` — at arrival: the reason the server refuses request ``r``
  outright (vLLM: prompt + output longer than max_model_len), else None;
* ``add(r)`` — request ``r`` (an index into the ``RuntimeTrace``) joins the waiting queue;
* ``schedule() -> Step`` — one scheduler step: tokens per scheduled request (parallel
  arrays), prefill tokens in it (the step-time input), requests preempted in it,
  requests admitted from waiting (first time: their queue wait ends), prefix-hit tokens;
* ``complete(step) -> Completion`` — the fabricated model output of ``step``: every
  scheduled request that finished its prompt samples one token (plus accepted drafts);
  returns the requests that produced their first token and those that finished (and
  whose memory the engine has released);
* ``used_units() -> tuple[int, ...]`` per pool, ``running()``, ``waiting()`` — read after
  each step;
* ``stranded() -> tuple[int, ...]`` — requests left waiting when nothing can ever run
  (the loop ends them as refused rather than spin).

Clock (integer nanoseconds): before each ``schedule`` every arrival whose time has come
is ``add``-ed (refused ones are recorded and never reach the engine); a step that
schedules tokens lasts ``step_ns(prefill_tokens, time)`` and its output is applied at its
end (depth 1) or after the next step is scheduled (depth 2); a step that schedules
nothing waits for the batch in flight, else jumps to the next arrival.
"""
