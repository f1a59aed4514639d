"""Settings every test module shares.

Hypothesis (6.131 and newer) mixes into its draws constants it reads from the "local" modules (this repository's)
already imported when a test first draws. Under pytest-xdist, which modules a worker has imported by then depends
on which tests it ran before, so a derandomized property test could try other examples from one run to the next
and pass or fail by the luck of the scheduling. A test's examples must depend on the test alone: the local
constants are left out of generation (Hypothesis's own pool of boundary values stays).
"""

from __future__ import annotations

try:
    from hypothesis.internal.conjecture import providers as _providers
except ImportError:  # an older Hypothesis draws no local constants
    _providers = None

if _providers is not None and hasattr(_providers, "_get_local_constants") and hasattr(_providers, "Constants"):
    _providers._get_local_constants = lambda: _providers.Constants()
