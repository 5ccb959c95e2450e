"""The one exception type the protocol layer, and the fast path beneath it, raise for bad input."""
from __future__ import annotations


class ProtocolError(ValueError):
    """Input that does not follow the remoting protocol.

    Every decoding failure of frames, headers and bodies surfaces as this type, with a
    message naming what was wrong, so the server can close exactly one connection (bad
    frame) or answer SYSTEM_ERROR (bad body) without guessing.
    """
