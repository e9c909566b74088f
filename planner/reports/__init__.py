"""The ``--json`` documents of every command, built from domain values (no rendering here).

``schemas`` names each document's version; ``check``, ``compare``, ``simulate`` and
``sweep`` build one document each; ``text`` holds the text forms tables share with them.
The CLI renders these dicts as tables or prints them as JSON, and adds nothing.
"""
