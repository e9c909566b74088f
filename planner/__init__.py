"""The pure domain core of csa-plan: no GPU imports, no printing, no CLI.

Everything here takes explicit numbers in and returns frozen values out, so the
same objects render to a rich table, to ``--json`` and to tests.
"""
