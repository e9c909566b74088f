"""The GPU card table: one place for every card csa-plan names.

Each card carries what the planner reads from it, each with its source:

* ``memory_mib`` — the total the driver reports (``nvidia-smi`` memory.total, or ROCm's VRAM
  total for AMD), in MiB: what a runtime on that card sees, so ``--device-memory h100`` is
  exactly the budget vLLM's ``torch.cuda.mem_get_info`` starts from.
* ``capability`` — the compute capability as ``torch.cuda.get_device_capability`` returns it
  (NVIDIA's CUDA GPU table; ROCm's torch reports gfx942 as (9, 4)): engine rules read it
  (vLLM's MXFP4 indexer needs sm_10x).
* ``device_name`` — the name the driver reports (``torch.cuda.get_device_name``): vLLM's own
  default-batch rule matches on it ("a100" in the lower-cased name).
* ``vendor`` — "nvidia" or "amd": the engines' DeepSeek-V4 paths differ by platform.

API (kept small on purpose; other modules build on it):

* ``CARDS`` — name -> ``Card``; ``card(name)`` — the card, or bad input naming the known ones;
* ``find_card(text)`` — the card a size text names (``"H100"``, ``"h200"``), else None;
* ``DEFAULT_CARD`` — the card engine rules assume when none is named (h200).

A new card is one ``Card(...)`` line in ``_TABLE`` with its sources; nothing else changes.
"""

from __future__ import annotations


from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record

MIB = 1 << 20


@record
class Card:
    """A GPU as its driver reports it: what ``--gpu`` / ``--device-memory`` names stand for."""

    name: str                     # what users type: --gpu h100 / --device-memory h100
    device_name: str              # as the driver reports it (torch.cuda.get_device_name)
    memory_mib: int               # memory total as the driver reports it
    capability: tuple[int, int]   # torch.cuda.get_device_capability
    vendor: str                   # "nvidia" | "amd"
    memory_source: str
    capability_source: str

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def sm(self) -> str:
        """sm_90, sm_100, sm_120 (for AMD: the capability torch reports, e.g. sm_94 for gfx942)."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "device_name": self.device_name, "memory_mib": self.memory_mib,
                "memory_bytes": self.memory_bytes, "capability": list(self.capability), "vendor": self.vendor,
                "memory_source": self.memory_source, "capability_source": self.capability_source}


_CUDA_TABLE = "NVIDIA CUDA GPU compute capability table (developer.nvidia.com/cuda-gpus)"
_SMI = "nvidia-smi memory.total"

_TABLE: tuple[Card, ...] = (
    Card("h200", "NVIDIA H200", 143771, (9, 0), "nvidia",
         f"{_SMI} '143771MiB' (H200 SXM 141 GB, in public vLLM/SGLang issue logs)", _CUDA_TABLE),
    Card("h100", "NVIDIA H100 80GB HBM3", 81559, (9, 0), "nvidia",
         f"{_SMI} '81559MiB' (H100 SXM 80 GB; modal-labs/modal-client#2797 lists the same)", _CUDA_TABLE),
    Card("h800", "NVIDIA H800", 81559, (9, 0), "nvidia", f"{_SMI} '81559MiB' (H800 80 GB)", _CUDA_TABLE),
    Card("h20", "NVIDIA H20", 97871, (9, 0), "nvidia", f"{_SMI} '97871MiB' (H20 96 GB HBM3, public logs)",
         _CUDA_TABLE),
    Card("gh200", "NVIDIA GH200 480GB", 97871, (9, 0), "nvidia",
         f"{_SMI} '97871MiB' (GH200 with 96 GB HBM3, shown as 'GH200 480GB' / 'GH200 120GB')", _CUDA_TABLE),
    Card("gh200-144gb", "NVIDIA GH200 144G HBM3e", 145920, (9, 0), "nvidia",
         "cuDeviceTotalMem 153,008,209,920 B = 145920 MiB (GH200 144G HBM3e, a public driver test)", _CUDA_TABLE),
    Card("b200", "NVIDIA B200", 183359, (10, 0), "nvidia", f"{_SMI} '183359MiB' (B200 180 GB, public logs)",
         _CUDA_TABLE),
    Card("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "nvidia",
         f"{_SMI} '81920MiB' (modal-labs/modal-client#2797)", _CUDA_TABLE),
    Card("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), "nvidia",
         f"{_SMI} '40960MiB' (modal-labs/modal-client#2797)", _CUDA_TABLE),
    Card("l40s", "NVIDIA L40S", 46068, (8, 9), "nvidia", f"{_SMI} '46068MiB' (modal-labs/modal-client#2797)",
         _CUDA_TABLE),
    Card("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, (12, 0), "nvidia",
         f"{_SMI} '97887MiB' (RTX PRO 6000 Blackwell 96 GB, Server and Workstation Editions, public logs)",
         _CUDA_TABLE + "; sm_120 reported by torch on the card"),
    Card("mi300x", "AMD Instinct MI300X", 196288, (9, 4), "amd",
         "rocm-smi VRAM Total Memory 205,822,885,888 B = 196288 MiB (MI300X 192 GB, public logs)",
         "gfx942: torch on ROCm reports capability (9, 4)"),
)

CARDS: dict[str, Card] = {c.name: c for c in _TABLE}
ALIASES: dict[str, str] = {"h100-80gb": "h100", "gh200-96gb": "gh200", "rtx-pro-6000-blackwell": "rtx-pro-6000",
                           "h200-141gb": "h200", "b200-180gb": "b200"}
DEFAULT_CARD = "h200"


def find_card(text: str | None) -> Card | None:
    """The card ``text`` names (any case, aliases included), else None."""
    if text is None:
        return None
    key = text.strip().lower()
    return CARDS.get(ALIASES.get(key, key))


def card(name: str | None, source: str = "options", field: str = "--gpu") -> Card:
    """The card named ``name`` (``None``: the default card); an unknown name is bad input."""
    if name is None:
        return CARDS[DEFAULT_CARD]
    found = find_card(name)
    if found is None:
        from csa_plan.planner.suggest import did_you_mean_model

        shown = name.strip()[:40]
        raise BadInput(source, field, f"unknown GPU {shown!r} (known: {', '.join(CARDS)})"
                       f"{did_you_mean_model(name.strip(), list(CARDS) + list(ALIASES))}")
    return found


def card_names() -> list[str]:
    return list(CARDS) + list(ALIASES)


class CardBytes(int):
    """A byte count that a card name gave (``--device-memory h100``): the card travels with it, so
    the target GPU of engine rules and defaults is the card whose memory is budgeted."""

    card: Card

    def __new__(cls, named: Card) -> "CardBytes":
        value = super().__new__(cls, named.memory_bytes)
        value.card = named
        return value

    def __reduce__(self):  # pickles (sweep workers) as the card it names
        return (CardBytes, (self.card,))


def card_of(memory_bytes: int | None) -> Card | None:
    """The card a device memory figure names (a ``CardBytes``), else None."""
    return getattr(memory_bytes, "card", None)


def resolve_target(device_memory_bytes: int | None, gpu: str | None, source: str = "options",
                   memory_field: str = "--device-memory", gpu_field: str = "--gpu") -> tuple[int | None, Card | None]:
    """One target GPU from ``--device-memory`` and ``--gpu``: (device memory bytes, the card or None).

    A card named by either names it for both: ``--device-memory h100`` targets the H100's rules,
    ``--gpu h100`` alone budgets the H100's memory. ``--gpu`` naming another card than
    ``--device-memory``, or a device memory above what the named card has, is bad input (a figure
    below the card's is a part of it: MIG, or memory another process holds)."""
    named = card(gpu, source, gpu_field) if gpu is not None else None
    by_memory = card_of(device_memory_bytes)
    if named is not None and by_memory is not None and named.name != by_memory.name:
        raise BadInput(source, gpu_field, f"names {named.name} but {memory_field} names {by_memory.name}: "
                       "name one card (or give --device-memory in bytes)")
    if named is not None and device_memory_bytes is not None and device_memory_bytes > named.memory_bytes:
        raise BadInput(source, memory_field, f"{int(device_memory_bytes):,} bytes is more than the "
                       f"{named.name}'s {named.memory_bytes:,} ({named.memory_mib} MiB, {gpu_field} {named.name})")
    target = named or by_memory
    if device_memory_bytes is None and named is not None:
        return CardBytes(named), named
    return device_memory_bytes, target
