"""CPU per request frame in the broker's frame assembler, beside a plain copy of the bytes.

The broker reads requests through `protocol.frame_buffer.FrameAssembler` (with the
listener's `BufferPool`): a big Produce request is read into a buffer of its own. This
bench feeds a stream of alike frames (`--size` bytes each, 16 back to back) through
`get_buffer` / `buffer_updated` as a transport does, each read filling at most `--read`
bytes of the buffer handed out, while the last 8 frames are kept alive (requests in
flight hold their frames), and reports the CPU per frame (`time.thread_time`, the min
and median of `--rounds` rounds of `--frames` frames).

The reference, measured in the same run: the same reads copied into one preallocated
buffer and nothing else, the socket read's own cost (the floor: a transport must put the
bytes somewhere). Each `--tree DIR` (a `git worktree` of another commit) runs the same
loop on that tree's assembler in a process of its own: an A/B in one run.

    .venv/bin/python bench/frame_assembler.py [--size 66000] [--read 1048576]
        [--frames 3000] [--rounds 7] [--tree /tmp/before]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HELD = 8  # frames kept alive, as requests in flight keep theirs


def _stream(size: int) -> memoryview:
    frame = struct.pack(">i", size) + os.urandom(size)
    return memoryview(frame * 16)


def run_loop(size: int, read: int, frames: int, rounds: int, plain: bool) -> list[float]:
    """CPU us per frame of each round: the assembler's (`plain` False) or a plain copy."""
    from tidegate.protocol.frame_buffer import BufferPool, FrameAssembler

    stream = _stream(size)
    held: list[Any] = []

    def on_frame(frame: Any) -> None:
        held.append(frame)
        if len(held) > HELD:
            held.pop(0)

    def bad(_size: int) -> None:
        raise AssertionError("bad size")

    asm = FrameAssembler(100 << 20, 16 << 20, on_frame, bad, BufferPool())
    sink = memoryview(bytearray(len(stream)))
    out = []
    for _ in range(rounds):
        t0 = time.thread_time()
        for _ in range(max(frames // 16, 1)):
            pos = 0
            while pos < len(stream):
                buf = sink[pos:] if plain else asm.get_buffer()
                n = min(len(buf), len(stream) - pos, read)
                buf[:n] = stream[pos : pos + n]
                if not plain:
                    asm.buffer_updated(n)
                pos += n
        out.append((time.thread_time() - t0) / (max(frames // 16, 1) * 16) * 1e6)
    if not plain:
        assert held and len(held[-1]) == size  # the frames came out whole
    return out


def _in_tree(tree: Path, args: argparse.Namespace, plain: bool) -> list[float]:
    """`run_loop` on `tree`'s source in a process of its own (a JSON list back)."""
    code = (f"import json, sys; sys.path[:0] = [{str(tree / 'src')!r}, {str(ROOT)!r}]\n"
            "from bench.frame_assembler import run_loop\n"
            f"print(json.dumps(run_loop({args.size}, {args.read}, {args.frames}, "
            f"{args.rounds}, {plain})))")
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env, timeout=600).stdout
    return [float(x) for x in json.loads(out.strip().splitlines()[-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--size", type=int, default=66_000, help="bytes of each frame")
    ap.add_argument("--read", type=int, default=1 << 20, help="most bytes one read fills")
    ap.add_argument("--frames", type=int, default=3000, help="frames per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tree", action="append", default=[], type=Path,
                    help="another source tree (a git worktree) to run beside this one")
    args = ap.parse_args()
    rows = [("plain copy of the reads (the floor)", _in_tree(ROOT, args, True)),
            ("this tree", _in_tree(ROOT, args, False))]
    rows += [(str(t), _in_tree(t.resolve(), args, False)) for t in args.tree]
    print(f"{args.size}-byte frames, reads of at most {args.read} bytes, {HELD} frames held, "
          f"{args.rounds} rounds of {args.frames} frames; CPU us per frame")
    print(f"{'target':<40}{'min':>10}{'median':>10}{'x floor':>10}")
    floor = min(rows[0][1])
    for name, vals in rows:
        print(f"{name:<40}{min(vals):>10.2f}{statistics.median(vals):>10.2f}"
              f"{min(vals) / floor:>10.2f}")


if __name__ == "__main__":
    main()
