"""The engines' own parallelism flags, read as csa-plan's deployment (``--tp --pp --dp --ep``).

A command line copied from ``vllm serve`` or ``sglang.launch_server`` spells the deployment as that
engine does. Each spelling below is accepted on the engine that has it, and read as csa-plan's
options mean (``--tp``: tensor-parallel ranks per data-parallel rank; ``--dp``: data-parallel
attention ranks; GPUs = tp x dp x pp):

* vLLM (``vllm/engine/arg_utils.py``): ``--tensor-parallel-size``/``-tp``, ``--data-parallel-size``/
  ``-dp``, ``--pipeline-parallel-size``/``-pp`` mean what ``--tp``/``--dp``/``--pp`` mean;
  ``--enable-expert-parallel``/``-ep`` is a switch: expert parallelism over all tp x dp GPUs.
* SGLang (``sglang/srt/server_args.py``): ``--tensor-parallel-size``/``--tp-size`` is *every* GPU
  of the server; ``--dp-size`` with ``--enable-dp-attention`` splits them into dp attention groups
  of tp-size / dp-size ranks (csa-plan: ``--tp tp-size/dp-size --dp dp-size``);
  ``--ep-size``/``--expert-parallel-size`` is ``--ep``; ``--pp-size``/``--pipeline-parallel-size``
  is ``--pp``.

A spelling of the other engine, of no engine named, or one that says what a csa-plan option also
says differently, is bad input naming the spelling and what to write instead.
"""

from __future__ import annotations

from typing import Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record

VLLM, SGLANG = "vllm", "sglang"
OWNER_NAME = {VLLM: "vLLM", SGLANG: "SGLang"}


@record
class Spelling:
    """One engine spelling: which engines have it, which csa-plan option it feeds, a switch or a count."""

    spelled: str
    engines: tuple[str, ...]
    option: str  # csa-plan's: --tp, --pp, --dp, --ep (or --enable-dp-attention, SGLang's own switch)
    switch: bool = False


SPELLINGS: tuple[Spelling, ...] = (
    Spelling("--tensor-parallel-size", (VLLM, SGLANG), "--tp"),
    Spelling("-tp", (VLLM,), "--tp"),
    Spelling("--tp-size", (SGLANG,), "--tp"),
    Spelling("--data-parallel-size", (VLLM, SGLANG), "--dp"),
    Spelling("-dp", (VLLM,), "--dp"),
    Spelling("--dp-size", (SGLANG,), "--dp"),
    Spelling("--pipeline-parallel-size", (VLLM, SGLANG), "--pp"),
    Spelling("-pp", (VLLM,), "--pp"),
    Spelling("--pp-size", (SGLANG,), "--pp"),
    Spelling("--enable-expert-parallel", (VLLM,), "--ep", switch=True),
    Spelling("-ep", (VLLM,), "--ep", switch=True),
    Spelling("--expert-parallel-size", (SGLANG,), "--ep"),
    Spelling("--ep-size", (SGLANG,), "--ep"),
    Spelling("--enable-dp-attention", (SGLANG,), "--dp", switch=True),
)
BY_SPELLING = {s.spelled: s for s in SPELLINGS}


def family(engine: str) -> str:
    """``vllm`` for vllm-0.33, ``sglang`` for sglang-0.5.23; other engines have no spellings here."""
    return engine.partition("-")[0].lower()


def engine_spelling(engine_family: str, option: str, switch: bool = False) -> str:
    """How ``engine_family`` spells csa-plan's ``option`` (its long form)."""
    own = [s for s in SPELLINGS if engine_family in s.engines and s.option == option and s.switch == switch
           and s.spelled.startswith("--")]
    return min(own, key=lambda s: len(s.engines)).spelled  # the engine's own name first (SGLang: --tp-size)


def help_text(spelled: str) -> str:
    """The option's help: whose spelling it is and what it is read as."""
    s = BY_SPELLING[spelled]
    owners = " and ".join(OWNER_NAME[e] for e in s.engines)
    if spelled == "--enable-dp-attention":
        return "SGLang: --dp-size attention groups within --tp-size GPUs (read as --tp tp-size/dp-size --dp dp-size)."
    if s.switch:
        return f"{owners}: expert parallelism over every GPU (read as --ep tp x dp)."
    if SGLANG in s.engines and s.option == "--tp":
        return f"{owners}'s spelling of --tp (SGLang: every GPU of the server; docs/engines.md)."
    return f"{owners}'s spelling of {s.option}, with that --engine."


@record
class Read:
    """The deployment the flags give (None: not given), and a note when the reading is not word for word."""

    tp: int | None
    pp: int | None
    dp: int | None
    ep: int | None
    note: str | None = None


def read_engine_flags(given: Mapping[str, object], engines: tuple[str, ...], tp: int | None, pp: int | None,
                      dp: int | None, ep: int | None) -> Read:
    """csa-plan's ``tp pp dp ep`` once the engine spellings in ``given`` (spelling -> value, only those
    on the command line) are read as ``engines`` (the resolved --engine names) spell them."""
    if not given:
        return Read(tp, pp, dp, ep)
    first = next(iter(given))
    families = sorted({family(e) for e in engines})
    if not engines:
        raise BadInput("options", first, f"is {_whose(first)} spelling of {BY_SPELLING[first].option}: name the engine "
                       f"with --engine, or write csa-plan's {BY_SPELLING[first].option}")
    if len(families) > 1:
        raise BadInput("options", first, f"is {_whose(first)} spelling, and --engine names {', '.join(engines)}: "
                       f"write csa-plan's {BY_SPELLING[first].option}, which every engine reads alike")
    fam = families[0]
    for spelled in given:
        s = BY_SPELLING[spelled]
        if fam not in s.engines:
            instead = (engine_spelling(fam, s.option, s.switch) if fam in OWNER_NAME and
                       any(fam in o.engines and o.option == s.option and o.switch == s.switch for o in SPELLINGS)
                       else None)
            hint = f"{engines[0]} spells it {instead}" if instead else f"{engines[0]} has no such flag"
            if spelled == "--enable-dp-attention":
                hint = (f"{engines[0]}'s data-parallel ranks are data-parallel attention already: "
                        f"{engine_spelling(fam, '--dp')}" if fam == VLLM else f"{engines[0]} has no such flag")
            elif s.switch:
                hint = f"{engines[0]} spells it --ep-size N" if fam == SGLANG else hint
            raise BadInput("options", spelled, f"is {_whose(spelled)} spelling; {hint} (or csa-plan's {s.option})")
    values = {option: [(spelled, value) for spelled, value in given.items()
                       if BY_SPELLING[spelled].option == option and not BY_SPELLING[spelled].switch]
              for option in ("--tp", "--pp", "--dp", "--ep")}
    own = {"--tp": tp, "--pp": pp, "--dp": dp, "--ep": ep}
    merged: dict[str, int | None] = {}
    for option, spelled_values in values.items():
        pairs = ([(option, own[option])] if own[option] is not None else []) + spelled_values
        distinct = {int(v) for _, v in pairs}  # type: ignore[arg-type]
        if len(distinct) > 1:
            shown = " and ".join(f"{k} {v}" for k, v in pairs)
            raise BadInput("options", pairs[-1][0], f"given twice with different values: {shown}")
        merged[option] = pairs[0][1] if pairs else None  # type: ignore[assignment]
    note = None
    if fam == SGLANG:
        merged, note = _sglang(given, merged, own)
    elif any(BY_SPELLING[s].switch for s in given):  # vLLM --enable-expert-parallel: EP over tp x dp
        world = (merged["--tp"] or 1) * (merged["--dp"] or 1)
        if merged["--ep"] is not None and merged["--ep"] != world:
            raise BadInput("options", "--ep", f"{merged['--ep']} with --enable-expert-parallel, which makes it tp x dp = {world}")
        merged["--ep"] = world
        note = f"--enable-expert-parallel read as --ep {world} (tp x dp)"
    return Read(merged["--tp"], merged["--pp"], merged["--dp"], merged["--ep"], note)


def _sglang(given: Mapping[str, object], merged: dict[str, int | None],
            own: dict[str, int | None]) -> tuple[dict[str, int | None], str | None]:
    """SGLang's --tp-size is every GPU; --dp-size splits them only under --enable-dp-attention."""
    size = next((int(v) for s, v in given.items() if BY_SPELLING[s].option == "--tp"  # type: ignore[arg-type]
                 and not BY_SPELLING[s].switch), None)
    dp_size = next((int(v) for s, v in given.items() if BY_SPELLING[s].option == "--dp"  # type: ignore[arg-type]
                    and not BY_SPELLING[s].switch), None)
    attention = "--enable-dp-attention" in given
    if own["--tp"] is not None and attention:
        raise BadInput("options", "--tp", f"--tp {own['--tp']} with SGLang's spellings: SGLang reads --tp as --tp-size "
                       "(every GPU), csa-plan as the ranks of one data-parallel group; write SGLang's --tp-size "
                       "(with --dp-size --enable-dp-attention) or csa-plan's --tp --dp")
    if dp_size is not None and dp_size > 1 and not attention:
        raise BadInput("options", "--dp-size", f"{dp_size} without --enable-dp-attention runs {dp_size} separate "
                       "SGLang servers: plan one of them (drop --dp-size), or add --enable-dp-attention for "
                       "data-parallel attention")
    tp = size if size is not None else own["--tp"]
    dp = dp_size if dp_size is not None else own["--dp"]
    if not attention or (dp or 1) == 1:
        merged["--tp"], merged["--dp"] = tp, dp
        return merged, None
    world = tp or 1
    if world % dp:  # type: ignore[operator]
        raise BadInput("options", "--dp-size", f"{dp} does not divide --tp-size {world} (SGLang requires "
                       "tp_size % dp_size == 0 under --enable-dp-attention)")
    merged["--tp"], merged["--dp"] = world // dp, dp  # type: ignore[operator]
    return merged, (f"SGLang --tp-size {world} --dp-size {dp} --enable-dp-attention read as --tp {world // dp} "  # type: ignore[operator]
                    f"--dp {dp} ({world} GPUs)")


def _whose(spelled: str) -> str:
    engines = BY_SPELLING[spelled].engines
    return " and ".join(OWNER_NAME[e] for e in engines) + "'s"


def option_owner(spelled: str) -> tuple[str, ...]:
    """The engine families that spell an option so (empty: csa-plan's own, or another engine setting)."""
    s = BY_SPELLING.get(spelled)
    return s.engines if s is not None else ()


SUGGEST_CUTOFF = 0.7  # difflib ratio, dashes left out: '--tensor-parallel-size' is never '--page-size' (0.55)


def option_suggestions(typed: str, options: tuple[str, ...], engines: tuple[str, ...]) -> list[str]:
    """The options an unknown ``typed`` may have meant: close in spelling (``SUGGEST_CUTOFF``), and
    never another engine's spelling when ``--engine`` names one (SGLang's ``--page-size`` is not offered
    on vLLM)."""
    import difflib

    from csa_plan.planner.engines.settings import OPTION_SPELLING, OWNER

    families = {family(e) for e in engines}
    owners = {OPTION_SPELLING[name].partition("/")[0]: {OWNER[name].lower()} for name in OWNER}
    owners.update({s.spelled: set(s.engines) for s in SPELLINGS})
    pool = [o for o in options if not families or not owners.get(o) or owners[o] & families]
    bare = {o.lstrip("-"): o for o in pool}
    hits = difflib.get_close_matches(typed.partition("=")[0].lstrip("-"), list(bare), n=1, cutoff=SUGGEST_CUTOFF)
    return [bare[h] for h in hits]
