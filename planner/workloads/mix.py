"""Workloads: a YAML request mix, an Azure-format CSV trace, or JSONL requests.

Every reader returns a ``Workload`` of parallel integer arrays: arrival time in
nanoseconds from the first request (so trace timestamps with 7 fractional digits
stay exact), prompt and output tokens, and a request-class id. Readers are
strict: a malformed row is bad input naming its line, never skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.suggest import unknown_problem
from csa_plan.planner.values import check_keys, shown_against, read_int, read_mapping, read_number, read_str
from csa_plan.planner.limits import MAX_RATE_SCALE, MIN_RATE_SCALE

if TYPE_CHECKING:  # numpy is imported lazily so the CLI's --help stays fast
    import numpy as np

from csa_plan.planner.units import NS_PER_S
from csa_plan.planner.workloads.workload import MAX_ARRIVAL_S, MAX_GENERATED_REQUESTS, MAX_RATE_PER_S, MAX_SIGMA, MIN_RATE_PER_S, MixSettings, Workload

# -- generated mixes ----------------------------------------------------------------------

MIX_KEYS = {"name", "seed", "requests", "duration_s", "classes", "model", "layout", "max_seq_len", "deployment",
            "memory", "reserve", "bucket", "policy", "time", "rate_scale", "max_concurrency", "spec_acceptance"}
CLASS_KEYS = {"name", "rate", "prompt", "output"}
MIX_SLICE = 1 << 19  # requests drawn together (bounds the temporaries)
FLOAT_BELOW_2_63 = 9223372036854774784.0  # nextafter(2^63, 0): converts to int64 exactly
DISTRIBUTIONS = {
    "fixed": ({"value"}, set()),
    "uniform": ({"low", "high"}, set()),
    "lognormal": ({"median", "sigma"}, {"min", "max"}),
    "empirical": ({"values"}, {"weights"}),
}








def _settings(data: Mapping[str, Any], source: str) -> MixSettings:
    from csa_plan.planner.memory import parse_size

    out: dict[str, Any] = {}
    if "model" in data:
        out["model"] = read_str(source, "model", data["model"])
    if "layout" in data:
        out["layout"] = read_str(source, "layout", data["layout"])
    if "max_seq_len" in data:
        out["max_seq_len"] = read_int(source, "max_seq_len", data["max_seq_len"])
    if "deployment" in data:
        dep = read_mapping(source, "deployment", data["deployment"])
        check_keys(source, "deployment", dep, {"tp", "pp", "dp", "ep", "router"})
        for k in ("tp", "pp", "dp", "ep"):
            if k in dep:
                out[k] = read_int(source, f"deployment.{k}", dep[k])
        if "router" in dep:
            out["router"] = read_str(source, "deployment.router", dep["router"])
    if "memory" in data:
        mem = read_mapping(source, "memory", data["memory"])
        check_keys(source, "memory", mem, {"device", "reserved", "weights"})
        if "device" in mem:
            out["device_memory_bytes"] = parse_size(str(mem["device"]), source, "memory.device")
        if "reserved" in mem:
            out["reserved_bytes"] = parse_size(str(mem["reserved"]), source, "memory.reserved")
        if "weights" in mem:
            out["weights_bytes"] = parse_size(str(mem["weights"]), source, "memory.weights")
    for k in ("reserve", "policy"):
        if k in data:
            out[k] = read_str(source, k, data[k])
    if "bucket" in data:
        out["bucket"] = read_int(source, "bucket", data["bucket"])
    if "spec_acceptance" in data:
        out["spec_acceptance"] = read_number(source, "spec_acceptance", data["spec_acceptance"], positive=True)
    if "max_concurrency" in data:
        out["max_concurrency"] = read_int(source, "max_concurrency", data["max_concurrency"])
    if "rate_scale" in data:
        out["rate_scale"] = read_number(source, "rate_scale", data["rate_scale"], positive=True,
                                        at_least=MIN_RATE_SCALE, at_most=MAX_RATE_SCALE)
    if "time" in data:
        tm = read_mapping(source, "time", data["time"])
        check_keys(source, "time", tm, {"prefill_tok_s", "tpot_ms", "step_time"})
        if "step_time" in tm:
            out["step_time"] = read_str(source, "time.step_time", tm["step_time"])
        if "prefill_tok_s" in tm:
            out["prefill_tok_s"] = read_number(source, "time.prefill_tok_s", tm["prefill_tok_s"], positive=True)
        if "tpot_ms" in tm:
            out["tpot_ms"] = read_number(source, "time.tpot_ms", tm["tpot_ms"])
    return MixSettings(**out)


@dataclass(frozen=True)
class Distribution:
    """A token-length distribution; ``params`` are validated by ``parse_distribution``."""

    kind: str
    params: tuple[tuple[str, Any], ...]

    def sample(self, rng: Any, n: int) -> "np.ndarray":
        import numpy as np

        p = dict(self.params)
        if self.kind == "fixed":
            return np.full(n, p["value"], dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(p["low"], p["high"], size=n, endpoint=True, dtype=np.int64)
        if self.kind == "lognormal":
            raw = rng.lognormal(mean=math.log(p["median"]), sigma=p["sigma"], size=n)
            hi = p.get("max")
            # the cap is applied in floats below 2^63 (the largest double under 2^63), then exactly
            # in integers, so a max near 2^63 never overflows the cast
            cap = min(float(hi), FLOAT_BELOW_2_63) if hi is not None else 1e15
            out = np.rint(np.minimum(raw, cap)).astype(np.int64)
            if hi is not None:
                out = np.minimum(out, hi)
            return np.maximum(out, p.get("min", 1))
        values = np.array(p["values"], dtype=np.int64)
        weights = p.get("weights")
        prob = None
        if weights is not None:
            w = np.array(weights, dtype=float) / max(weights)  # scale first: a sum of huge weights must not overflow
            prob = w / w.sum()
        return values[rng.choice(len(values), size=n, p=prob)]


def parse_distribution(value: Any, source: str, field: str) -> Distribution:
    data = read_mapping(source, field, value)
    kind = data.get("dist")
    if not isinstance(kind, str) or kind not in DISTRIBUTIONS:
        raise BadInput(source, f"{field}.dist",
                       unknown_problem("distribution", kind, DISTRIBUTIONS))
    required, optional = DISTRIBUTIONS[kind]
    check_keys(source, field, data, required | optional | {"dist"})
    absent = sorted(required - set(data))
    if absent:
        raise BadInput(source, f"{field}.{absent[0]}", f"required by the {kind} distribution")
    params: dict[str, Any] = {}
    if kind == "fixed":
        params["value"] = read_int(source, f"{field}.value", data["value"])
    elif kind == "uniform":
        low = read_int(source, f"{field}.low", data["low"])
        high = read_int(source, f"{field}.high", data["high"])
        if high < low:
            raise BadInput(source, f"{field}.high", f"must be at least low ({low}), got {high}")
        params.update(low=low, high=high)
    elif kind == "lognormal":
        params["median"] = read_number(source, f"{field}.median", data["median"], positive=True)
        params["sigma"] = read_number(source, f"{field}.sigma", data["sigma"])
        if params["sigma"] > MAX_SIGMA:
            raise BadInput(source, f"{field}.sigma", f"must be at most {MAX_SIGMA:g}, got {shown_against(params['sigma'], MAX_SIGMA)}")
        for k in ("min", "max"):
            if k in data:
                params[k] = read_int(source, f"{field}.{k}", data[k])
        if params.get("max") is not None and params["max"] < params.get("min", 1):
            raise BadInput(source, f"{field}.max", "must be at least min")
    else:
        values = data["values"]
        if not isinstance(values, list) or not values:
            raise BadInput(source, f"{field}.values", "expected a non-empty list of token counts")
        params["values"] = tuple(read_int(source, f"{field}.values[{i}]", v) for i, v in enumerate(values))
        if "weights" in data:
            weights = data["weights"]
            if not isinstance(weights, list) or len(weights) != len(values):
                raise BadInput(source, f"{field}.weights", "expected one weight per value")
            ws = tuple(read_number(source, f"{field}.weights[{i}]", w) for i, w in enumerate(weights))
            if sum(ws) <= 0:
                raise BadInput(source, f"{field}.weights", "must not all be zero")
            params["weights"] = ws
    return Distribution(kind, tuple(sorted(params.items())))


@dataclass(frozen=True)
class RequestClass:
    name: str
    rate_per_s: float
    prompt: Distribution
    output: Distribution


def parse_mix(data: Any, source: str) -> tuple[tuple[RequestClass, ...], int, int | None, float | None, MixSettings]:
    """(classes, seed, requests, duration_s, settings) from a mix spec mapping."""
    mix = read_mapping(source, "", data)
    check_keys(source, "", mix, MIX_KEYS)
    raw_classes = mix.get("classes")
    if not isinstance(raw_classes, list) or not raw_classes:
        raise BadInput(source, "classes", "expected a non-empty list of request classes")
    classes = []
    for i, raw in enumerate(raw_classes):
        where = f"classes[{i}]"
        c = read_mapping(source, where, raw)
        check_keys(source, where, c, CLASS_KEYS)
        for k in ("rate", "prompt", "output"):
            if k not in c:
                raise BadInput(source, f"{where}.{k}", "missing")
        name = read_str(source, f"{where}.name", c.get("name", f"class{i}"))
        rate = read_number(source, f"{where}.rate", c["rate"], positive=True)
        if not MIN_RATE_PER_S <= rate <= MAX_RATE_PER_S:
            raise BadInput(source, f"{where}.rate",
                           f"must be between {MIN_RATE_PER_S:g} and {MAX_RATE_PER_S:g} requests/s, got {shown_against(rate, MIN_RATE_PER_S, MAX_RATE_PER_S)}")
        classes.append(RequestClass(name, rate, parse_distribution(c["prompt"], source, f"{where}.prompt"),
                                    parse_distribution(c["output"], source, f"{where}.output")))
    seed = read_int(source, "seed", mix.get("seed", 0))
    requests = read_int(source, "requests", mix["requests"]) if "requests" in mix else None
    duration = read_number(source, "duration_s", mix["duration_s"], positive=True) if "duration_s" in mix else None
    if (requests is None) == (duration is None):
        raise BadInput(source, "requests", "give exactly one of requests (a count) or duration_s")
    if requests is not None and not 0 < requests <= MAX_GENERATED_REQUESTS:
        raise BadInput(source, "requests", f"must be 1..{MAX_GENERATED_REQUESTS}, got {requests}")
    return tuple(classes), seed, requests, duration, _settings(mix, source)


def generate_mix(data: Any, source: str) -> Workload:
    """Poisson arrivals at the summed rate, each request's class drawn by rate share.

    With ``requests: N`` exactly N requests are drawn; with ``duration_s`` the count
    is Poisson(rate x duration) over that span. The seed fixes everything.

    Drawn a slice at a time into columns allocated once (arrival int64, tokens int32 while
    every count is below 2^30, class ids as narrow as the class count allows), in the same
    order as one draw of each kind for all requests (gaps, classes, then each class's prompt
    and output lengths): numpy's generators fill arrays element by element, so a slice at a
    time gives the very same numbers, and a mix of 10,000,000 requests never holds a
    full-size temporary.
    """
    import numpy as np

    from csa_plan.planner.workloads.columnar import NARROW_TOKENS, narrow_int_dtype

    classes, seed, requests, duration, settings = parse_mix(data, source)
    rng = np.random.default_rng(seed)
    total_rate = sum(c.rate_per_s for c in classes)
    if requests is None:
        assert duration is not None
        expected = total_rate * duration
        if expected > MAX_GENERATED_REQUESTS:
            raise BadInput(source, "duration_s", f"would generate about {expected:.3g} requests "
                           f"(limit {MAX_GENERATED_REQUESTS})")
        requests = int(rng.poisson(expected))
        if requests > MAX_GENERATED_REQUESTS:
            raise BadInput(source, "duration_s", f"would generate {requests} requests (limit {MAX_GENERATED_REQUESTS})")
        if requests == 0:
            raise BadInput(source, "duration_s", "the mix generates no request in that duration")
    arrival = np.empty(requests, dtype=np.int64)
    seconds = 0.0  # the running sum of the gaps (the first gap is 0)
    with np.errstate(over="ignore", invalid="ignore"):  # a span beyond the clock is refused below
        for lo in range(0, requests, MIX_SLICE):
            g = rng.exponential(1.0 / total_rate, size=min(MIX_SLICE, requests - lo))
            if lo == 0:
                g[0] = 0.0
            else:
                g[0] += seconds  # the carry first: the same additions, in the same order, as one cumsum
            np.cumsum(g, out=g)
            seconds = float(g[-1])
            g *= NS_PER_S
            np.rint(g, out=g)
            arrival[lo:lo + len(g)] = g
    if not seconds <= MAX_ARRIVAL_S:
        raise BadInput(source, "classes", f"arrivals would span {seconds:.3g} s, beyond the int64 nanosecond "
                       "clock; raise the rates or generate fewer requests")
    shares = np.array([c.rate_per_s for c in classes]) / total_rate
    class_ids = np.empty(requests, dtype=narrow_int_dtype(len(classes)))
    for lo in range(0, requests, MIX_SLICE):
        class_ids[lo:lo + MIX_SLICE] = rng.choice(len(classes), size=min(MIX_SLICE, requests - lo), p=shares)
    prompt = np.empty(requests, dtype=np.int32)
    output = np.empty(requests, dtype=np.int32)
    for k, c in enumerate(classes):
        for which in ("prompt", "output"):
            dist = c.prompt if which == "prompt" else c.output
            column = prompt if which == "prompt" else output
            for lo in range(0, requests, MIX_SLICE):
                mine = np.flatnonzero(class_ids[lo:lo + MIX_SLICE] == k)
                values = dist.sample(rng, len(mine))
                if column.dtype == np.int32 and len(values) and (int(values.max()) >= NARROW_TOKENS or
                                                                  int(values.min()) < -NARROW_TOKENS):
                    column = column.astype(np.int64)
                column[lo + mine] = values
            if which == "prompt":
                prompt = column
            else:
                output = column
    return Workload(source, arrival, prompt, output, class_ids, tuple(c.name for c in classes), settings=settings)
