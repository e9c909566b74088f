"""Every vLLM release a user may name, mapped to the modelled release whose rules it runs.

The map is read from the release wheels (``pip download --no-deps vllm==X``, unzipped): for each
release, where each rule csa-plan's vLLM models tell apart is decided (file:line into that
wheel). A release maps to a modelled one when every such rule is the same; the table is
docs/engine-releases.md. A release before DeepSeek-V4 support, after the newest modelled
release, or one whose rules no modelled release shares, is a refusal that says which.

The rules (the fields of ``engines/vllm/startup.VllmRelease``):

* grouping: layer tuples (``_get_kv_cache_groups_uniform_groups``) or packed groups
  (``_get_packed_kv_cache_groups``, with the V4 indexer's block-outermost BLHNC layout);
* windows sized for ``max_in_flight_tokens`` (``SlidingWindowSpec.max_memory_usage_bytes``) or for
  one ``max_num_batched_tokens``;
* ``extra_retained_tokens`` on the SWA specs (multi-module MTP);
* the null block reserved in the memory check (``_check_enough_kv_cache_memory``);
* the >= 160 GiB tier of ``get_batch_defaults``;
* the start-up log on one line ("KV cache size: ..., Maximum concurrency ...");
* an MXFP4 indexer cache still allocated at FP8's 132 B per key;
* layer tuples with window pages padded to the full-attention pages (0.25/0.26) or not (0.27/0.28);
* the extensible KV cache (sized after warmup from measured memory, utilisation 1.0).
"""

from __future__ import annotations

import re

from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record


@record
class ReleaseRow:
    """Published releases ``first``..``last`` (inclusive) and what runs them."""

    first: tuple[int, int, int]
    last: tuple[int, int, int]
    modelled: str | None  # the registry name, or None: no modelled release runs these rules
    why: str  # the rules, each with its file:line in the release


def _v(text: str) -> tuple[int, int, int]:
    a, b, c = (int(x) for x in text.split("."))
    return a, b, c


# Read from the wheels 0.19.0 .. 0.34.0 (the markers named in `why`).
FIRST_V4 = (0, 20, 0)  # vllm 0.20.0 model_executor/models/deepseek_v4.py; 0.19.0 has no DeepSeek-V4 model
PRE_V4_CHECKED = ("DeepSeek-V4 is first in vllm 0.20.0, model_executor/models/deepseek_v4.py; 0.19.0 has no "
                  "DeepSeek-V4 model")
ROWS: tuple[ReleaseRow, ...] = (
    ReleaseRow(_v("0.20.0"), _v("0.21.0"), None,
               "DeepSeek-V4 lives in model_executor/models/deepseek_v4.py and model_executor/layers/"
               "deepseek_v4_attention.py (vllm 0.20.0, 0.21.0), a code path csa-plan's models were not compared "
               "with (models/deepseek_v4/ is from 0.22.0 on)"),
    ReleaseRow(_v("0.22.0"), _v("0.25.1"), "vllm-0.25",
               "layer tuples (v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_groups: the same body in 0.22.0, "
               "0.23.0 :1504, "
               "0.25.0 :1572), windows for one max_num_batched_tokens (no max_in_flight_tokens in "
               "v1/kv_cache_interface.py), no extra_retained_tokens, no null block in the check, no >= 160 GiB "
               "tier, two log lines, MXFP4 keys at FP8's 132 B (models/deepseek_v4/attention.py: 0.23.0 :725, "
               "0.25.0 :732); the V4 spec arguments differ from 0.25.0 only off the fp8_ds_mla path "
               "(sparse_swa.py / compressor.py: 0.22.x alignment 576 always, 0.23-0.24 None, 0.25 512 off it) and for "
               "int4 KV"),
    ReleaseRow(_v("0.26.0"), _v("0.26.0"), "vllm-0.26",
               "0.25's rules with windows for max_in_flight_tokens (0.26.0 v1/kv_cache_interface.py:523)"),
    ReleaseRow(_v("0.27.0"), _v("0.27.1"), "vllm-0.27",
               "0.26's layer tuples changed three ways (0.27.0 v1/core/kv_cache_utils.py): window pages no longer "
               "padded up to the full-attention page sizes (_get_kv_cache_groups_uniform_groups :1670), one block "
               "the largest group's pages side by side (_get_packed_kv_cache_layout :1283), the 'Maximum "
               "concurrency' divisor the sum of each group's blocks (get_max_concurrency_for_kv_cache_config :937); "
               "the MXFP4 indexer cache at 68 B per key (models/deepseek_v4/attention.py:785; 0.26.0 :732's 'still "
               "allocate the same amount of memory as FP8' is gone); windows for max_in_flight_tokens "
               "(v1/kv_cache_interface.py:543), two log lines, no null block in the check, no >= 160 GiB tier; "
               "0.27.1 differs from 0.27.0 only in _version.py and models/qwen3_dspark.py"),
    ReleaseRow(_v("0.28.0"), _v("0.28.0"), "vllm-0.28",
               "0.27's layer tuples (v1/core/kv_cache_utils.py:1623) with extra_retained_tokens (:2137), the "
               ">= 160 GiB tier (engine/arg_utils.py:2582) and one log line (kv_cache_utils.py:1870), without the "
               "null block in the check; DeepSeek-V4 on Model Runner V2 by default (config/vllm.py:72), whose "
               "profile_cudagraph_memory returns 0 (v1/worker/gpu/model_runner.py:843-845)"),
    ReleaseRow(_v("0.29.0"), _v("0.33.0"), "vllm-0.33",
               "packed groups (0.29.0 v1/core/kv_cache_utils.py:1668 ... 0.33.0 v1/core/kv_cache_planning.py:914; "
               "BLHNC indexer layout from 0.29.0 v1/attention/backends/mla/indexer.py:192), windows for "
               "max_in_flight_tokens, extra_retained_tokens (0.29.0 kv_cache_utils.py:2269), the null block in the "
               "check (0.29.0 kv_cache_utils.py:975), the >= 160 GiB tier (0.29.0 engine/arg_utils.py:2698), one "
               "log line (0.29.0 kv_cache_utils.py:2033); 0.29-0.32 lack only 0.33's GB10 (cc 12.1) small-tier "
               "exception in get_batch_defaults (0.33.0 engine/arg_utils.py:2984): on a GB10 give --max-num-batched-tokens "
               "and --max-num-seqs"),
    ReleaseRow(_v("0.34.0"), _v("0.34.0"), "vllm-0.34",
               "vllm-0.33's KV planning (0.34.0 v1/core/kv_cache_planning.py:958 _get_packed_kv_cache_groups, "
               ":1742 extra_retained_tokens, :215 the null block) and the extensible KV cache on by default "
               "(0.34.0 config/cache.py:395, config/vllm.py:3180-3263)"),
)
NEWEST_MODELLED = (0, 34, 0)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.post\d+)?((?:rc|a|b)\d+(?:\.dev\d+)?|\.dev\d+)?(?:\+[0-9a-z.]+)?$")


@record
class ReleaseMatch:
    """What ``--engine vllm-X`` names: the modelled release, and the note that says why."""

    modelled: str
    note: str


def _row(v: tuple[int, int, int]) -> ReleaseRow | None:
    for r in ROWS:
        if r.first <= v <= r.last:
            return r
    return None


def _refuse(spelled: str, message: str) -> BadInput:
    return BadInput("options", "--engine", f"{spelled}: {message} (docs/engine-releases.md)")


def match_vllm(spelled: str, version: str) -> ReleaseMatch | None:
    """``vllm-0.30.1`` / ``vllm-0.28`` / ``vllm-0.31.1.dev45+gabc`` / ``vllm-0.31.1rc1.dev50+gabc`` -> the modelled
    release that runs its rules.

    None when ``version`` is not a version string; a refusal (BadInput) when no modelled release runs it."""
    m = _VERSION.match(version.strip().lower())
    if not m:
        return None
    major, minor, patch = int(m[1]), int(m[2]), int(m[3] or 0)
    pre = m[4] or ""
    v = (major, minor, patch)
    shown = ".".join(map(str, v))
    if ".dev" in pre:
        # a nightly: setuptools-scm names the commits after tag X.Y.Z as X.Y.(Z+1).devN, so its code lies
        # between release X.Y.Z and the next minor release X.(Y+1).0
        # (an X.Y.0.devN lies before release X.Y.0, after the releases of X.(Y-1)); the commits after a release
        # candidate's tag X.Y.ZrcK are X.Y.Zrc(K+1).devN, so theirs lies between the release before X.Y.Z and X.Y.Z
        after = (major, minor, patch - 1) if patch else (major, max(minor - 1, 0), 0)
        if not pre.startswith(".dev"):  # X.Y.ZrcK.devN
            before = v
        else:
            before = (major, minor + 1, 0) if patch else (major, minor, 0)
        lo, hi = _row(after), _row(before)
        if after < FIRST_V4:
            raise _refuse(spelled, f"a nightly after vllm {'.'.join(map(str, after))}, before DeepSeek-V4 support "
                                   f"({PRE_V4_CHECKED})")
        if after >= NEWEST_MODELLED:
            raise _refuse(spelled, "a nightly after vllm " + ".".join(map(str, after)) + ", the newest modelled "
                                   "release: its rules are not read; name --engine vllm-0.34")
        if lo is None or hi is None or lo.modelled is None or lo.modelled != hi.modelled:
            a = lo.modelled if lo and lo.modelled else "no modelled release"
            b = hi.modelled if hi and hi.modelled else "no modelled release"
            raise _refuse(spelled, f"a nightly between vllm {'.'.join(map(str, after))} ({a}) and "
                                   f"{'.'.join(map(str, before))} ({b}): which rules it runs depends on its commit")
        return ReleaseMatch(lo.modelled, f"vllm-{version}: a nightly between vllm {'.'.join(map(str, after))} and "
                                         f"{'.'.join(map(str, before))}, both modelled by {lo.modelled}'s rules: "
                                         f"{lo.why}")
    if v < FIRST_V4:
        raise _refuse(spelled, f"vllm {shown} is before DeepSeek-V4 support ({PRE_V4_CHECKED})")
    if v > NEWEST_MODELLED or (v[:2] == NEWEST_MODELLED[:2] and v != NEWEST_MODELLED):
        raise _refuse(spelled, f"vllm {shown} is after the newest modelled release, vllm 0.34.0: its rules are "
                               "not read")
    row = _row(v)
    if row is None:  # a patch release not published when the map was read: its minor's branch
        row = _row((major, minor, 0))
    if row is None:
        raise _refuse(spelled, f"vllm {shown} is not a release the map covers")
    if row.modelled is None:
        raise _refuse(spelled, f"no modelled release runs vllm {shown}'s rules: {row.why}")
    if f"vllm-{version}" in (row.modelled, row.modelled + ".0"):
        return ReleaseMatch(row.modelled, "")
    return ReleaseMatch(row.modelled, f"vllm-{version}: modelled by {row.modelled}'s rules, identical in: {row.why}")
