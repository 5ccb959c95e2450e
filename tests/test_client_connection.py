"""RemotingConnection against a scripted peer on 127.0.0.1 that speaks the real frame codec but
answers when and in the order a test says: out-of-order matching, timeouts, late answers,
drops, bad frames and the per-client header codec. (Behaviour against the real NameServer is in
test_client_e2e.py.)"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from namesrv.client import (
    AsyncRemotingClient,
    RemotingClient,
    RemotingConnectError,
    RemotingConnection,
    RemotingTimeoutError,
)
from namesrv.protocol import FrameDecoder, ProtocolError, RemotingCommand, ResponseCode, SerializeType

Script = Callable[[list[RemotingCommand]], "list[RemotingCommand] | None"]


class ScriptedPeer:
    """A TCP peer that collects requests and lets `script` decide what to answer and when.

    `script(received)` is called after each request with everything received so far on that
    connection; it returns the responses to write now (in that order) or None.
    """

    def __init__(self, script: Script) -> None:
        self.script = script
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.header_types: list[int] = []
        self.port = 0

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder()
        received: list[RemotingCommand] = []
        try:
            while chunk := await reader.read(65536):
                for frame in decoder.feed(chunk):
                    self.header_types.append(frame[0])
                    received.append(RemotingCommand.decode(frame))
                    answers = self.script(received)
                    if answers:
                        writer.write(b"".join(answer.encode() for answer in answers))
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        await self.server.wait_closed()
        self.writers.clear()


def echo(request: RemotingCommand) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, ext_fields={"echo": (request.ext_fields or {}).get("i", "")})


def run(coroutine_function: Callable[[], object]) -> None:
    asyncio.run(asyncio.wait_for(coroutine_function(), 30))


def test_many_in_flight_are_matched_when_answered_in_reverse_order() -> None:
    batch = 200

    def reverse_after_batch(received: list[RemotingCommand]) -> list[RemotingCommand] | None:
        return [echo(r) for r in reversed(received)] if len(received) == batch else None

    async def scenario() -> None:
        peer = ScriptedPeer(reverse_after_batch)
        await peer.start()
        connection = await RemotingConnection.open(peer.address)
        requests = [RemotingCommand.request(101, {"i": i}) for i in range(batch)]
        responses = await connection.invoke_many(requests, timeout=10)
        assert [r.ext_fields["echo"] for r in responses] == [str(i) for i in range(batch)]
        assert len({r.opaque for r in requests}) == batch
        assert connection.in_flight == 0
        connection.close()
        await peer.stop()
    run(scenario)


def test_concurrent_invokes_from_many_tasks_are_matched() -> None:
    def answer_pairs_swapped(received: list[RemotingCommand]) -> list[RemotingCommand] | None:
        if len(received) % 2 == 0:
            return [echo(received[-1]), echo(received[-2])]
        return None

    async def scenario() -> None:
        peer = ScriptedPeer(answer_pairs_swapped)
        await peer.start()
        async with AsyncRemotingClient(timeout=10) as client:
            results = await asyncio.gather(*(client.invoke(peer.address, client.request(101, {"i": i}))
                                             for i in range(100)))
            assert [r.ext_fields["echo"] for r in results] == [str(i) for i in range(100)]
        await peer.stop()
    run(scenario)


def test_timeout_then_late_answer_is_dropped_and_connection_stays_usable() -> None:
    held: list[RemotingCommand] = []

    def hold_first(received: list[RemotingCommand]) -> list[RemotingCommand] | None:
        if len(received) == 1:
            held.append(received[0])
            return None
        return [echo(held[0]), echo(received[-1])]  # the late answer first, then the new one

    async def scenario() -> None:
        peer = ScriptedPeer(hold_first)
        await peer.start()
        connection = await RemotingConnection.open(peer.address)
        started = time.monotonic()
        with pytest.raises(RemotingTimeoutError, match="within 0.2 s"):
            await connection.invoke(RemotingCommand.request(101, {"i": "slow"}), timeout=0.2)
        assert 0.15 < time.monotonic() - started < 2
        response = await connection.invoke(RemotingCommand.request(101, {"i": "fast"}), timeout=5)
        assert response.ext_fields["echo"] == "fast"
        assert connection.in_flight == 0 and not connection.closed
        connection.close()
        await peer.stop()
    run(scenario)


def test_invoke_many_times_out_only_the_unanswered() -> None:
    def answer_even(received: list[RemotingCommand]) -> list[RemotingCommand] | None:
        last = received[-1]
        return [echo(last)] if int(last.ext_fields["i"]) % 2 == 0 else None

    async def scenario() -> None:
        peer = ScriptedPeer(answer_even)
        await peer.start()
        connection = await RemotingConnection.open(peer.address)
        results = await connection.invoke_many([RemotingCommand.request(101, {"i": i}) for i in range(10)], 0.3)
        for i, result in enumerate(results):
            if i % 2 == 0:
                assert isinstance(result, RemotingCommand) and result.ext_fields["echo"] == str(i)
            else:
                assert isinstance(result, RemotingTimeoutError)
        assert connection.in_flight == 0
        connection.close()
        await peer.stop()
    run(scenario)


def test_drop_fails_every_pending_call_and_next_call_reconnects() -> None:
    def never(received: list[RemotingCommand]) -> None:
        return None

    async def scenario() -> None:
        peer = ScriptedPeer(never)
        await peer.start()
        client = AsyncRemotingClient(timeout=30)
        calls = [asyncio.ensure_future(client.invoke(peer.address, client.request(101, {"i": i}))) for i in range(5)]
        while not peer.writers:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        await peer.stop()  # server side closes the connection with 5 calls in flight
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(r, RemotingConnectError) and "closed" in str(r) for r in results)
        with pytest.raises(RemotingConnectError, match="cannot connect"):
            await client.invoke(peer.address, client.request(101))  # nothing listens now
        peer.script = lambda received: [echo(received[-1])]
        await peer.start(peer.port)  # the "server" is back on the same port
        response = await client.invoke(peer.address, client.request(101, {"i": "again"}))
        assert response.ext_fields["echo"] == "again"
        await client.close()
        await peer.stop()
    run(scenario)


def test_a_bad_frame_from_the_server_fails_pending_calls_with_a_clear_error() -> None:
    async def scenario() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(100)
            writer.write(b"\xff\xff\xff\xff")  # negative frame length
            await writer.drain()
            await asyncio.sleep(1)
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        connection = await RemotingConnection.open(address)
        with pytest.raises(RemotingConnectError, match="bad frame"):
            await connection.invoke(RemotingCommand.request(101), timeout=5)
        assert connection.closed
        server.close()
        await server.wait_closed()
    run(scenario)


def test_connect_refused_is_a_connect_error() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
            await RemotingConnection.open(f"127.0.0.1:{port}")
    run(scenario)


def test_a_malformed_address_is_a_connect_error() -> None:
    async def scenario() -> None:
        async with AsyncRemotingClient() as client:
            with pytest.raises(RemotingConnectError, match="bad address 'localhost'"):
                await client.get_broker_cluster_info("localhost")
    run(scenario)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_requests_use_the_client_header_codec(serialize_type: SerializeType) -> None:
    async def scenario() -> None:
        peer = ScriptedPeer(lambda received: [echo(received[-1])])
        await peer.start()
        async with AsyncRemotingClient(serialize_type=serialize_type) as client:
            response = await client.invoke(peer.address, client.request(101, {"i": "x"}))
            assert response.ext_fields == {"echo": "x"}
            assert response.serialize_type == serialize_type  # the peer answered in our codec
        assert peer.header_types == [serialize_type]
        await peer.stop()
    run(scenario)


def test_oneway_gets_no_pending_entry_and_carries_the_oneway_flag() -> None:
    seen: list[RemotingCommand] = []

    def record(received: list[RemotingCommand]) -> list[RemotingCommand] | None:
        seen.append(received[-1])
        return None if received[-1].is_oneway else [echo(received[-1])]

    async def scenario() -> None:
        peer = ScriptedPeer(record)
        await peer.start()
        async with AsyncRemotingClient() as client:
            await client.invoke_oneway(peer.address, client.request(904, {"i": "beat"}))
            response = await client.invoke(peer.address, client.request(101, {"i": "after"}))
            assert response.ext_fields == {"echo": "after"}
            assert (await client.connection(peer.address)).in_flight == 0
        assert [c.is_oneway for c in seen] == [True, False]
        await peer.stop()
    run(scenario)


def test_sync_facade_has_every_async_method_and_works_from_plain_code() -> None:
    loop = asyncio.new_event_loop()
    peer = ScriptedPeer(lambda received: [echo(received[-1])])
    loop.run_until_complete(peer.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with RemotingClient(timeout=5) as client:
            response = client.invoke(peer.address, client.request(101, {"i": "sync"}))
            assert response.ext_fields == {"echo": "sync"}
            results = client.invoke_many(peer.address, [client.request(101, {"i": i}) for i in range(20)])
            assert [r.ext_fields["echo"] for r in results] == [str(i) for i in range(20)]
        public = {name for name in dir(AsyncRemotingClient) if not name.startswith("_")}
        assert public <= set(dir(RemotingClient))
    finally:
        asyncio.run_coroutine_threadsafe(peer.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_request_the_codec_cannot_encode_fails_cleanly_and_leaves_nothing_pending() -> None:
    async def scenario() -> None:
        peer = ScriptedPeer(lambda received: [echo(received[-1])])
        await peer.start()
        connection = await RemotingConnection.open(peer.address, serialize_type=SerializeType.ROCKETMQ)
        with pytest.raises(ProtocolError, match="binary header cannot carry"):
            await connection.invoke(RemotingCommand.request(40000), timeout=1)
        assert connection.in_flight == 0
        assert (await connection.invoke(RemotingCommand.request(101, {"i": "ok"}), 1)).ext_fields == {"echo": "ok"}
        connection.close()
        await peer.stop()
    run(scenario)
