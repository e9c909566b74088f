"""csa-plan: exact memory planning for compressed sparse attention state groups."""

__version__ = "0.1.0"
