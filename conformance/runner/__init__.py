"""The gate: every campaign against one target (``gate``) and the replay of a finding (``replay``).
"""
