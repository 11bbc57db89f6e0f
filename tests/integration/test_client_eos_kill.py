"""Exactly-once consume-transform-produce with Tidegate's client under kill -9 (issue 10's
acceptance: the seeds' read-process-write loop, by the helper and by hand).

test_eos_pipeline.py's pipeline with its processor swapped for
tidegate_eos_processor.py: an input topic (3 partitions) of N unique values, a
processor subprocess (fixed transactional.id and static group member) turning each
into ``out-<value>`` with its consumed offsets committed in the same transaction,
SIGKILLed at random moments many times and restarted, and the broker SIGKILLed and
restarted a couple of times. At the end a read_committed read of the output by
confluent-kafka holds every input value exactly once, on the input's partition, and
the group's committed offsets equal the input's end offsets. The processor is capped at
`RATE` records/s so that the kills interrupt work (unthrottled, one incarnation would
finish the input between two kills).

Two processors: ``helper`` (`TransactionalProcessor`) and ``manual`` (the loop by hand
with the blocking `Producer`/`Consumer`, abort + seek to committed on abortable errors).
`make test` runs N=10,000 with >= 8 processor kills and a broker kill for each;
`make soak` (TIDEGATE_SOAK=1) N=100,000 with many more.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.conftest import ROOT, soak_seed
from tests.integration.test_eos_pipeline import Pipeline, run_pipeline

PROCESSOR = Path(__file__).with_name("tidegate_eos_processor.py")
# records/s per processor: 20,000 values take longer than the kill phase, so the kills
# land mid-work (mostly with a transaction open), not on an idle processor
RATE = 1000


class _TidegatePipeline(Pipeline):
    mode = ""

    def spawn(self) -> None:
        self.incarnation += 1
        args = [sys.executable, str(PROCESSOR), self.broker.bootstrap, "in", "out",
                self.group, f"tidegate-eos-{self.mode}", "--mode", self.mode,
                "--batch", str(self.rng.randint(*self.batch_range)), "--rate", str(RATE),
                "--transaction-timeout-ms", str(self.txn_timeout_ms), "--max-seconds", "900"]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + str(ROOT))
        with self.log_path(self.incarnation).open("wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=ROOT)


class HelperPipeline(_TidegatePipeline):
    mode = "helper"


class ManualPipeline(_TidegatePipeline):
    mode = "manual"


PIPELINES = {"helper": HelperPipeline, "manual": ManualPipeline}


@pytest.mark.parametrize("mode", ["helper", pytest.param("manual", marks=[
    pytest.mark.slow, pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                                         reason="soak run: `make soak` (TIDEGATE_SOAK=1)")])])
def test_tidegate_processor_exactly_once_under_kill9(tmp_path: Path, mode: str) -> None:
    run_pipeline(tmp_path, n=10_000, processor_kills=8, broker_kills=1, budget=150,
                 seed=7, pipeline=PIPELINES[mode])


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
@pytest.mark.parametrize("mode", sorted(PIPELINES))
def test_tidegate_processor_exactly_once_soak(tmp_path: Path, mode: str) -> None:
    run_pipeline(tmp_path, n=100_000, processor_kills=60, broker_kills=6, budget=1500,
                 seed=soak_seed(), pipeline=PIPELINES[mode])
