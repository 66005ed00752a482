"""The commands besides ``check``: ``matrix``, ``mutants`` (``mutation``), ``model`` (``modelcheck``),
``prove`` (``prove_report``) and the spec tests (``spectests``).
"""
