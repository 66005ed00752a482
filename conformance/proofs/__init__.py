"""Proofs: z3 obligations over the model's ring arithmetic (``prove``, ``z3ops``) and the z3-generated
boundary programs (``boundary``).
"""
