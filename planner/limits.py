"""Every bound csa-plan puts on an input, in one place (docs/limits-and-security.md).

Each limit has a name; a message that enforces one names it, so a user who hits a
limit can find it here and in docs/limits-and-security.md. They are far beyond any real model, trace
or spec, and small enough that a hostile input is refused in bounded time and memory.
"""

from __future__ import annotations

# -- files ------------------------------------------------------------------------------------
MAX_FILE_BYTES = 64 << 20  # model configs, YAML model specs, mix specs
MAX_SPEC_BYTES = 16 << 20  # sweep specs
MAX_RESUME_BYTES = 256 << 20  # a sweep --resume file
MAX_ONNX_BYTES = 1 << 38  # 256 GiB: embedded payloads are skipped by offset, never read

# -- structured text (YAML, JSON) --------------------------------------------------------------
MAX_DEPTH = 64  # nesting of mappings and lists
MAX_STRING_CHARS = 4096  # any one string value or key (a path fits: PATH_MAX is 4096)
MAX_NAME_CHARS = 256  # a name csa-plan looks up (cache format, layout, edge): longer is never a known one
MAX_COLLECTION_ITEMS = 1_000_000  # entries of any one mapping or list
MAX_YAML_ALIASES = 100  # alias uses in a YAML document
MAX_YAML_EXPANDED = 64 << 20  # a YAML document's size with every alias expanded (nodes + characters)
MAX_INT_DIGITS = 19  # decimal digits of an integer (2^63 - 1 has 19), checked before conversion
MAX_NUMBER_CHARS = 64  # characters of a number written as text

# -- models -----------------------------------------------------------------------------------
MAX_LAYERS = 1 << 13  # layers in one model (config, spec or ONNX CSA nodes); a capacity search re-plans every one
MAX_LAYER_ID = 1 << 20  # a layer id (attribute, name or spec) is below this
MAX_INVENTORY_LAYERS = 4096  # decoder layers (main + MTP) a weight inventory is built for (per-layer entries)

# -- ONNX --------------------------------------------------------------------------------------
MAX_ONNX_STRING_BYTES = 1 << 16  # one decoded string (a name, a domain, an attribute, a metadata value)
MAX_ONNX_NODES = 1 << 18  # nodes in the main graph
MAX_ONNX_VALUES = 1 << 20  # graph inputs + outputs + value_info entries
MAX_ONNX_NODE_FIELDS = 1 << 12  # inputs, outputs or attributes of one CSA node
MAX_ONNX_METADATA = 1 << 12  # metadata_props and opset_import entries
MAX_ONNX_DIMS = 64  # dimensions of one declared shape

# -- deployments --------------------------------------------------------------------------------
MAX_TP = 1024  # tensor-parallel ranks
MAX_PP = 1024  # pipeline stages
MAX_DP = 1024  # data-parallel replicas
MAX_DEVICES = 65_536  # tp x pp x dp

# -- numbers from options and specs ---------------------------------------------------------------
MAX_WAIT_S = 1e9  # --max-wait and wait_p99_max_s: about 31 years, far inside the int64 ns clock
MIN_REL_TOL = 1e-6  # the capacity search's relative tolerance: every bisection terminates
MAX_PREFILL_TOK_S = 1e12  # --prefill-tok-s
MAX_TPOT_MS = 1e9  # --tpot-ms
MIN_RATE_SCALE, MAX_RATE_SCALE = 2.0 ** -20, 2.0 ** 20  # --rate-scale (the capacity search's own range)
