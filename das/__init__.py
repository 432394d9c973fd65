"""das: an open disclosure avoidance system (TopDown with exact discrete-Gaussian noise)."""

__version__ = "0.1.0"
