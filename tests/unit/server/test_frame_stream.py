"""`server.frame_stream.FrameProtocol`: framing in get_buffer/buffer_updated, as a
transport drives it (uvloop's TCP and SSL transports fill whatever buffer they are
given, possibly only in part), without sockets; flow control and the writing side
against a fake transport."""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any

import pytest

from tidegate.protocol import frame_buffer
from tidegate.protocol.frame_buffer import size_class
from tidegate.protocol.framing import FrameTooLargeError
from tidegate.server import frame_stream
from tidegate.server.frame_stream import BIG_FRAME, SCRATCH, BufferPool, FrameProtocol


class FakeTransport:
    def __init__(self) -> None:
        self.paused = False
        self.closing = False
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, data: list[bytes]) -> None:
        self.written.append(b"|".join(data))  # one call: one send

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


async def _idle(_p: FrameProtocol) -> None:
    return None


def _proto(loop: asyncio.AbstractEventLoop, **kw: Any) -> tuple[FrameProtocol, FakeTransport]:
    p = FrameProtocol(_idle, loop, **kw)
    tr = FakeTransport()
    p.connection_made(tr)  # type: ignore[arg-type]
    return p, tr


def _deliver(p: FrameProtocol, data: bytes, rng: random.Random) -> None:
    """As a transport: ask for a buffer, fill a random part of it."""
    pos = 0
    while pos < len(data):
        buf = p.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, rng.choice([1, 3, 5, 100, 5000, 70_000, 1 << 20]))
        buf[:n] = data[pos : pos + n]
        p.buffer_updated(n)
        pos += n


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _payloads(rng: random.Random) -> list[bytes]:
    sizes = [0, 1, 7, 100, BIG_FRAME - 1, BIG_FRAME, BIG_FRAME + 1, 300_000]
    return [rng.randbytes(rng.choice(sizes)) for _ in range(10)]


@pytest.mark.parametrize("seed", range(6))
def test_frames_come_out_whole_and_in_order(seed: int) -> None:
    rng = random.Random(seed)
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, _tr = _proto(loop, max_buffered=1 << 40)
        payloads = _payloads(rng)
        _deliver(p, b"".join(map(_frame, payloads)), rng)
        frames = p.take()
        assert [bytes(f) for f in frames] == payloads
        for f, payload in zip(frames, payloads):
            # frames larger than the scratch were read in place (handed on read-only);
            # small ones were copied out of it; between the two, either
            if len(payload) >= SCRATCH:
                assert isinstance(f, memoryview)
            if len(payload) < BIG_FRAME:
                assert isinstance(f, bytes)
            if isinstance(f, memoryview):
                assert f.readonly
        assert p.take() == []
        assert not p.ready()

    asyncio.run(run())


@pytest.mark.parametrize("seed", range(4))
def test_pooled_buffers_are_reused_only_once_nothing_holds_them(seed: int) -> None:
    """With a pool, every frame still comes out whole and equal to what was sent while
    earlier frames (and slices of them) are kept alive; a released buffer is reused."""
    rng = random.Random(seed)
    async def run() -> None:
        loop = asyncio.get_running_loop()
        pool = BufferPool()
        p, _tr = _proto(loop, max_buffered=1 << 40, pool=pool)
        kept: list[tuple[memoryview, bytes]] = []
        for _ in range(6):
            payloads = _payloads(rng)
            _deliver(p, b"".join(map(_frame, payloads)), rng)
            frames = p.take()
            assert [bytes(f) for f in frames] == payloads
            for f, payload in zip(frames, payloads):
                if isinstance(f, memoryview) and rng.random() < 0.5:
                    kept.append((f[1:], payload[1:]))  # a slice holds the buffer too
            del frames, f
            for view, want in kept:  # no later frame was written over a held one
                assert bytes(view) == want
        ids_before = {id(b) for b in pool.buffers}
        kept.clear()
        payload = rng.randbytes(290_000)  # over the scratch: read in place, pooled
        _deliver(p, _frame(payload), rng)
        (frame,) = p.take()
        assert bytes(frame) == payload and len(frame) == len(payload)
        assert isinstance(frame, memoryview) and frame.readonly
        assert id(frame.obj) in ids_before  # a buffer came back out of the pool

    asyncio.run(run())


def test_pool_keeps_at_most_its_bytes_and_skips_exported_buffers() -> None:
    pool = BufferPool(max_bytes=4 * BIG_FRAME)
    a = pool.take(BIG_FRAME)
    a_id = id(a)
    view = memoryview(a)[:10]  # a frame's view: all that holds the buffer once given
    pool.give(a)
    del a
    assert id(pool.take(BIG_FRAME)) != a_id  # still exported
    assert (pool.hits, pool.misses) == (0, 2)
    del view
    a = pool.take(BIG_FRAME - 1)  # the same size class
    assert id(a) == a_id
    assert (pool.hits, pool.misses) == (1, 2)
    assert pool.take(BIG_FRAME * 3) is not a  # (a is out of the pool now anyway)
    bufs = [bytearray(BIG_FRAME) for _ in range(6)]
    for b in bufs:
        pool.give(b)
    assert sum(map(len, pool.buffers)) <= 4 * BIG_FRAME
    assert pool.buffers[-1] is bufs[-1] and pool.buffers[0] is bufs[2]  # the oldest went
    pool.give(bytearray(2 * BIG_FRAME))  # over a quarter of max_bytes: not kept
    assert all(len(b) == BIG_FRAME for b in pool.buffers)
    # a frame of another class gets a new buffer, of its class's length
    assert len(pool.take(BIG_FRAME + 1)) == size_class(BIG_FRAME + 1) > BIG_FRAME + 1


def test_size_classes_fit_and_waste_at_most_a_quarter() -> None:
    for size in [*range(BIG_FRAME, BIG_FRAME + 5000), *random.Random(3).sample(
            range(BIG_FRAME, 64 << 20), 5000), 1 << 20, (1 << 20) + 1]:
        cls = size_class(size)
        assert size <= cls <= size * 1.25 and size_class(cls) == cls
    pool = BufferPool()
    odd = bytearray(100_000)  # not of a class (not made by take): filed under one it holds
    odd_id = id(odd)
    pool.give(odd)
    del odd
    got = pool.take(size_class(90_000))
    assert id(got) == odd_id and len(got) == 100_000 >= size_class(90_000)


def test_pool_passes_over_buffers_held_elsewhere_without_probing_them() -> None:
    """A buffer something still references (a frame's view keeps one) is skipped on its
    reference count: not resized (the probe's refused resize raises and is caught, the
    cost this check saves), and not handed out even when nothing exports it; a take
    looks at PROBES buffers at most, oldest first, and moves the held ones back."""
    pool = BufferPool()
    held = [bytearray(BIG_FRAME) for _ in range(50)]
    views = [memoryview(b) for b in held]
    for b in held:
        pool.give(b)
    probed: list[bytearray] = []
    real = frame_buffer._unexported
    def probe(buf: bytearray) -> bool:
        probed.append(buf)
        return real(buf)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(frame_buffer, "_unexported", probe)
        assert all(pool.take(BIG_FRAME) is not b for b in held)
        assert probed == []
        del views  # still referenced by `held` (not exported): passed over all the same
        assert all(pool.take(BIG_FRAME) is not b for b in held)
        assert probed == []
        assert pool.buffers[0] is held[0]  # 100 takes x PROBES: back to the first
        free_id = id(held[2])
        del held[2]  # only the pool holds it now: probed, then handed out
        assert id(pool.take(BIG_FRAME)) == free_id
        assert len(probed) == 1
        assert pool.buffers[:2] == held[:2][::-1] or pool.buffers[-2:] == held[:2]


def _alike_payloads(rng: random.Random) -> list[bytes]:
    """Runs of big frames of nearly one size (a producer's requests), with small ones,
    bigger ones and the edges of the guess between them."""
    out: list[bytes] = []
    for _ in range(12):
        base = rng.choice([BIG_FRAME, 20_000, 66_000, 300_000])
        out += [rng.randbytes(base + rng.choice([0, 0, 1, 3, 500, -3] if base > BIG_FRAME
                                                 else [0, 1, 2]))
                for _ in range(rng.randint(1, 5))]
        out.append(rng.randbytes(rng.choice([0, 1, 7, 100, BIG_FRAME - 1, 2_000_000])))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_frames_read_into_the_guess_come_out_whole_and_stay_put(seed: int) -> None:
    """With a pool, reads at a boundary after a big frame go into a buffer of its class
    (frame_buffer's guess): every frame still comes out whole, in order, and frames
    kept alive are never written over, whatever the chunking."""
    rng = random.Random(seed)
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, _tr = _proto(loop, max_buffered=1 << 40, pool=BufferPool())
        kept: list[tuple[memoryview, bytes]] = []
        for _ in range(3):
            payloads = _alike_payloads(rng)
            _deliver(p, b"".join(map(_frame, payloads)), rng)
            frames = p.take()
            assert [bytes(f) for f in frames] == payloads
            for f, payload in zip(frames, payloads):
                assert isinstance(f, bytes) or f.readonly
                if isinstance(f, memoryview) and rng.random() < 0.3:
                    kept.append((f, payload))
            del frames
            if rng.random() < 0.5:
                p._buf.release_if_idle()
            for view, want in kept:
                assert bytes(view) == want

    asyncio.run(run())


def test_alike_big_frames_are_read_in_place_from_their_size_prefix() -> None:
    """After one big frame, frames like it are read straight into pooled buffers, one
    read each: the scratch is not even allocated (no copy of their heads)."""
    rng = random.Random(7)
    async def run() -> None:
        loop = asyncio.get_running_loop()
        pool = BufferPool()
        p, _tr = _proto(loop, max_buffered=1 << 40, pool=pool)
        asm = p._buf
        _deliver(p, _frame(rng.randbytes(66_000)), rng)
        p.take()
        asm.release_if_idle()
        assert asm._view is None
        last = 66_000
        for size in (66_000, 66_000, 65_990, 66_100):
            payload = rng.randbytes(size)
            buf = p.get_buffer(-1)
            assert len(buf) == last + 4  # as far as a frame like the last
            n = min(len(buf), size + 4)
            last = size
            data = _frame(payload)
            buf[:n] = data[:n]
            p.buffer_updated(n)
            while n < len(data):  # a bigger one than the last: the rest in place too
                buf = p.get_buffer(-1)
                buf[: len(data) - n] = data[n:]
                p.buffer_updated(len(data) - n)
                n = len(data)
            (frame,) = p.take()
            assert bytes(frame) == payload
            assert asm._view is None
        # a guess handed out but not read into goes back to the pool when idle
        held = p.get_buffer(-1).obj
        asm.release_if_idle()
        assert asm._big is None and any(b is held for b in pool.buffers)
        del held
        # a small frame after them: parsed from the guess, and guessing stops
        buf = p.get_buffer(-1)
        buf[:9] = _frame(b"small")
        p.buffer_updated(9)
        assert p.take() == [b"small"]
        assert asm._guess == 0

    asyncio.run(run())


@pytest.mark.parametrize("size", [-5, 70_000])
def test_a_bad_size_read_into_the_guess_fails_the_stream(size: int) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, _tr = _proto(loop, max_buffered=1 << 40, max_frame_bytes=50_000,
                        pool=BufferPool())
        big = b"b" * 40_000
        data = _frame(big) + struct.pack(">i", size) + b"junk" * 5000
        _deliver(p, data, random.Random(5))
        assert [bytes(f) for f in p.take()] == [big]
        with pytest.raises(FrameTooLargeError, match=f"frame size {size}"):
            p.take()

    asyncio.run(run())


def test_frames_over_the_upfront_limit_are_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_stream, "UPFRONT_MAX", 200_000)
    rng = random.Random(1)
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, _tr = _proto(loop, max_buffered=1 << 40)
        payloads = [rng.randbytes(500_000), b"after", rng.randbytes(200_001)]
        _deliver(p, b"".join(map(_frame, payloads)), rng)
        assert [bytes(f) for f in p.take()] == payloads

    asyncio.run(run())


@pytest.mark.parametrize("size", [-1, -333, 1001])
def test_bad_size_fails_after_the_frames_before_it(size: int) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, _tr = _proto(loop, max_frame_bytes=1000)
        data = _frame(b"first") + struct.pack(">i", size) + b"junk" * 10
        _deliver(p, data + _frame(b"never"), random.Random(2))
        assert p.ready()
        assert p.take() == [b"first"]
        with pytest.raises(FrameTooLargeError, match=f"frame size {size}"):
            p.take()

    asyncio.run(run())


def test_reading_pauses_until_frames_are_taken() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, tr = _proto(loop, max_buffered=10_000)
        _deliver(p, _frame(b"x" * 6000), random.Random(3))
        assert not tr.paused
        _deliver(p, _frame(b"y" * 6000), random.Random(3))
        assert tr.paused
        assert len(p.take()) == 2
        assert not tr.paused

    asyncio.run(run())


def test_end_of_stream_and_connection_error() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, _tr = _proto(loop)
        _deliver(p, _frame(b"last") + b"\x00\x00", random.Random(4))  # a partial prefix
        p.connection_lost(ConnectionResetError("reset"))
        assert p.take() == [b"last"]
        with pytest.raises(ConnectionResetError):
            p.take()
        q, _ = _proto(loop)
        q.eof_received()
        assert q.ready() and q.take() == []

    asyncio.run(run())


def test_wait_wakes_on_a_frame_and_drain_follows_the_transport() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, tr = _proto(loop)
        waiting = asyncio.ensure_future(p.wait())
        await asyncio.sleep(0)
        assert not waiting.done()
        _deliver(p, _frame(b"hello"), random.Random(5))
        await asyncio.wait_for(waiting, 1)

        p.write(b"answer")
        await p.drain()  # not paused: returns at once
        p.pause_writing()
        draining = asyncio.ensure_future(p.drain())
        await asyncio.sleep(0)
        assert not draining.done()
        p.resume_writing()
        await asyncio.wait_for(draining, 1)
        assert tr.written == [b"answer"]
        assert p.get_extra_info("peername") == ("127.0.0.1", 1)

        tr.closing = True
        p.write(b"dropped")  # the peer is gone: no write, drain says so
        assert tr.written == [b"answer"]
        with pytest.raises(ConnectionResetError):
            await p.drain()

    asyncio.run(run())


def test_answers_written_in_one_pass_go_out_together_and_close_flushes_them() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        p, tr = _proto(loop)
        for answer in (b"a", b"b", b"c"):
            p.write(answer)
            await p.drain()  # not paused: does not yield to the loop
        assert tr.written == []
        await asyncio.sleep(0)
        assert tr.written == [b"a|b|c"]  # in order, in one writelines
        p.write(b"d")
        await asyncio.sleep(0)
        assert tr.written == [b"a|b|c", b"d"]
        p.write(b"last words")
        p.close()  # a failed SASL exchange: its error still goes out before the close
        assert tr.written[-1] == b"last words" and tr.closing
        await asyncio.sleep(0)
        assert tr.written[-1] == b"last words"  # not written twice

    asyncio.run(run())
