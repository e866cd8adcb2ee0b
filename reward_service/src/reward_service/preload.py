"""Imported once by the multiprocessing forkserver, before it forks any scoring worker.

Importing it loads math_verify (sympy, the ANTLR LaTeX grammar) and runs one warm-up parse, so every
worker the pool forks, including each replacement of a killed one, starts warm in a few milliseconds
instead of paying about a second of imports and 0.1 s of first-parse cost on the shared CPUs.
"""

from __future__ import annotations

from reward_service import worker

worker.warm_up()
