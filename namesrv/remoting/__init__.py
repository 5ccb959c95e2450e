"""The server's I/O shell: one reactor thread owning the ZeroMQ sockets, executors running the
request processor, and the queue that carries replies back to the reactor (design: Netty-style)."""
from namesrv.remoting.budget import RequestBudget
from namesrv.remoting.dispatch import RequestDispatcher
from namesrv.remoting.executors import BoundedExecutor
from namesrv.remoting.outbox import Outbox
from namesrv.remoting.reactor import BindError, Reactor

__all__ = ["BindError", "BoundedExecutor", "Outbox", "Reactor", "RequestBudget", "RequestDispatcher"]
