"""Each command's use case: option interplay, what runs, and the exit code.

``check``, ``compare``, ``simulate`` and ``sweep`` each take a frozen request of what
the user typed and return the ``--json`` document with the exit code; the CLI only
parses, calls one of these, renders and exits.
"""
