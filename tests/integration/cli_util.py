"""`cli()`: the `tidegate` command line run in the test process, for tests that check
its exit status and output (tests/integration/test_cli_client.py, test_cluster_ops.py)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import tempfile

from tidegate.cli.main import main as cli_main


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """`tidegate ARGS` run in this process through the CLI's `main()`, with stdin,
    stdout and stderr as byte buffers: what these tests check is the exit status and
    the output, and a process per command cost ~1-1.5 s of interpreter start and imports
    on the loaded CI machine. WARNING and above that the code logs go to the captured
    stderr, as Python's last-resort handler prints them in a process that configures no
    logging. The process itself (`python -m tidegate.cli.main` on a terminal, Ctrl-C)
    is tested by test_consume_summary_starts_its_own_line_after_ctrl_c."""
    out, err = io.BytesIO(), io.BytesIO()
    fake_out = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    fake_err = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    # `produce` reads stdin's file descriptor (os.read in a thread): a real file
    fd, stdin_path = tempfile.mkstemp(prefix="tidegate-cli-stdin-")
    os.write(fd, stdin or b"")
    os.close(fd)
    fake_in = open(stdin_path, encoding="utf-8")  # noqa: SIM115 - closed below
    logged = logging.StreamHandler(fake_err)
    logged.setLevel(logging.WARNING)
    saved = sys.stdin, sys.stdout, sys.stderr
    logging.getLogger().addHandler(logged)
    sys.stdin, sys.stdout, sys.stderr = fake_in, fake_out, fake_err
    try:
        try:
            code = cli_main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        fake_out.flush()
        fake_err.flush()
        return subprocess.CompletedProcess(["tidegate", *args], code, out.getvalue(),
                                           err.getvalue())
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        logging.getLogger().removeHandler(logged)
        fake_in.close()
        os.unlink(stdin_path)
