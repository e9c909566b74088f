"""Option types shared by every command: sizes, and strict non-negative integers."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from csa_plan.planner.errors import I63_LIMIT, BadInput, CsaPlanError


class SizeType(click.ParamType):
    """``--device-memory`` / ``--reserved`` / ``--limit``: bytes, GB, GiB or a GPU name."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        from csa_plan.planner.memory import parse_size

        option = param.opts[0] if param else "size"
        try:
            return parse_size(str(value), option)
        except BadInput as exc:
            self.fail(exc.problem, param, ctx)


class CountType(click.ParamType):
    """A non-negative integer below 2^63, as people type it: ``128k``, ``128K``, ``1e6``, ``1,000,000``
    (planner/amounts.py); 0 is allowed (the gate decides whether it is usable)."""

    name = "INT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                self.fail(f"{value} is negative", param, ctx)
            if value >= I63_LIMIT:
                self.fail(f"{value} is too large (must be below 2^63)", param, ctx)
            return value
        from csa_plan.planner.amounts import parse_count

        option = param.opts[0] if param else "count"
        try:
            return parse_count(str(value), "options", option)
        except BadInput as exc:
            self.fail(exc.problem, param, ctx)


class SuggestChoice(click.Choice):
    """A choice matched without regard to case; a miss names the closest choice (did you mean)."""

    def __init__(self, choices: Any) -> None:
        super().__init__(list(choices), case_sensitive=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        for choice in self.choices:
            if text.casefold() == str(choice).casefold():
                return choice
        from csa_plan.planner.suggest import unknown_problem

        self.fail(unknown_problem("value", text, self.choices), param, ctx)


class CacheFormatName(click.ParamType):
    """``--kv-format``: a known cache format name. On the command line anything else is bad
    input with a suggestion; an unknown format inside a model file stays the gate's typed
    refusal (UnknownCacheFormat)."""

    name = "FORMAT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from csa_plan.planner.descriptor import CACHE_FORMAT_NAMES
        from csa_plan.planner.suggest import unknown_problem

        text = str(value).strip()
        for known in CACHE_FORMAT_NAMES:
            if text.casefold() == known:
                return known
        self.fail(unknown_problem("cache format", text, CACHE_FORMAT_NAMES), param, ctx)


class FloatType(click.ParamType):
    """A finite decimal number at most ``high`` (``nan``, ``inf``, ``1e300`` are refused); the
    lower bound (positive, non-negative) is the domain type's to check and name."""

    name = "FLOAT"

    def __init__(self, high: float) -> None:
        self.low, self.high, self.low_open = -high, high, False

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from csa_plan.planner.values import check_range, parse_float_text

        option = param.opts[0] if param else "value"
        try:
            if isinstance(value, float):
                return check_range("options", option, value, low=self.low, high=self.high, low_open=self.low_open)
            return parse_float_text("options", option, str(value), low=self.low, high=self.high,
                                    low_open=self.low_open)
        except BadInput as exc:
            self.fail(exc.problem, param, ctx)


SIZE = SizeType()
COUNT = CountType()
CACHE_FORMAT = CacheFormatName()

TOKENS_HELP = "k/m = powers of ten, K/M = powers of two, as vLLM's --max-model-len: 128k = 128,000, 128K = 131,072"


def enum_choice(enum: type) -> click.Choice:
    """A click choice whose values are the enum's: the list is never written by hand."""
    return SuggestChoice([member.value for member in enum])


MAX_MESSAGE_CHARS = 600


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line of at most ``limit`` characters: the middle of an overlong message is elided."""
    from csa_plan.planner.text import printable

    if len(text) > 8 * limit:  # bounded work on an unbounded message
        text = text[:4 * limit] + " ... " + text[-4 * limit:]
    text = printable(" ".join(text.split()))
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def bad_input_exits(func: Callable[..., int]) -> Callable[..., int]:
    """Turn a ``CsaPlanError`` raised anywhere below a command into one line and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return func(*args, **kwargs)
        except CsaPlanError as exc:
            from csa_plan.cli.error_doc import tell_failure

            tell_failure(f"error: {one_line(str(exc))}", int(exc.exit_code), bool(kwargs.get("as_json")))
            sys.exit(int(exc.exit_code))

    return wrapper


# -- engine settings: one decorator, spelled as the engines spell them ------------------------

ENGINE_OPTION_NAMES = ("engine", "kv_memory", "gpu", "block_size", "page_size", "kv_cache_dtype", "indexer_kv_dtype",
                       "max_num_batched_tokens", "chunked_prefill_size", "max_num_seqs", "max_running_requests",
                       "async_scheduling", "num_speculative_tokens", "speculative_num_steps",
                       "speculative_eagle_topk", "speculative_num_draft_tokens", "gpu_memory_utilization",
                       "mem_fraction_static", "moe_runner_backend", "shared_expert_tp1", "usage")


class EngineOption(click.Option):
    """``--engine``: its help names the registry's engines, read when help is shown, so that parsing a
    command never imports the engine models (start-up: docs/check.md)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from csa_plan.planner.engines.registry import ENGINES

        self.help = (f"Plan as this engine release does: {', '.join(ENGINES)} (docs/engines.md)"
                     + ("; repeat it to run engines side by side." if self.multiple else "."))
        return super().get_help_record(ctx)


def engine_options(func: Callable[..., Any] | None = None, *, multiple: bool = False) -> Any:
    """Add ``--engine`` and every engine setting; the command receives ``engine`` (a name or
    None), ``kv_memory`` (bytes or None) and ``engine_settings`` (an EngineSettings). With
    ``multiple`` (``@engine_options(multiple=True)``), ``--engine`` may be repeated and the command
    also receives ``engines`` (every name given, in order; ``engine`` is the first)."""
    if func is None:
        return functools.partial(engine_options, multiple=multiple)
    options = [
        click.option("--engine", cls=EngineOption, default=None, metavar="NAME", multiple=multiple),
        click.option("--kv-memory", type=SIZE, default=None,
                     help="KV cache memory per device, as the engine logs it (vLLM: 'Available KV cache memory')."),
        click.option("--gpu", default=None, metavar="NAME",
                     help="Target GPU for engine rules and defaults; alone it also sets --device-memory "
                          "(docs/gpus.md) [default: the --device-memory card, else h200]."),
        click.option("--block-size", type=COUNT, default=None, help="vLLM --block-size [default: 256 for DeepSeek-V4]."),
        click.option("--page-size", type=COUNT, default=None, help="SGLang --page-size [default: 256 for DeepSeek-V4]."),
        click.option("--kv-cache-dtype", default=None, metavar="DTYPE", help="Engine --kv-cache-dtype [default: auto]."),
        click.option("--indexer-kv-dtype", default=None, metavar="DTYPE",
                     help="Indexer key cache: vLLM auto|fp8|mxfp4, SGLang fp8|fp4 [default: fp8]."),
        click.option("--max-num-batched-tokens", type=COUNT, default=None,
                     help="vLLM --max-num-batched-tokens [default: 8192 for vllm serve on an H200]."),
        click.option("--chunked-prefill-size", type=COUNT, default=None,
                     help="SGLang --chunked-prefill-size [default: 8192 on an H200]."),
        click.option("--max-num-seqs", type=COUNT, default=None, help="vLLM --max-num-seqs [default: 1024]."),
        click.option("--max-running-requests", type=COUNT, default=None,
                     help="SGLang --max-running-requests [default: 256 for DeepSeek-V4]."),
        click.option("--async-scheduling/--no-async-scheduling", default=None,
                     help="vLLM async scheduling [default: on]: two batches in flight."),
        click.option("--num-speculative-tokens", type=COUNT, default=None,
                     help="vLLM MTP speculative decoding with N draft tokens a step [default: off]."),
        click.option("--speculative-num-steps", type=COUNT, default=None,
                     help="SGLang EAGLE/MTP draft steps (draft tokens = steps + 1 at top-k 1) [default: off]."),
        click.option("--speculative-eagle-topk", type=COUNT, default=None,
                     help="SGLang draft branches a step (DeepSeek-V4: 1) [default: 1 with --speculative-num-steps]."),
        click.option("--speculative-num-draft-tokens", type=COUNT, default=None,
                     help="SGLang tokens verified a step [default: --speculative-num-steps + 1]."),
        click.option("--gpu-memory-utilization", type=float, default=None, help="vLLM fraction of the card [default: 0.92]."),
        click.option("--mem-fraction-static", type=float, default=None, help="SGLang static memory fraction."),
        click.option("--moe-runner-backend", default=None, metavar="NAME",
                     help="SGLang MoE runner: auto | flashinfer_mxfp4 | marlin (how FP4 experts shard) [default: auto]."),
        click.option("--shared-expert-tp1", is_flag=True, default=None,
                     help="SGLang run with SGLANG_SHARED_EXPERT_TP1=1: the shared expert replicated on every rank "
                          "(lifts its 128-column block rule) [default: off]."),
        click.option("--usage", type=click.Choice(["serve", "llm"]), default=None,
                     help="vLLM usage context for its defaults: vllm serve or the LLM class [default: serve]."),
    ]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from csa_plan.planner.engines.settings import EngineSettings

        values = {name: kwargs.pop(name) for name in ENGINE_OPTION_NAMES}
        engine, kv_memory = values.pop("engine"), values.pop("kv_memory")
        names = tuple(engine) if multiple else ((engine,) if engine is not None else ())
        if names:
            from csa_plan.planner.engines.registry import resolve_engine_name

            resolved = []
            for name in names:
                name, note = resolve_engine_name(name)
                if note:
                    click.echo(f"note: {note}", err=True)
                resolved.append(name)
            names = tuple(resolved)
        engine = names[0] if names else None
        if multiple:
            kwargs["engines"] = names
        gpu = values.pop("gpu")
        if "device_memory" in kwargs:  # one target GPU: a card named by either option names it for both
            from csa_plan.planner.cards import resolve_target

            given_gpu = gpu
            kwargs["device_memory"], card = resolve_target(kwargs["device_memory"], gpu)
            if card is not None and given_gpu is None and engine is not None:
                from csa_plan.planner.engines.registry import get_engine

                if "gpu" in get_engine(engine).options:  # an engine with no --gpu is not given one
                    gpu = card.name
            if kwargs["device_memory"] is not None:
                values["gpu_memory_bytes"] = int(kwargs["device_memory"])
        settings = EngineSettings(gpu=gpu, **values)
        if engine is None and (kv_memory is not None or settings.given()):
            from csa_plan.planner.errors import BadInput
            from csa_plan.planner.engines.settings import OPTION_SPELLING

            others = [n for n in settings.given() if n != "gpu" or "device_memory" not in kwargs]
            if kv_memory is not None or others:
                given = "--kv-memory" if kv_memory is not None else OPTION_SPELLING[others[0]]
                raise BadInput("options", given, "is an engine setting: name the engine with --engine")
        return func(*args, engine=engine, kv_memory=kv_memory, engine_settings=settings, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


# -- deployment: one decorator for check, compare, simulate and sweep ----------------------------

DEPLOYMENT_OPTION_NAMES = ("tp", "pp", "dp", "ep", "weights", "reserved", "budget_plot")


def deployment_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--tp --pp --dp --ep --weights --reserved --budget-plot``; the command receives
    ``deployment`` (a planner Deployment; None fields = the command's or engine's default) and
    ``budget_plot`` (a path or None)."""
    options = [
        click.option("--tp", type=COUNT, default=None,
                     help="Tensor-parallel ranks per data-parallel rank: attention heads split [default: 1]."),
        click.option("--pp", type=COUNT, default=None, help="Pipeline stages (contiguous layer split) [default: 1]."),
        click.option("--dp", type=COUNT, default=None,
                     help="Data-parallel attention ranks, each serving its own requests [default: 1]."),
        click.option("--ep", type=COUNT, default=None,
                     help="Expert-parallel ranks over the tp x dp GPUs [default: the engine's]."),
        click.option("--weights", type=SIZE, default=None,
                     help="Weights per device (replaces the tensor inventory / checkpoint figure)."),
        click.option("--reserved", type=SIZE, default=None,
                     help="Engine buffers, activations and CUDA graphs per device (replaces the engine rules' "
                          "figures) [default: from the engine's start-up rules]."),
        click.option("--budget-plot", default=None, metavar="FILE.png",
                     help="Draw the device budget as a waterfall (needs matplotlib: csa-plan[plot])."),
    ]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from csa_plan.planner.budget.deployment import Deployment

        v = {name: kwargs.pop(name) for name in DEPLOYMENT_OPTION_NAMES}
        if v["budget_plot"] is not None:
            from csa_plan.planner.files import check_output_path

            check_output_path(v["budget_plot"], "--budget-plot")  # before any work
            from csa_plan.cli.plots import require_plotting

            require_plotting("--budget-plot")
        deployment = Deployment(tp=v["tp"], pp=v["pp"], dp=v["dp"], ep=v["ep"], weights_bytes=v["weights"],
                                reserved_bytes=v["reserved"])
        return func(*args, deployment=deployment, budget_plot=v["budget_plot"], **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
