"""Blocking facades: the async clients driven by an event loop in a background thread.

`mirror(AsyncClass)` gives a facade class one blocking method per public coroutine method of
AsyncClass, with the same name, signature and docstring, so the sync and async APIs cannot
drift apart.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running forever in a daemon thread; `run` blocks the caller until a coroutine finishes."""

    def __init__(self, name: str = "namesrv-client-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a blocking facade method was called from its own event-loop thread")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


class SyncFacade:
    """Base of the blocking twins: `_target` is the async object, `_runner` the loop thread running it."""

    _target: Any
    _runner: LoopThread
    _owns_runner: bool
    _closed: bool
    #: The coroutine method of the async object that `close()` runs.
    _closer = "close"

    def _attach(self, target: Any, runner: LoopThread | None) -> None:
        self._closed = False
        self._owns_runner = runner is None
        self._runner = runner or LoopThread()
        self._target = target

    @property
    def runner(self) -> LoopThread:
        """The loop thread, to share it with other facades."""
        return self._runner

    def close(self) -> None:
        """Close (or stop) the async object, then stop the loop thread if this facade started it."""
        if self._closed:
            return
        self._closed = True
        self._runner.run(getattr(self._target, self._closer)())
        if self._owns_runner:
            self._runner.stop()

    def __enter__(self) -> SyncFacade:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _blocking(name: str, method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: SyncFacade, *args: Any, **kwargs: Any) -> Any:
        return self._runner.run(getattr(self._target, name)(*args, **kwargs))
    return call


def _direct(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: SyncFacade, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._target, name)(*args, **kwargs)
    return call


def mirror(async_cls: type) -> Callable[[type[SyncFacade]], type[SyncFacade]]:
    """Class decorator: a blocking method for each public coroutine method of `async_cls`, and a plain
    delegate for each public plain method (those never touch the event loop, by convention of the
    async classes: anything that does is a coroutine)."""
    def decorate(sync_cls: type[SyncFacade]) -> type[SyncFacade]:
        for name, member in inspect.getmembers(async_cls, inspect.isfunction):
            if name.startswith("_") or name in vars(sync_cls) or hasattr(SyncFacade, name):
                continue
            wrap = _blocking if inspect.iscoroutinefunction(member) else _direct
            setattr(sync_cls, name, wrap(name, member))
        return sync_cls
    return decorate
