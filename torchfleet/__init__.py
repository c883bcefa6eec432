"""torchfleet: a multi-node PyTorch cluster from a handful of machines, launched from one command."""

__version__ = "1.0.0"
