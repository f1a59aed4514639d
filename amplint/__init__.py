"""amplint: a static linter for PyTorch automatic mixed precision (AMP) code."""

__version__ = "0.1.0"
