"""Kafka's size-prefixed frames assembled in buffers handed to the transport (sans-IO).

This is the buffer half of an `asyncio.BufferedProtocol` that reads Kafka frames in
place: the broker's request side (`server/frame_stream.py`) and the client's response
side (`client/stream.py`) both delegate `get_buffer` / `buffer_updated` to a
`FrameAssembler`, which owns no socket and no event loop:

- between frames it hands out a slice of a 64 KiB scratch buffer; a frame that lies whole
  in it is copied out once as `bytes` (small frames);
- a frame of `BIG_FRAME` bytes or more gets a buffer of its own as soon as its size prefix
  is known (the part already in the scratch is copied into it) and the rest is read
  straight into it: no copy. It is handed on as a read-only memoryview;
- with a pool, after a big frame the next read at a frame boundary goes into a pooled
  buffer of that frame's size class instead of the scratch (a producer's requests tend
  to be alike): a frame that fits is read in place from its size prefix on, and the
  scratch copy of its head (up to 64 KiB a request) is saved. Whatever else that read
  brought is parsed as if it had come into the scratch; a small frame there ends the
  guessing until the next big frame;
- a declared size above `upfront_max` is not allocated on the peer's word: such a frame is
  collected piece by piece and joined once, as `protocol.framing.FrameDecoder` does;
- a size prefix that is negative or above `max_frame` calls `on_bad_size(size)` once; from
  then on everything received is discarded (the stream can no longer be trusted; the
  owner closes it after the frames before).

`release_if_idle()` drops the scratch when nothing is half-received in it, so an idle
connection holds no buffer. Single-threaded, like the protocol that owns it.

A `BufferPool` (optional; the broker's listener shares one between its connections)
gives big frames buffers used before instead of a fresh `bytearray(size)`, which the
allocator zeroes and the kernel faults in page by page: at 1 MiB produce requests that
was ~7 % of the broker's CPU. A buffer is handed out again only when nothing exports it
any more (no memoryview of an earlier frame, or of a slice of one, is alive), so a
request's bytes can never change under the code still reading them.
"""

from __future__ import annotations

import collections
import struct
import sys
from collections.abc import Callable

__all__ = ["BIG_FRAME", "SCRATCH", "BufferPool", "Frame", "FrameAssembler"]

Frame = bytes | memoryview

SCRATCH = 64 * 1024  # between frames, reads land here (the part of a big frame that
# lands in it is copied once)
BIG_FRAME = 16 * 1024  # frames this large get their own buffer, read in place
GUESS_MAX = 1 << 20  # after a big frame up to this size, the next read goes to a buffer
# of its class (larger ones are rare, and a wrong guess's buffer becomes the scratch)

_SIZE = struct.Struct(">i")


def _head_refs(free: collections.deque[bytearray]) -> int:
    """`sys.getrefcount` of the buffer at the head of a pool's queue, counted as
    `BufferPool.take` counts it (the queue, a local variable, the call's argument).
    `_POOLED_REFS` is its answer for a buffer only the queue holds; more means something
    else holds it, a memoryview of a frame in particular (a view keeps a reference to the
    object it exports). Measured, not assumed, so that another interpreter's counting at
    worst makes `take` miss, never hand out a held buffer (the resize probe decides)."""
    buf = free[0]
    return sys.getrefcount(buf)


def _unexported(buf: bytearray) -> bool:
    """Whether no buffer export (memoryview) of `buf` is alive: CPython refuses to resize
    an exported bytearray. Shrinking by one byte and growing back stays within the
    allocation (no realloc, no copy); the last byte is lost, which a reuse overwrites."""
    try:
        del buf[-1:]
    except BufferError:
        return False
    buf.append(0)
    return True


_POOLED_REFS = _head_refs(collections.deque([bytearray(1)]))

PROBES = 4  # queued buffers a take looks at before it allocates


def size_class(size: int) -> int:
    """The length a pooled buffer for a `size`-byte frame gets: `size` rounded up to a
    quarter of the power of two below it (at most 25 % over), so that frames of
    varying sizes share buffers: any buffer of the class fits any frame of the class."""
    step = 1 << max(size.bit_length() - 3, 0)
    return -(-size // step) * step


class BufferPool:
    """Big-frame buffers for reuse, at most `max_bytes` of them (the oldest go first).

    `give` takes a buffer as its frame is handed on (still in use); `take(size)` returns
    one no longer exported of `size_class(size)` bytes, or a new one of that length. One
    queue per class, oldest first (the buffers given longest ago are the likeliest to
    be free: a request lets go of its frame once its appends are done); a take looks at
    no more than `PROBES` of them, passing a held one to the back. (One list for all
    sizes, scanned whole for a buffer between the size and twice it, was ~130 entries per
    take at 1,000 partitions, and missed on every frame larger than all those free.)
    Single-threaded: one pool per event loop. `hits` / `misses` count the takes served
    from the pool and those that allocated (a miss is a zeroed buffer the kernel faults
    in page by page): two integer additions per big frame, kept to explain a slow run."""

    __slots__ = ("_bytes", "_free", "hits", "max_bytes", "misses")

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self.max_bytes = max_bytes
        self._free: dict[int, collections.deque[bytearray]] = {}  # class -> buffers
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def buffers(self) -> list[bytearray]:
        """Every buffer in the pool (for tests and a debugger), each class oldest first."""
        return [buf for free in self._free.values() for buf in free]

    def take(self, size: int) -> bytearray:
        step = 1 << max(size.bit_length() - 3, 0)  # size_class, inline (once per frame)
        cls = -(-size // step) * step
        free = self._free.get(cls)
        if free:
            for _ in range(PROBES if len(free) > PROBES else len(free)):
                # a buffer still referenced elsewhere (held by a frame's view) is passed
                # over at the cost of a refcount, not a refused resize (a BufferError
                # raised and caught, ~1 us); the resize probe still decides for the
                # others. (`_head_refs` counts the same way: the queue, `buf`, the call.)
                buf = free[0]
                if sys.getrefcount(buf) <= _POOLED_REFS and _unexported(buf):
                    free.popleft()
                    self._bytes -= len(buf)
                    self.hits += 1
                    return buf
                free.rotate(-1)
        self.misses += 1
        return bytearray(cls)

    def give(self, buf: bytearray) -> None:
        n = len(buf)
        if n > self.max_bytes // 4:  # a rare huge request keeps no memory
            return
        step = 1 << max(n.bit_length() - 3, 0)
        cls = n // step * step  # n itself if `take` made it, else the largest class in it
        free = self._free.get(cls)
        if free is None:
            free = self._free[cls] = collections.deque()
        free.append(buf)
        self._bytes += n
        while self._bytes > self.max_bytes:  # the oldest of the class with most bytes
            most = max(self._free.values(), key=lambda q: len(q) * len(q[0]) if q else 0)
            self._bytes -= len(most.popleft())


class FrameAssembler:
    """See the module docstring. `on_frame(frame)` receives each complete frame (its
    payload, without the size prefix) in order."""

    __slots__ = (
        "_big",
        "_big_at",
        "_big_got",
        "_big_size",
        "_guess",
        "_hi",
        "_lo",
        "_max_frame",
        "_on_bad_size",
        "_on_frame",
        "_parts",
        "_parts_need",
        "_pool",
        "_upfront_max",
        "_view",
        "failed",
    )

    def __init__(self, max_frame: int, upfront_max: int, on_frame: Callable[[Frame], None],
                 on_bad_size: Callable[[int], None], pool: BufferPool | None = None) -> None:
        self._max_frame = max_frame
        self._pool = pool
        self._upfront_max = upfront_max
        self._on_frame = on_frame
        self._on_bad_size = on_bad_size
        self._view: memoryview | None = None  # the scratch, allocated when needed
        self._lo = 0  # unparsed bytes of the scratch: [_lo, _hi)
        self._hi = 0
        self._big: bytearray | None = None  # a big frame being read in place
        self._big_at = 0  # where its payload starts in `_big` (4: read from its prefix on)
        self._big_got = 0  # bytes of `_big` filled
        self._big_size = 0  # the frame's size (a pooled buffer may be longer)
        # the last big frame's size, while frames at a boundary are read into a pooled
        # buffer (`_big` with `_big_size` -1 until the size prefix is in) instead of the
        # scratch; 0: not guessing (no pool, or a small frame came)
        self._guess = 0
        self._parts: list[bytes] = []  # a frame over upfront_max, as it arrives
        self._parts_need = 0
        self.failed = False  # a bad size prefix was seen: input is discarded

    def get_buffer(self) -> memoryview:
        """Where the transport should read next (BufferedProtocol.get_buffer)."""
        big = self._big
        if big is not None:
            if self._big_size < 0:  # at a boundary: as far as a frame like the last
                return memoryview(big)[self._big_got : min(len(big), self._guess + 4)]
            return memoryview(big)[self._big_got : self._big_at + self._big_size]
        if self._guess and self._lo == self._hi and not self._parts_need and not self.failed:
            assert self._pool is not None
            big = self._big = self._pool.take(self._guess + 4)
            self._big_at, self._big_got, self._big_size = 4, 0, -1
            return memoryview(big)[: min(len(big), self._guess + 4)]
        view = self._view
        if view is None:
            view = self._view = memoryview(bytearray(SCRATCH))
        if self.failed:  # the stream is unusable: discard what comes
            self._lo = self._hi = 0
        elif len(view) - self._hi < BIG_FRAME:  # move the unparsed tail to the front
            # (a partial frame under BIG_FRAME, or a partial size prefix)
            rest = bytes(view[self._lo : self._hi])
            view[: len(rest)] = rest
            self._lo, self._hi = 0, len(rest)
        return view[self._hi :]

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` were read into the last buffer handed out."""
        big = self._big
        if big is not None:
            got = self._big_got = self._big_got + nbytes
            size = self._big_size
            if size < 0:  # read at a boundary into the guess: is it a frame that fits?
                if got < 4:
                    return
                (size,) = _SIZE.unpack_from(big, 0)
                if not (BIG_FRAME <= size <= self._max_frame and size + 4 <= len(big)
                        and size <= self._upfront_max and got - 4 - size <= SCRATCH - BIG_FRAME):
                    self._unguess(big, got)  # parsed as if read into the scratch
                    return
                self._big_size = size
            end = self._big_at + size
            if got >= end:
                self._big = None
                if self._pool is not None:
                    self._pool.give(big)
                    self._guess = size if size <= GUESS_MAX else 0
                rest = got - end  # only a guessed read goes past its frame's end
                if rest:
                    view = self._view
                    if view is None or len(view) < SCRATCH:  # (a guess turned scratch)
                        view = self._view = memoryview(bytearray(SCRATCH))
                    view[:rest] = memoryview(big)[end:got]
                    self._lo, self._hi = 0, rest
                self._on_frame(memoryview(big)[self._big_at : end].toreadonly())
                if rest:
                    self._parse()
            return
        if self.failed:
            return
        self._hi += nbytes
        self._parse()

    def _unguess(self, big: bytearray, got: int) -> None:
        """A read into the guess held no big frame that fits: the guess becomes the
        scratch (its frames are copied out as the scratch's are, so nothing will
        point into it) and guessing stops until the next big frame."""
        self._big = None
        self._guess = 0
        self._view = memoryview(big)
        self._lo, self._hi = 0, got
        self._parse()

    def release_if_idle(self) -> None:
        """Drop the scratch if nothing is half-received in it (and a guess buffer
        nothing was read into)."""
        big = self._big
        if big is not None:
            if self._big_size < 0 and self._big_got == 0:
                self._big = None
                assert self._pool is not None
                self._pool.give(big)
            return
        if self._lo == self._hi:
            self._view = None
            self._lo = self._hi = 0

    def _parse(self) -> None:
        view, lo, hi = self._view, self._lo, self._hi
        assert view is not None  # bytes arrived in it
        if self._parts_need:  # a frame over upfront_max: keep collecting it
            take = min(self._parts_need, hi - lo)
            self._parts.append(bytes(view[lo : lo + take]))
            self._parts_need -= take
            lo += take
            if not self._parts_need:
                frame = b"".join(self._parts)
                self._parts.clear()
                self._on_frame(frame)
        while not self._parts_need and hi - lo >= 4:
            (size,) = _SIZE.unpack_from(view, lo)
            if size < 0 or size > self._max_frame:
                self.failed = True
                lo = hi = 0
                self._on_bad_size(size)
                break
            end = lo + 4 + size
            if end <= hi:  # whole in the scratch: one copy
                self._on_frame(bytes(view[lo + 4 : end]))
                lo = end
                continue
            have = hi - lo - 4
            if size > self._upfront_max:  # not allocated on the peer's word
                self._parts.append(bytes(view[lo + 4 : hi]))
                self._parts_need = size - have
                lo = hi = 0
            elif size >= BIG_FRAME:  # the rest is read straight into its own buffer
                big = bytearray(size) if self._pool is None else self._pool.take(size)
                # through a memoryview: one memcpy (a bytearray's slice assignment from
                # a memoryview copies it into a temporary bytearray first)
                memoryview(big)[:have] = view[lo + 4 : hi]
                self._big, self._big_at, self._big_got, self._big_size = big, 0, have, size
                lo = hi = 0
            break
        if lo == hi:
            lo = hi = 0
        self._lo, self._hi = lo, hi
