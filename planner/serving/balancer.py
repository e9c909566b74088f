"""How an engine release spreads requests over its data-parallel ranks: its own load balancer, line by line.

Each class here is one engine's dispatcher, ported from that release's code with the same inputs,
the same arithmetic and the same ties, so that ``serving/balanced.py`` can hand every request to the
rank the engine would pick at the moment it arrives. What a balancer reads about the ranks is state
the ranks *publish*, late; each class says when a rank publishes and when the dispatcher reads.

* **vLLM** (``DPLBAsyncMPClient``, used whenever ``--data-parallel-size`` > 1 with the internal load
  balancer: not configurable). Ranks publish (waiting, running, KV usage) before and after every step
  (``v1/engine/core.py:1626-1645``, 0.33.0); the DP coordinator forwards the latest counts to the
  front-end every ``min_stats_update_interval_ms`` = 100 ms while they change
  (``v1/engine/coordinator.py:152, 262-289``), and the front-end overwrites its table with them
  (``v1/engine/core_client.py:1589-1598``). Between two publications it adds its own guesses: each
  request it sends counts +1 waiting on its rank (``core_client.py:1800``).

  - 0.25, 0.26 (``core_client.py:1413-1444``, 0.25.0): score = 4 x waiting + running, the lowest wins,
    the scan starting one rank further on each request (ties rotate).
  - 0.27 to 0.34 (``core_client.py:1751-1813``, 0.33.0; 1818-1880 in 0.34.0, the same code): score =
    max(client_count x this client's requests in flight to the rank, waiting + running) plus
    ``6 x waiting x max(0, KV usage - 0.5)``; the in-flight count is exact (decremented on every finished
    request, ``core_client.py:1818-1826``), so a burst spreads round-robin. One API server here
    (``client_count`` 1, ``eng_start_index`` 0).

* **SGLang 0.5.23** (``managers/data_parallel_controller.py``), ``--load-balance-method``:
  ``auto`` (the default) resolves to ``round_robin`` outside prefill/decode disaggregation
  (``arg_groups/serving_hook.py:217-234``); ``round_robin`` cycles the active workers
  (``data_parallel_controller.py:880-899``); ``total_requests`` and ``total_tokens`` send to the rank of
  the fewest running + waiting requests, or of the fewest tokens (KV tokens in use plus the waiting
  requests' lengths, ``scheduler_components/load_inquirer.py:109-148``) with requests as the tie-break,
  the first such rank winning (``DPBudget.dispatch``, :141-156), and add +1 request and the prompt's
  tokens to the chosen rank's figures; ``follow_bootstrap_room`` sends a disaggregated prefill request
  to ``bootstrap_room % dp`` (:901-910), a room the router draws at random, and asserts without one:
  refused here. A rank writes its load snapshot after every prefill batch, every
  ``--load-snapshot-publish-interval`` (15) decode batches and when it falls idle
  (``managers/scheduler.py:871-886, 5082, 5322``); the controller reads the snapshots at most every
  20 ms, before a dispatch (``refresh_load_budget``, :346-361), and takes a rank's figures only when its
  snapshot is new (``DPBudget.update_budget``, :129-139), so its own +1s stand until then.

Simplifications (said in the replay's notes): the coordinator's publication clock starts with the run
and its step-boundary variant under wave coordination (``coordinator.py:380-390``) and every transport
delay are left out; SGLang's 50 ms stall refresh (``scheduler.py:5252-5262``) is left out, and so is the
overlap scheduler's one-batch lag in writing the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

VLLM_STATS_INTERVAL_NS = 100_000_000  # coordinator.py:152 min_stats_update_interval_ms = 100
VLLM_IDLE_PUBLISH_NS = 5_000_000_000  # coordinator.py:267: every 5 s when nothing changed
SGLANG_REFRESH_NS = 20_000_000  # data_parallel_controller.py:358: at most once per 20 ms
SGLANG_SNAPSHOT_INTERVAL = 15  # arg_groups/fields/observability.py:86-89 load_snapshot_publish_interval


class Method(Enum):
    """A load balancer as its engine release names it (``value``) where it can be named."""

    ROUND_ROBIN = "round_robin"
    TOTAL_REQUESTS = "total_requests"  # SGLang
    TOTAL_TOKENS = "total_tokens"  # SGLang
    VLLM_QUEUE = "vllm-queue-score"  # vLLM 0.25/0.26: 4 x waiting + running
    VLLM_INFLIGHT = "vllm-inflight-score"  # vLLM 0.27+: max(in flight, waiting + running) + KV-pressure penalty


SGLANG_CHOICES = ("auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens")


@dataclass(frozen=True)
class Balancer:
    """The balancer a replay uses, and the line its output shows."""

    method: Method
    label: str

    @property
    def round_robin(self) -> bool:
        return self.method is Method.ROUND_ROBIN

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method.value, "label": self.label}


def vllm_balancer(release: str) -> Balancer:
    """vLLM's DP load balancer for ``release`` (``vllm-0.33``): not configurable."""
    minor = int(release.split("-", 1)[1].split(".")[1])
    if minor <= 26:
        return Balancer(Method.VLLM_QUEUE, f"{release}'s DP load balancer (4 x waiting + running, the front-end's "
                                           "counts refreshed every 100 ms; not configurable in vLLM)")
    return Balancer(Method.VLLM_INFLIGHT, f"{release}'s DP load balancer (max(requests in flight, waiting + running) "
                                          "+ a KV-pressure penalty, counts refreshed every 100 ms; not configurable "
                                          "in vLLM)")


def sglang_balancer(method: str | None) -> Balancer:
    """SGLang 0.5.23's ``--load-balance-method`` (None: its default, ``auto`` = ``round_robin`` here).
    ValueError names what is wrong (the caller makes it bad input)."""
    given = "auto" if method is None else method
    if given not in SGLANG_CHOICES:
        raise ValueError(f"{given!r} is not a load-balance method of sglang-0.5.23 (choices: "
                         f"{', '.join(SGLANG_CHOICES)})")
    if given == "follow_bootstrap_room":
        raise ValueError("follow_bootstrap_room routes a disaggregated prefill request by the bootstrap room the "
                         "router draws for it (data_parallel_controller.py:901-910); a replay without "
                         "--disaggregation has no room: round_robin, total_requests or total_tokens")
    if given in ("auto", "round_robin"):
        why = "auto = round_robin outside disaggregation, the default" if given == "auto" else "given"
        return Balancer(Method.ROUND_ROBIN, f"--load-balance-method round_robin ({why})")
    return Balancer(Method(given), f"--load-balance-method {given} (the controller's load table, refreshed "
                                   "at most every 20 ms from snapshots the ranks write after prefill batches "
                                   f"and every {SGLANG_SNAPSHOT_INTERVAL} decode batches)")


# -- the dispatchers ---------------------------------------------------------------------------------------


class RoundRobin:
    """SGLang ``round_robin_scheduler`` (data_parallel_controller.py:880-899): every worker active."""

    # which of step_start / step_end read the rank's load (the replay computes a load only for those)
    reads_start_load = reads_end_load = False

    def __init__(self, dp: int) -> None:
        self.dp, self.counter = dp, 0

    def choose(self, now_ns: int, prompt_tokens: int) -> int:
        k = self.counter % self.dp
        self.counter = (self.counter + 1) % self.dp
        return k

    def step_start(self, k: int, now_ns: int, load: Any) -> None:
        pass

    def step_end(self, k: int, now_ns: int, prefill: bool, idle: bool, load: Any) -> None:
        pass

    def finished(self, k: int, count: int) -> None:
        pass


@dataclass(frozen=True)
class VllmLoad:
    """A rank's published counts (``SchedulerStats``: waiting, running, KV usage 0..1)."""

    waiting: int
    running: int
    kv_usage: float


def vllm_pick(counts: list[list[float]], inflight: list[int], start: int, method: Method,
              client_count: int = 1) -> int:
    """The rank ``get_core_engine_for_request`` picks from the front-end's table ``counts`` ([waiting,
    running, kv usage] per rank, 0.25/0.26: [waiting, running]), this client's ``inflight`` per rank and
    the scan's ``start`` (core_client.py:1768-1794, 0.33.0; 1420-1432, 0.25.0). Pure: the caller adds the
    +client_count waiting and moves ``start`` on, as the engine does after picking."""
    n = len(counts)
    best: float = float("inf")  # sys.maxsize there: every score is below it
    pick = 0
    for i in range(n):
        idx = (start + i) % n
        if method is Method.VLLM_QUEUE:
            waiting, running = counts[idx][0], counts[idx][1]
            score: float = waiting * 4 + running
        else:
            waiting, running, kv = counts[idx][0], counts[idx][1], counts[idx][2]
            score = max(client_count * inflight[idx], waiting + running)
            if waiting:
                score += waiting * 6.0 * max(0.0, kv - 0.5)
        if score < best:
            best, pick = score, idx
    return pick


class VllmDpLb:
    """``DPLBAsyncMPClient`` with one API server: the front-end's table, replaced by each publication of
    the coordinator, plus its own +1s. The coordinator publishes 100 ms after its last publication once a
    rank's counts changed, at once if they change later than that (its poll waits ``100 - elapsed``
    ms, never less than 0: coordinator.py:264-277), and every 5 s with nothing changed; what it publishes is
    each rank's counts as of its latest step start (core.py:1626-1627)."""

    reads_start_load, reads_end_load = True, False

    def __init__(self, dp: int, method: Method, start_ns: int) -> None:
        self.dp, self.method = dp, method
        self.table: list[list[float]] = [[0, 0, 0.0] for _ in range(dp)]  # core_client.py:1503-1505
        self.live: list[list[float]] = [[0, 0, 0.0] for _ in range(dp)]  # what each rank last published
        self.inflight = [0] * dp
        self.start = 0  # eng_start_index = dp x client_index // client_count = 0
        self.last_publish_ns = start_ns
        self.changed_ns: int | None = None  # the first change since the last publication
        self.publications = 0

    def _publish_until(self, now_ns: int) -> None:
        while True:
            if self.changed_ns is None:
                due = self.last_publish_ns + VLLM_IDLE_PUBLISH_NS
            else:
                due = max(self.last_publish_ns + VLLM_STATS_INTERVAL_NS, self.changed_ns)
            if due > now_ns:
                return
            self.table = [list(c) for c in self.live]
            self.last_publish_ns, self.changed_ns = due, None
            self.publications += 1

    def choose(self, now_ns: int, prompt_tokens: int) -> int:
        self._publish_until(now_ns)
        k = vllm_pick(self.table, self.inflight, self.start, self.method)
        self.table[k][0] += 1  # core_client.py:1800: client_count
        self.start = (self.start + 1) % self.dp
        self.inflight[k] += 1
        return k

    def step_start(self, k: int, now_ns: int, load: VllmLoad) -> None:
        """Rank ``k``'s counts before its step (core.py:1626-1627: sent when they changed)."""
        self._publish_until(now_ns - 1)  # a publication before this moment saw the earlier counts
        new = [load.waiting, load.running, load.kv_usage]
        if new != self.live[k]:
            self.live[k] = new
            if self.changed_ns is None:
                self.changed_ns = now_ns

    def step_end(self, k: int, now_ns: int, prefill: bool, idle: bool, load: Any) -> None:
        pass  # the after-step counts (core.py:1630) are superseded by the next step start's, at the same moment

    def finished(self, k: int, count: int) -> None:
        self.inflight[k] -= count  # core_client.py:1818-1826 (process_engine_outputs)


@dataclass(frozen=True)
class SglangLoad:
    """A rank's load snapshot as the controller reads it (``LoadSnapshot``)."""

    running: int
    waiting: int
    total_tokens: int  # KV tokens in use plus the waiting requests' lengths


class DPBudget:
    """``DPBudget`` (data_parallel_controller.py:122-156), line for line."""

    def __init__(self, dp: int) -> None:
        self.num_dp_ranks = dp
        self.total_requests = [0] * dp
        self.total_tokens = [0] * dp
        self.last_timestamp = [-1] * dp

    def update_budget(self, loads: list[tuple[int, int, SglangLoad]]) -> None:
        for rank, stamp, load in loads:
            if stamp == self.last_timestamp[rank]:
                continue
            self.last_timestamp[rank] = stamp
            self.total_requests[rank] = load.running + load.waiting
            self.total_tokens[rank] = load.total_tokens

    def dispatch(self, method: Method, estimated_tokens: int = 0) -> int:
        if method is Method.TOTAL_REQUESTS:
            target = self.total_requests.index(min(self.total_requests))
        else:
            target = min(range(self.num_dp_ranks), key=lambda i: (self.total_tokens[i], self.total_requests[i]))
        self.total_requests[target] += 1
        self.total_tokens[target] += estimated_tokens
        return target


class SglangDpController:
    """``DataParallelController`` with ``total_requests`` or ``total_tokens``: snapshots written by the
    ranks (after a prefill batch, every 15th decode batch, on falling idle), read at most every 20 ms."""

    reads_start_load, reads_end_load = False, True

    def __init__(self, dp: int, method: Method, start_ns: int) -> None:
        self.method = method
        self.budget = DPBudget(dp)
        self.snapshots: list[list[tuple[int, SglangLoad]]] = [[] for _ in range(dp)]  # (written at, load), in order
        self.decodes = [0] * dp  # publish_counter (scheduler.py:879-882)
        self.last_refresh_ns: int | None = None

    def choose(self, now_ns: int, prompt_tokens: int) -> int:
        if self.last_refresh_ns is None or now_ns - self.last_refresh_ns >= SGLANG_REFRESH_NS:
            self.last_refresh_ns = now_ns
            latest = []
            for rank, snaps in enumerate(self.snapshots):
                written = [s for s in snaps if s[0] <= now_ns]
                if written:
                    latest.append((rank, written[-1][0], written[-1][1]))
                self.snapshots[rank] = snaps[len(written) - 1:] if written else snaps
            self.budget.update_budget(latest)
        return self.budget.dispatch(self.method, prompt_tokens if self.method is Method.TOTAL_TOKENS else 0)

    def step_start(self, k: int, now_ns: int, load: Any) -> None:
        pass

    def step_end(self, k: int, now_ns: int, prefill: bool, idle: bool, load: "Callable[[], SglangLoad]") -> None:
        """Rank ``k``'s step ended at ``now_ns`` (``idle``: nothing running or waiting on it now): it writes a
        snapshot after a prefill batch (``force=is_extend``), every 15th decode batch, or on falling idle
        (scheduler.py:5322); ``load()`` gives the snapshot, asked only when one is written (most steps write
        none, and a replay steps every rank every step)."""
        if not prefill and not idle:
            self.decodes[k] += 1
            if self.decodes[k] < SGLANG_SNAPSHOT_INTERVAL:
                return
        self.decodes[k] = 0
        self.snapshots[k].append((now_ns, load()))

    def finished(self, k: int, count: int) -> None:
        pass


def dispatcher(balancer: Balancer, dp: int, start_ns: int) -> "RoundRobin | VllmDpLb | SglangDpController":
    m = balancer.method
    if m is Method.ROUND_ROBIN:
        return RoundRobin(dp)
    if m in (Method.VLLM_QUEUE, Method.VLLM_INFLIGHT):
        return VllmDpLb(dp, m, start_ns)
    return SglangDpController(dp, m, start_ns)
