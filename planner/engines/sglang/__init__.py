"""SGLang 0.5.23's scheduler and pools in motion, for DeepSeek-V4 (``simulate --engine sglang-0.5.23``).

One concept per module, each rule citing ``file:line`` in sglang-0.5.23 (``sglang/srt/``):

* ``ratio``     — the new-token ratio: its decay per decode step and its value after a retraction;
* ``radix``     — the radix cache over 256-token pages, with the SWA component's live/tombstoned
  pages, the SWA match validator and LRU eviction of unreferenced nodes;
* ``window``    — which of a request's SWA pages leave the window as it advances;
* ``adder``     — ``PrefillAdder`` with ``SWAPrefillBudget``: admission against free + evictable
  pages minus every running request's reserved remaining output;
* ``retract``   — the decode retraction order and loop;
* ``scheduler`` — one scheduler step (prefill first, else decode) over the two pools.

* ``compiled``  — the whole replay compiled (``csglang.c``, optional), these modules its checked twin.

Pure: no printing, no engine imports. ``tools/crosscheck_sglang_runtime.py`` drives SGLang's own
code on CPU against these.
"""
