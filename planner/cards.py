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
* ``perf`` — what the step-time roofline reads (``CardPerf``: HBM bandwidth, dense tensor
  throughput per dtype, the scale-up link and its domain), each row with its datasheet source;
  None where no figures are published here (no physics step time on that card).

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
TB = 1e12
GB = 1e9


@record
class CardPerf:
    """A card's datasheet figures for the step-time roofline (dense, not 2:4-sparse, tensor peaks;
    the scale-up link per GPU in one direction, half the bidirectional figure NVIDIA quotes)."""

    family: str             # the GPU generation a fit is shared across: "hopper", "blackwell", "ampere", ...
    hbm_bytes_s: float
    bf16_flops: float       # dense
    fp8_flops: float        # dense; 0 where the card has no FP8 tensor cores (the BF16 figure is used)
    fp4_flops: float        # dense; 0 where the card has no FP4 tensor cores
    link_bytes_s: float     # scale-up link, one direction, per GPU
    link_domain: int        # GPUs one scale-up domain joins (8 on an HGX board, 72 on an NVL72 rack)
    source: str

    @property
    def gemm_flops(self) -> float:
        """The GEMM peak the step's FP8 linears run at (BF16 where the card has no FP8)."""
        return self.fp8_flops or self.bf16_flops


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
    perf: CardPerf | None = None

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


_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM: 3.35 TB/s, 989 TF BF16 / 1,979 TF FP8 dense, NVLink 900 GB/s)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM: 4.8 TB/s, 989 TF BF16 / 1,979 TF FP8 dense, NVLink 900 GB/s)"
_B200 = "NVIDIA DGX B200 / HGX B200 datasheet (per GPU: 8 TB/s, 2.25 PF BF16 / 4.5 PF FP8 / 9 PF FP4 dense, NVLink 1.8 TB/s)"
_B300 = ("NVIDIA HGX B300 datasheet (8 GPUs: 72 PF FP8 and 36 PF BF16 with sparsity, 105 PF FP4 dense; per GPU "
         "8 TB/s HBM3e, NVLink 5 1.8 TB/s): per GPU 2.25 PF BF16 / 4.5 PF FP8 / 13 PF FP4 dense")
_GB200 = ("NVIDIA GB200 NVL72 datasheet (per superchip of 2 GPUs: 10 PF BF16 and 20 PF FP8 with sparsity, 16 TB/s "
          "HBM3e, NVLink 3.6 TB/s; one NVLink domain of 72 GPUs): per GPU 2.5 PF BF16 / 5 PF FP8 / 10 PF FP4 dense, "
          "8 TB/s, 1.8 TB/s")
_GB300 = ("NVIDIA GB300 NVL72 datasheet (rack: 360 PF BF16 and 720 PF FP8 with sparsity, 1,080 PF FP4 dense, "
          "576 TB/s HBM3e, NVLink 130 TB/s over 72 GPUs): per GPU 2.5 PF BF16 / 5 PF FP8 / 15 PF FP4 dense, 8 TB/s, "
          "1.8 TB/s")
_RTX6000 = ("NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (96 GB GDDR7 1,597 GB/s, 4 PF FP4 with sparsity; "
            "PCIe Gen5 x16 128 GB/s, no NVLink): 0.5 PF BF16 / 1 PF FP8 / 2 PF FP4 dense")


def _perf(family: str, hbm_tb_s: float, bf16_tf: float, fp8_tf: float, fp4_tf: float, link_gb_s: float,
          domain: int, source: str) -> CardPerf:
    return CardPerf(family, hbm_tb_s * TB, bf16_tf * TB, fp8_tf * TB, fp4_tf * TB, link_gb_s * GB, domain, source)


_HOPPER_8 = dict(bf16_tf=989, fp8_tf=1979, fp4_tf=0, link_gb_s=450, domain=8)
_PERF_H100 = _perf("hopper", 3.35, source=_H100, **_HOPPER_8)

_CUDA_TABLE = "NVIDIA CUDA GPU compute capability table (developer.nvidia.com/cuda-gpus)"
_SMI = "nvidia-smi memory.total"

_TABLE: tuple[Card, ...] = (
    Card("h200", "NVIDIA H200", 143771, (9, 0), "nvidia",
         f"{_SMI} '143771MiB' (H200 SXM 141 GB, in public vLLM/SGLang issue logs)", _CUDA_TABLE,
         _perf("hopper", 4.8, source=_H200, **_HOPPER_8)),
    Card("h100", "NVIDIA H100 80GB HBM3", 81559, (9, 0), "nvidia",
         f"{_SMI} '81559MiB' (H100 SXM 80 GB; modal-labs/modal-client#2797 lists the same)", _CUDA_TABLE, _PERF_H100),
    Card("h800", "NVIDIA H800", 81559, (9, 0), "nvidia", f"{_SMI} '81559MiB' (H800 80 GB)", _CUDA_TABLE,
         _perf("hopper", 3.35, 989, 1979, 0, 200, 8, _H100 + "; H800: NVLink 400 GB/s (NVIDIA's China SKU listing)")),
    Card("h20", "NVIDIA H20", 97871, (9, 0), "nvidia", f"{_SMI} '97871MiB' (H20 96 GB HBM3, public logs)",
         _CUDA_TABLE, _perf("hopper", 4.0, 148, 296, 0, 450, 8,
                            "NVIDIA H20 product brief (96 GB HBM3 4.0 TB/s, 148 TF BF16 / 296 TF FP8 dense, "
                            "NVLink 900 GB/s)")),
    Card("gh200", "NVIDIA GH200 480GB", 97871, (9, 0), "nvidia",
         f"{_SMI} '97871MiB' (GH200 with 96 GB HBM3, shown as 'GH200 480GB' / 'GH200 120GB')", _CUDA_TABLE,
         _perf("hopper", 4.0, 989, 1979, 0, 450, 8,
               "NVIDIA GH200 Grace Hopper datasheet (96 GB HBM3 4 TB/s; H100 tensor cores)")),
    Card("gh200-144gb", "NVIDIA GH200 144G HBM3e", 145920, (9, 0), "nvidia",
         "cuDeviceTotalMem 153,008,209,920 B = 145920 MiB (GH200 144G HBM3e, a public driver test)", _CUDA_TABLE,
         _perf("hopper", 4.9, 989, 1979, 0, 450, 8,
               "NVIDIA GH200 Grace Hopper datasheet (144 GB HBM3e 4.9 TB/s; H100 tensor cores)")),
    Card("b200", "NVIDIA B200", 183359, (10, 0), "nvidia", f"{_SMI} '183359MiB' (B200 180 GB, public logs)",
         _CUDA_TABLE, _perf("blackwell", 8.0, 2250, 4500, 9000, 900, 8, _B200)),
    Card("b300", "NVIDIA B300 SXM6 AC", 275040, (10, 3), "nvidia",
         f"{_SMI} '275040MiB' (B300 SXM6 AC 288 GB HBM3e, public logs of 8x B300 nodes, driver 580)",
         _CUDA_TABLE + ": GB300 and B300 are compute capability 10.3",
         _perf("blackwell", 8.0, 2250, 4500, 13000, 900, 8, _B300)),
    Card("gb200", "NVIDIA GB200", 189471, (10, 0), "nvidia",
         f"{_SMI} '189471MiB' (GB200 NVL72, 186 GB HBM3e per GPU, public logs, driver 580)",
         _CUDA_TABLE + ": GB200 and B200 are compute capability 10.0",
         _perf("blackwell", 8.0, 2500, 5000, 10000, 900, 72, _GB200)),
    Card("gb300", "NVIDIA GB300", 284208, (10, 3), "nvidia",
         f"{_SMI} '284208MiB' (GB300 NVL72, 288 GB HBM3e per GPU, public logs, driver 580)",
         _CUDA_TABLE + ": GB300 and B300 are compute capability 10.3",
         _perf("blackwell", 8.0, 2500, 5000, 15000, 900, 72, _GB300)),
    Card("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "nvidia",
         f"{_SMI} '81920MiB' (modal-labs/modal-client#2797)", _CUDA_TABLE,
         _perf("ampere", 2.039, 312, 0, 0, 300, 8,
               "NVIDIA A100 datasheet (80 GB SXM: 2,039 GB/s, 312 TF BF16 dense, NVLink 600 GB/s)")),
    Card("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), "nvidia",
         f"{_SMI} '40960MiB' (modal-labs/modal-client#2797)", _CUDA_TABLE,
         _perf("ampere", 1.555, 312, 0, 0, 300, 8,
               "NVIDIA A100 datasheet (40 GB SXM: 1,555 GB/s, 312 TF BF16 dense, NVLink 600 GB/s)")),
    Card("l40s", "NVIDIA L40S", 46068, (8, 9), "nvidia", f"{_SMI} '46068MiB' (modal-labs/modal-client#2797)",
         _CUDA_TABLE, _perf("ada", 0.864, 362, 733, 0, 32, 1,
                            "NVIDIA L40S datasheet (864 GB/s, 362 TF BF16 / 733 TF FP8 dense; PCIe Gen4 x16 64 GB/s)")),
    Card("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, (12, 0), "nvidia",
         f"{_SMI} '97887MiB' (RTX PRO 6000 Blackwell 96 GB, Server and Workstation Editions, public logs)",
         _CUDA_TABLE + "; sm_120 reported by torch on the card",
         _perf("blackwell-rtx", 1.597, 500, 1000, 2000, 64, 1, _RTX6000)),
    Card("mi300x", "AMD Instinct MI300X", 196288, (9, 4), "amd",
         "rocm-smi VRAM Total Memory 205,822,885,888 B = 196288 MiB (MI300X 192 GB, public logs)",
         "gfx942: torch on ROCm reports capability (9, 4)"),
)

CARDS: dict[str, Card] = {c.name: c for c in _TABLE}
ALIASES: dict[str, str] = {"h100-80gb": "h100", "gh200-96gb": "gh200", "rtx-pro-6000-blackwell": "rtx-pro-6000",
                           "h200-141gb": "h200", "b200-180gb": "b200", "b300-288gb": "b300",
                           "gb200-nvl72": "gb200", "gb300-nvl72": "gb300"}
DEFAULT_CARD = "h200"


@record
class Link:
    """A link KV moves over between two engine instances (``--transfer-link``): its line rate per GPU in
    one direction, and whether it joins only the GPUs of one scale-up domain (NVLink) or any two nodes."""

    name: str
    bytes_s: float | None   # per GPU, one direction; None: the card's own scale-up link (``CardPerf.link_bytes_s``)
    in_domain: bool         # True: both roles' GPUs must sit in one scale-up domain (``CardPerf.link_domain``)
    source: str


# One NIC per GPU, as the HGX / DGX reference designs wire them (8 NICs for 8 GPUs): the per-GPU figure is
# the NIC's line rate; achieved NIXL / Mooncake throughput is below it (the transfer seconds are a floor).
LINKS: dict[str, Link] = {link.name: link for link in (
    Link("nvlink", None, True, "the card's NVLink, one direction per GPU (CardPerf.link_bytes_s, its datasheet); "
                               "only inside one NVLink domain (8 GPUs on an HGX board, 72 on an NVL72 rack)"),
    Link("ib-ndr", 400e9 / 8, False, "NVIDIA ConnectX-7 NDR InfiniBand, 400 Gb/s per port, one port per GPU "
                                       "(DGX H100/H200 reference: 8x ConnectX-7 for 8 GPUs)"),
    Link("ib-xdr", 800e9 / 8, False, "NVIDIA ConnectX-8 SuperNIC XDR InfiniBand, 800 Gb/s per GPU (HGX B300 / "
                                       "GB300 NVL72 reference)"),
    Link("roce-400g", 400e9 / 8, False, "RoCEv2 at 400 Gb/s per GPU (NVIDIA Spectrum-X with ConnectX-7 / "
                                         "BlueField-3, one NIC per GPU)"),
)}


def default_link(gpus: int, domain: int) -> str:
    """NVLink when every GPU that talks sits in one scale-up domain (both roles of a disaggregated
    deployment; every stage of a pipeline), else the NIC per GPU (ib-ndr)."""
    return "nvlink" if gpus <= domain else "ib-ndr"


def link(name: str, gpu: Card, gpus: int, source: str = "options", field: str = "--transfer-link") -> tuple[Link, float]:
    """The link ``name`` between ``gpus`` GPUs of ``gpu`` and its bytes/s per GPU: bad input for an unknown
    link, NVLink on a card without a scale-up figure, or NVLink across more GPUs than one domain joins."""
    found = LINKS.get(name.strip().lower())
    if found is None:
        raise BadInput(source, field, f"unknown link {name.strip()[:40]!r} (known: {', '.join(LINKS)})")
    if found.bytes_s is not None:
        return found, found.bytes_s
    perf = gpu.perf
    if perf is None or perf.link_domain <= 1:
        raise BadInput(source, field, f"nvlink: the {gpu.name} has no NVLink domain in the card table (PCIe only); "
                                      f"name a network link ({', '.join(n for n in LINKS if n != 'nvlink')})")
    if gpus > perf.link_domain:
        raise BadInput(source, field, f"nvlink joins at most {perf.link_domain} {gpu.name} GPUs (one NVLink domain); "
                                      f"the two roles take {gpus}: name a network link "
                                      f"({', '.join(n for n in LINKS if n != 'nvlink')})")
    return found, perf.link_bytes_s


@record
class HostSide:
    """What a host KV tier reads of a card's host: the HBM<->host link per GPU (one direction) and the host
    memory per GPU of the reference node (its DRAM over its GPUs)."""

    link: str
    link_bytes_s: float
    host_memory_bytes_per_gpu: int
    source: str


_PCIE5 = "PCIe Gen5 x16: 64 GB/s per direction (PCI-SIG; the card's datasheet lists PCIe Gen5 128 GB/s bidirectional)"
_PCIE4 = "PCIe Gen4 x16: 32 GB/s per direction (PCI-SIG; the card's datasheet lists PCIe Gen4 64 GB/s)"
_C2C = "NVLink-C2C: 900 GB/s bidirectional, 450 GB/s per direction (NVIDIA Grace Hopper / Grace Blackwell datasheets)"
_DGX8_2TB = "DGX H100/H200 datasheet: 2 TB system memory for 8 GPUs"
HOSTS: dict[str, HostSide] = {
    "h100": HostSide("pcie5", 64e9, 2 * 10**12 // 8, f"{_PCIE5}; {_DGX8_2TB}"),
    "h200": HostSide("pcie5", 64e9, 2 * 10**12 // 8, f"{_PCIE5}; {_DGX8_2TB}"),
    "h800": HostSide("pcie5", 64e9, 2 * 10**12 // 8, f"{_PCIE5}; HGX H800 8-GPU servers, 2 TB as DGX H100"),
    "h20": HostSide("pcie5", 64e9, 2 * 10**12 // 8, f"{_PCIE5}; HGX H20 8-GPU servers, 2 TB as DGX H100"),
    "b200": HostSide("pcie5", 64e9, 4 * 10**12 // 8, f"{_PCIE5}; DGX B200 datasheet: 4 TB system memory, 8 GPUs"),
    "b300": HostSide("pcie6", 128e9, 4 * 10**12 // 8, "PCIe Gen6 x16: 128 GB/s per direction; DGX B300: 4 TB, 8 GPUs"),
    "gh200": HostSide("nvlink-c2c", 450e9, 480 * 10**9, f"{_C2C}; GH200: 480 GB LPDDR5X per superchip (1 GPU)"),
    "gh200-144gb": HostSide("nvlink-c2c", 450e9, 480 * 10**9, f"{_C2C}; GH200: 480 GB LPDDR5X per superchip"),
    "gb200": HostSide("nvlink-c2c", 450e9, 480 * 10**9 // 2,
                      f"{_C2C}; GB200 NVL72: 480 GB LPDDR5X per Grace, one Grace for 2 GPUs"),
    "gb300": HostSide("nvlink-c2c", 450e9, 480 * 10**9 // 2,
                      f"{_C2C}; GB300 NVL72: 480 GB LPDDR5X per Grace, one Grace for 2 GPUs"),
    "a100-80gb": HostSide("pcie4", 32e9, 2 * 10**12 // 8, f"{_PCIE4}; DGX A100 640GB datasheet: 2 TB, 8 GPUs"),
    "a100-40gb": HostSide("pcie4", 32e9, 1 * 10**12 // 8, f"{_PCIE4}; DGX A100 320GB datasheet: 1 TB, 8 GPUs"),
}


def host_side(gpu: Card, source: str = "options", field: str = "--kv-offloading-size") -> HostSide:
    """The host side of ``gpu`` for a host KV tier; bad input where the card table has none."""
    found = HOSTS.get(gpu.name)
    if found is None:
        raise BadInput(source, field, f"a host KV tier reads the card's host link and host memory; the card table "
                                      f"has none for {gpu.name} (known: {', '.join(HOSTS)})")
    return found


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
