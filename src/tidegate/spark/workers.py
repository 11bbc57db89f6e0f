"""Check, at `register()`, that the Python Spark starts for its workers can import tidegate.

Every read and write of ``format("tidegate")`` runs Python code in Spark's Python
workers (even the driver's planning does), which Spark starts with the interpreter
named by ``PYSPARK_PYTHON`` when the SparkContext was created, else ``python3`` from
PATH (`SparkContext.pythonExec`; pyspark 4 reads nothing else). A driver started as
``.venv/bin/python job.py`` without ``PYSPARK_PYTHON`` therefore gets workers without
tidegate, and each task fails with ``ModuleNotFoundError: No module named 'tidegate'``
inside a Java stack trace.

`check_worker_python` tries ``import tidegate`` in that interpreter, with the
``PYTHONPATH`` the workers get, once per (interpreter, path) — a subprocess of about
50 ms. It only runs where the answer holds for the workers: a ``local`` or
``local-cluster`` master (the workers run on this machine, with this environment), and
no ``--py-files`` / `addPyFile` code that could bring tidegate along. It raises
`WorkerPythonError` only for a sure failure (the interpreter is missing, or tidegate
is not importable there); anything else it cannot tell is logged and ignored, so a
working setup is never refused.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["WorkerPythonError", "check_worker_python"]

log = logging.getLogger("tidegate.spark")
PROBE_TIMEOUT_S = 30.0


class WorkerPythonError(RuntimeError):
    """Spark's Python workers would not be able to import tidegate."""


def _context(spark: SparkSession) -> Any | None:
    try:  # Spark Connect sessions have no SparkContext: nothing to check from here
        return spark.sparkContext
    except Exception:
        return None


@functools.lru_cache(maxsize=16)
def _probe(python: str, pythonpath: str, cwd: str) -> tuple[str, str] | None:
    """None if `python` imports tidegate, else (kind, detail): kind "missing" (no such
    interpreter), "no-tidegate" or "unknown"."""
    exe = python if os.sep in python else shutil.which(python)
    if exe is None or not os.path.exists(exe):
        return "missing", f"{python!r} was not found"
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    try:
        r = subprocess.run([exe, "-c", "import tidegate"], capture_output=True, text=True,
                           env=env, cwd=cwd, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return "unknown", repr(e)
    if r.returncode == 0:
        return None
    last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
    if "No module named 'tidegate'" in last:
        return "no-tidegate", last
    return "unknown", last


def check_worker_python(spark: SparkSession) -> None:
    """See the module docstring."""
    sc = _context(spark)
    if sc is None:
        return
    master = str(sc.master)
    if not master.startswith("local"):
        return  # the workers' machines and environment are not this process's
    if getattr(sc, "_python_includes", None) or sc.getConf().get("spark.submit.pyFiles"):
        return  # shipped code may bring tidegate with it
    python = str(sc.pythonExec)
    if os.sep in python and not os.path.isabs(python):
        return  # relative to the executor's directory (an unpacked archive, say)
    # the workers' PYTHONPATH: spark.executorEnv.PYTHONPATH, then the driver's
    environment = getattr(sc, "environment", {}) or {}
    parts = [str(environment.get("PYTHONPATH", "")), os.environ.get("PYTHONPATH", "")]
    pythonpath = os.pathsep.join(p for p in parts if p)
    problem = _probe(python, pythonpath, os.getcwd())
    if problem is None:
        return
    kind, detail = problem
    if python == os.environ.get("PYSPARK_PYTHON"):
        chosen = "named by PYSPARK_PYTHON"
    elif python == "python3":
        chosen = "python3 from PATH: PYSPARK_PYTHON was not set when the SparkContext " \
                 "was created"
    else:
        chosen = "the SparkContext's pythonExec"
    fix = (f"set PYSPARK_PYTHON={sys.executable} (this driver's Python) before the "
           "SparkSession is created, e.g. os.environ['PYSPARK_PYTHON'] = sys.executable, "
           f"or install tidegate[spark] into {python}")
    if kind == "unknown":
        log.warning("could not check that Spark's Python workers (%s) can import "
                    "tidegate: %s; if tasks fail with ModuleNotFoundError, %s",
                    python, detail, fix)
        return
    raise WorkerPythonError(
        f"Spark's Python workers would run {python!r} ({chosen}), which cannot import "
        f"tidegate ({detail}): {fix}. (register(spark, check_workers=False) skips this "
        "check.)")
