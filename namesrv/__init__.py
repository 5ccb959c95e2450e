"""namesrv: a RocketMQ-compatible NameServer."""

__version__ = "0.1.0"
