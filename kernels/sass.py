"""Read what nvcc made of a kernel: ptxas resources and the SASS instruction mix of its hot loop.

Used by tests/kernels/test_sass.py (the fast kernels' hot loops use tensor-core and
128-bit asynchronous loads, no spills, registers and shared memory within the design's
occupancy) and by benchmarks/throughput_model.py (instructions per tile from the SASS).
Needs nvcc and cuobjdump (the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel); find_tool
says which was found, or None.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from csa_plan.kernels.backends import KERNEL_DIR, NVCC_OPTIONS

_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_FUNC = re.compile(r"^\s*Function : (\w+)")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_TARGET = re.compile(r"0x([0-9a-f]+)")


def find_tool(name: str) -> str | None:
    """nvcc / cuobjdump: $NVCC (for nvcc) or $CUOBJDUMP, PATH, beside nvcc, the CUDA wheels."""
    env = os.environ.get(name.upper())
    if env and Path(env).exists():
        return env
    found = shutil.which(name)
    if found:
        return found
    cands = []
    nvcc = shutil.which("nvcc") or os.environ.get("NVCC")
    if nvcc:
        cands.append(str(Path(os.path.realpath(nvcc)).parent / name))
    cands += [f"/usr/local/cuda/bin/{name}", f"/usr/local/cuda-13.0/bin/{name}"]
    for sp in site.getsitepackages() + [p for p in sys.path if p.endswith("site-packages")]:
        cands += sorted(glob.glob(f"{sp}/nvidia/cu1*/bin/{name}")) + sorted(glob.glob(f"{sp}/nvidia/cuda_*/bin/{name}"))
    return next((c for c in cands if Path(c).exists()), None)


SASS_TOOLS = ("nvcc", "cuobjdump", "nvdisasm")  # cuobjdump -sass runs nvdisasm for sm_90


def missing_sass_tools() -> str | None:
    """Why SASS cannot be read here (each tool and where it was looked for), or None."""
    found = {name: find_tool(name) for name in SASS_TOOLS}
    if all(found.values()):
        return None
    return "needs " + ", ".join(f"{n}: {p or 'not found'}" for n, p in found.items()) + \
        " (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or the CUDA toolkit)"


@dataclass(frozen=True)
class Resources:
    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    smem_bytes: int  # static


@dataclass(frozen=True)
class Instr:
    addr: int
    opcode: str
    operands: str


@dataclass
class Kernel:
    name: str
    resources: Resources
    instrs: list[Instr] = field(default_factory=list)

    def loops(self) -> list[tuple[int, int]]:
        """(first, last) instruction indices of every backward branch's loop."""
        index = {ins.addr: i for i, ins in enumerate(self.instrs)}
        out = []
        for i, ins in enumerate(self.instrs):  # BRA, BRA.U, BRA.U.ANY (a bulk copy's per-lane loop) ...
            if (ins.opcode == "BRA" or ins.opcode.startswith("BRA.")) and (m := _TARGET.search(ins.operands)):
                t = int(m.group(1), 16)
                if t <= ins.addr and t in index:
                    out.append((index[t], i))
        return out

    def hot_loop(self) -> tuple[int, int]:
        """The tile loop: the loop with the most tensor-core instructions, the tightest such
        span on ties (ptxas may place a wait's retry after the epilogue with a branch back
        into the loop: that wider span holds the same tensor instructions plus the epilogue)."""
        def tensor(lp):
            return sum(is_tensor(self.instrs[j].opcode) for j in range(lp[0], lp[1] + 1))
        tc = [lp for lp in self.loops() if tensor(lp)]
        if not tc:
            raise ValueError(f"{self.name}: no loop with tensor-core instructions")
        return max(tc, key=lambda lp: (tensor(lp), -(lp[1] - lp[0])))

    def inner_loops(self) -> list[tuple[int, int]]:
        a, b = self.hot_loop()
        return [lp for lp in self.loops() if a <= lp[0] and lp[1] < b and lp != (a, b)]

    def opcodes(self, span: tuple[int, int] | None = None) -> list[str]:
        a, b = span or (0, len(self.instrs) - 1)
        return [self.instrs[j].opcode for j in range(a, b + 1)]


def is_tensor(op: str) -> bool:
    return op.startswith(("HMMA", "HGMMA", "IMMA", "QMMA"))


def is_global_load(op: str) -> bool:
    """LDG*, LDGSTS* (cp.async), bulk/TMA copies; not LDGDEPBAR (cp.async's commit)."""
    return op.startswith(("LDG", "UBLKCP", "UTMALDG")) and not op.startswith("LDGDEPBAR")


def is_bulk_copy(op: str) -> bool:
    """cp.async.bulk / TMA copies global -> shared (UBLKCP, UTMALDG)."""
    return op.startswith(("UBLKCP", "UTMALDG"))


def load_width_bits(op: str) -> int:
    """128 for .128 loads and bulk copies (whole 16-byte multiples), 64 for .64, else 32 or
    less (LDG.E, .U8, .U16 ...)."""
    if is_bulk_copy(op):
        return 128
    for w in (128, 64):
        if f".{w}" in op:
            return w
    return 32


def compile_cubin(cu: str | Path, out_dir: Path, nvcc: str | None = None) -> tuple[Path, dict[str, Resources]]:
    nvcc = nvcc or find_tool("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc not found")
    src = Path(cu) if Path(cu).is_absolute() else KERNEL_DIR / cu
    cubin = out_dir / (src.name + ".cubin")
    proc = subprocess.run([nvcc, "-cubin", "-Xptxas", "-v", *NVCC_OPTIONS, "-o", str(cubin), str(src)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    res: dict[str, Resources] = {}
    cur, vals = None, {}
    for line in proc.stderr.splitlines():
        if m := _ENTRY.search(line):
            cur, vals = m.group(1), {}
        elif cur and (m := _SPILL.search(line)):
            vals.update(stack=int(m.group(1)), ss=int(m.group(2)), sl=int(m.group(3)))
        elif cur and (m := _REGS.search(line)):
            sm = _SMEM.search(line)
            res[cur] = Resources(int(m.group(1)), vals.get("stack", 0), vals.get("ss", 0), vals.get("sl", 0),
                                 int(sm.group(1)) if sm else 0)
    return cubin, res


def disassemble(cubin: Path, resources: dict[str, Resources], cuobjdump: str | None = None) -> dict[str, Kernel]:
    tool = cuobjdump or find_tool("cuobjdump")
    if tool is None:
        raise FileNotFoundError("cuobjdump not found")
    env = dict(os.environ)
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm:  # cuobjdump finds it through PATH or NVDISASM_PATH
        env["NVDISASM_PATH"] = str(Path(nvdisasm).parent)
    proc = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    out: dict[str, Kernel] = {}
    cur = None
    for line in proc.stdout.splitlines():
        if m := _FUNC.match(line):
            cur = Kernel(m.group(1), resources.get(m.group(1), Resources(0, 0, 0, 0, 0)))
            out[cur.name] = cur
        elif cur and (m := _INSTR.search(line)):
            cur.instrs.append(Instr(int(m.group(1), 16), m.group(3), m.group(4).strip()))
    return out


def kernels_of(cu: str, out_dir: Path) -> dict[str, Kernel]:
    cubin, res = compile_cubin(cu, out_dir)
    return disassemble(cubin, res)


def blocks_per_sm(registers: int, threads: int, smem_bytes: int, *, regs_per_sm: int = 65536,
                  smem_per_sm: int = 228 * 1024, smem_reserved_per_block: int = 1024, max_threads: int = 2048,
                  max_blocks: int = 32) -> int:
    """sm_90 occupancy: registers (allocated per warp in units of 256), shared memory, threads."""
    warps = -(-threads // 32)
    regs_per_warp = -(-registers * 32 // 256) * 256
    by_regs = regs_per_sm // (regs_per_warp * warps)
    by_smem = smem_per_sm // (smem_bytes + smem_reserved_per_block) if smem_bytes else max_blocks
    return max(0, min(by_regs, by_smem, max_threads // threads, max_blocks))
