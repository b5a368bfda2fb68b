"""The merge pipeline of the chaos harness (``--pipeline merge``): generated histories of
change files loaded with ``write_mode='merge'``, under the harness's faults.

A merge trial has one table (partitioned by ``part``) fed by two pipelines that change the
same few keys (:mod:`tests.chaos.merge_world`): an offset pipeline over one landing
directory (its files rewritten in place, deleted, moved, late, hidden) and an interval
pipeline over a directory per day, whose days are loaded daily, backfilled newest first,
one after the other or in parallel threads, and restated. Both load with ``merge_keys=['id']``,
``order_by='seq'``, ``delete_when="op = 'D'"`` and tombstones kept. The faults are the
append trials' (:class:`~tests.chaos.machine.ChaosMachine`, whose machinery this reuses): a
raise at every fault point, SIGKILLed tries in warm children, zombies racing their retry,
two runs of a pipeline at once, the two pipelines at once (their merges rewrite the same
files, so one recomputes), another writer's OPTIMIZE, VACUUM, checkpoints and log clean-up
between loads and while a zombie stalls, short marker retention, and the drain that clears
every failed run and re-freezes what the runbook says. The checker
(:mod:`tests.chaos.merge_oracle`) compares the table with the source's newest row per key
over the batches the table says are committed.

Not in a merge trial: the JDBC pipelines, the quarantine (and malformed records), schema
drift, the delta-spark engine (which refuses ``write_mode='merge'``) and Delta Spark as the
other writer.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from hypothesis.stateful import initialize, precondition, rule

from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.faults import ENV_VAR
from airflow_eod.sources.landing_files import LandingFilesSource
from tests.chaos.machine import (
    BASE,
    DAYS,
    DICE,
    SHORT_RETENTION,
    SPARK,
    ChaosMachine,
    Pipe,
    Run,
)
from tests.chaos.merge_oracle import check_merge_table
from tests.chaos.merge_world import MERGE_DDL, MERGE_LOAD, MergeWorld
from tests.chaos.oracle import Verdict
from tests.chaos.report import REPORT
from tests.chaos.spark_writer import ForeignRows
from tests.chaos.store import (
    LandingMirror,
    exists,
    landing_on_s3,
    landing_source_args,
    on_s3,
    ref,
    remove_world,
)
from tests.chaos.world import OPTIONAL, PARTS, REQUIRED

# Set to 0 to count verify's errors on a merge table as events only (see audit_merge_table).
MERGE_AUDIT = "EOD_CHAOS_MERGE_AUDIT"
# The append trial's rules a merge trial runs too: they work on any pipeline of the trial.
SHARED_RULES = ("another_writer", "wait_past_retention", "zombie_and_retry", "restate")


class MergeChaosMachine(ChaosMachine):
    """One merge trial: a history of change files, merge loads and faults against one table."""

    def __init__(self) -> None:
        super().__init__()
        self.pg = None  # no JDBC pipeline in a merge trial
        self.quarantine = None  # nor a quarantine: the change files are well formed

    @initialize(seed=DICE)
    def setup(self, seed: int) -> None:
        engine = SPARK.get("engine", "delta-rs")
        if engine != "delta-rs" or SPARK.get("delta_spark"):
            raise ValueError("a merge trial loads with engine delta-rs and without Delta Spark as a writer")
        self.seed = (seed + self.salt * 2_654_435_761) % 2**63
        self.rng = random.Random(self.seed)
        short, max_files, kill_roll = self.rng.random() < 0.5, self.rng.randint(1, 3), self.rng.randrange(100)
        self.kill_budget = self.max_kills if kill_roll < self.kill_percent else 0
        self.parts = PARTS
        mirror = LandingMirror(tmp=self.tmp) if landing_on_s3() else None
        self.mworld = MergeWorld(os.path.join(self.tmp, "landing"), self.rng, self.parts, mirror)
        self.world = self.mworld
        self.config = dict(SHORT_RETENTION) if short else {}
        self.short = short
        self.max_files = max_files
        land = self.world.root
        self.pipes = {
            "moff": Pipe("moff", "chaos.merge.off", "offsets", os.path.join(land, "moff")),
            "mint": Pipe("mint", "chaos.merge.int", "interval", os.path.join(land, "mint")),
        }
        self._folder(self.pipes["moff"].root)
        self.all_pipes = ["moff", "mint"]
        self.foreign = ForeignRows()
        self.spark_writer = None
        self.spark_pipes = set()
        REPORT.count("events", "short_retention" if short else "default_retention")
        REPORT.count("events", "merge_trial")

    # -- what the append trial's machinery asks of a pipeline --------------------------
    def source(self, pipe: Pipe, interval: tuple[datetime, datetime] | None) -> Any:
        if landing_on_s3():
            REPORT.count("events", "landing_source_on_s3")
        if pipe.boundary == "offsets":
            return LandingFilesSource(
                **landing_source_args(self.tmp, pipe.root),
                file_format="csv",
                schema=MERGE_DDL,
                max_files_per_batch=self.max_files,
            )
        assert interval is not None
        return LandingFilesSource(
            **landing_source_args(self.tmp, self.day_dir(pipe, interval[0])),
            file_format="csv",
            schema=MERGE_DDL,
            boundary="interval",
        )

    def _request(self, run: Run, try_no: int) -> tuple[Any, Any, dict[str, Any]]:
        request, source, settings = super()._request(run, try_no)
        return request, source, {**settings, **MERGE_LOAD, "quarantine_table_uri": None}

    def new_run(
        self,
        pipe: Pipe,
        interval: tuple[datetime, datetime] | None = None,
        *,
        restate: bool = False,
        key: str | None = None,
    ) -> Run:
        run = super().new_run(pipe, interval, restate=restate, key=key)
        if interval is not None:
            self._folder(self.day_dir(pipe, interval[0]))  # an empty day is a day, not a missing source
        return run

    def new_input_for(self, run: Run, r: random.Random) -> None:
        if run.pipe.boundary == "offsets":
            self.world.land(run.pipe.root, r.randrange(1, 5))
        elif run.interval is not None and not run.restate:
            self._land_day((run.interval[0] - BASE).days, r.randrange(1, 5))

    def _land_day(self, day: int, changes: int) -> None:
        directory = self.day_dir(self.pipes["mint"], BASE + timedelta(days=day))
        # A file that lands after its day was planned is late: only a restatement loads it.
        expect = OPTIONAL if directory in self.planned_dirs else REQUIRED
        self.world.land(directory, changes, expect=expect)
        REPORT.count("events", "merge_land_day" + ("_late" if expect == OPTIONAL else ""))

    # -- the history ---------------------------------------------------------------------
    @rule(dice=DICE)
    def land_change_file(self, dice: int) -> None:
        """A change file for the offset pipeline (sometimes late or hidden) or for a day."""
        r = self.dice(dice)
        if r.random() < 0.5:
            late, hidden = r.random() < 0.3, r.random() < 0.1
            self.world.land(self.pipes["moff"].root, r.randrange(7), hidden=hidden, late=late)
            REPORT.count("events", "merge_land_offsets" + ("_late" if late else ""))
        else:
            self._land_day(r.randrange(DAYS), r.randrange(7))

    def _offsets_files(self) -> list[Any]:
        return [s for s in self.world.files_in(self.pipes["moff"].root) if s.expect != "never"]

    @precondition(lambda self: bool(self._offsets_files()))
    @rule(dice=DICE)
    def change_merge_input(self, dice: int) -> None:
        """A change file rewritten in place (new changes), deleted, or moved to another name."""
        r = self.dice(dice)
        what = r.choice(["rewrite", "delete", "move"])
        getattr(self.world, what)(r.choice(self._offsets_files()))
        REPORT.count("events", f"merge_input_{what}")

    @rule(dice=DICE)
    def load_merge_offsets(self, dice: int) -> None:
        r = self.dice(dice)
        for _ in range(r.randrange(4)):
            self.world.land(self.pipes["moff"].root, r.randrange(1, 7))
        self.dag_run(self.new_run(self.pipes["moff"]), self.draw_fault(r))

    @rule(dice=DICE)
    def load_merge_day(self, dice: int) -> None:
        """A daily run of the interval pipeline."""
        r = self.dice(dice)
        day = r.randrange(DAYS)
        for _ in range(r.randrange(3)):
            self._land_day(day, r.randrange(1, 6))
        self.dag_run(self.new_run(self.pipes["mint"], self.interval_for(day, "daily")), self.draw_fault(r))

    @rule(dice=DICE)
    def backfill_merge_days(self, dice: int) -> None:
        """Days loaded newest first (older changes after newer ones), one after the other or
        at the same time in parallel threads, as a backfill does."""
        r = self.dice(dice)
        days = sorted(r.sample(range(DAYS), r.randrange(2, 5)), reverse=True)
        for d in days:
            for _ in range(r.randrange(3)):
                self._land_day(d, r.randrange(1, 6))
        runs = [self.new_run(self.pipes["mint"], self.interval_for(d, "daily")) for d in days]
        faults = [self.draw_fault(r) for _ in runs]
        if r.random() < 0.5:
            REPORT.count("events", "merge_backfill_newest_first")
            for run, fault in zip(runs, faults, strict=True):
                self.dag_run(run, fault)
            return
        REPORT.count("events", "merge_backfill_in_parallel")
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            list(pool.map(lambda i: self.dag_run(runs[i], faults[i]), range(len(runs))))

    @rule(dice=DICE)
    def two_runs_at_once(self, dice: int) -> None:
        """Two DAG runs of the offset pipeline planning and merging at the same moment."""
        r = self.dice(dice)
        for _ in range(r.randrange(1, 4)):
            self.world.land(self.pipes["moff"].root, r.randrange(1, 6))
        runs = [self.new_run(self.pipes["moff"]), self.new_run(self.pipes["moff"])]
        REPORT.count("events", "two_runs_at_once")
        faults = [self.draw_fault(r) for _ in runs]
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda i: self.dag_run(runs[i], faults[i]), range(2)))

    @rule(dice=DICE)
    def two_pipelines_at_once(self, dice: int) -> None:
        """Both pipelines merge changes of the same keys at the same moment: the files one
        rewrites are the other's too, so one of them commits first and the other computes its
        merge again (or a maintenance commit lands between a read and its commit)."""
        r = self.dice(dice)
        day = r.randrange(DAYS)
        self.world.land(self.pipes["moff"].root, r.randrange(1, 6))
        self._land_day(day, r.randrange(1, 6))
        interval = self.interval_for(day, "daily")
        runs = [self.new_run(self.pipes["moff"]), self.new_run(self.pipes["mint"], interval)]
        REPORT.count("events", "merge_two_pipelines_at_once")
        faults = [self.draw_fault(r) for _ in runs]
        meanwhile = r.choice(["optimize", "checkpoint"]) if r.random() < 0.3 else None
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = pool.map(lambda i: self.dag_run(runs[i], faults[i]), range(2))
            if meanwhile is not None:
                time.sleep(r.uniform(0.2, 1.0))
                self.maintain(self.table, meanwhile)
            list(done)

    # -- the end of a trial ----------------------------------------------------------------
    def drain(self) -> list[str]:
        """Faults stop: every day with a directory is loaded, every failed run cleared (and
        re-frozen where the runbook says so), the offset pipeline run until it has nothing."""
        wedged: list[str] = []
        days = self.pipes["mint"]
        for day in range(DAYS):
            start = BASE + timedelta(days=day)
            covered = any(r.pipe is days and r.interval and r.interval[0] == start for r in self.runs)
            if os.path.isdir(self.day_dir(days, start)) and not covered:
                self.new_run(days, self.interval_for(day, "daily"))
        for run in list(self.runs):
            if not run.done and not self._settle(run):
                wedged.append(f"{run.token} ({run.pipe.pipeline_id}): {run.errors[-1:] or 'no error'}")
        for _ in range(len(self.world.paths) + 3):
            run = self.new_run(self.pipes["moff"])
            if not self._settle(run):
                wedged.append(f"{run.token} ({run.pipe.pipeline_id}): {run.errors[-1:]}")
                break
            if not self._last_loaded_something:
                break
        return wedged

    def audit_merge_table(self) -> list[str]:
        """``verify``'s errors on the merge table, each an audit error: ``verify`` knows merge
        tables (issue 22, item 4). With ``EOD_CHAOS_MERGE_AUDIT=0`` they are only counted and
        sampled (``verify_on_merge_table_<kind>``), to look at an audit change apart."""
        if not exists(self.table):
            return []
        findings = [f"{f.kind}: {f.message}" for f in audit_table(ref(self.table)).errors]
        if os.environ.get(MERGE_AUDIT, "1") != "0":
            return findings
        for f in findings:
            kind = f.split(":", 1)[0]
            REPORT.count("events", f"verify_on_merge_table_{kind}")
            REPORT.samples.setdefault(f"verify_on_merge_table_{kind}", f)
        return []

    def teardown(self) -> None:
        try:
            os.environ.pop(ENV_VAR, None)
            if not hasattr(self, "world"):
                return
            REPORT.trials += 1
            wedged = self.drain()
            if on_s3() and exists(self.table):
                REPORT.count("events", "main_table_on_s3")
            verdict = check_merge_table(
                self.mworld,
                self.table,
                [p.pipeline_id for p in self.pipes.values()],
                Verdict(),
                landing=self.world.root if landing_on_s3() else None,
            )
            REPORT.count("events", "merge_rows_checked", verdict.rows)
            for kind, n in self.mworld.kinds.items():
                REPORT.count("events", f"merge_change_{kind}", n)
            REPORT.duplicates += len(verdict.duplicates)
            REPORT.losses += len(verdict.losses)
            REPORT.wrong_rows += len(verdict.wrong)
            REPORT.wedged += len(wedged)
            findings = self.audit_merge_table()
            REPORT.audit_errors += len(findings)
            problems = (
                [f"duplicate: {d}" for d in verdict.duplicates]
                + [f"loss: {d}" for d in verdict.losses]
                + [f"wrong: {d}" for d in verdict.wrong]
                + [f"wedged: {w}" for w in wedged]
                + [f"audit: {f}" for f in findings]
                + self.problems
            )
            assert not problems, "chaos merge trial broke the guarantee:\n" + "\n".join(problems[:40])
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
            remove_world(self.tmp)


# The append trial's own rules (its landings, JDBC changes, drift, Delta Spark...) are not a
# merge trial's: a rule is found by name on the class, so a plain attribute of the same name
# hides it. A rule added to ChaosMachine later is hidden here too unless it is shared.
for _rule in ChaosMachine.setup_state().rules:
    _name = _rule.function.__name__
    if _name not in SHARED_RULES and _name not in vars(MergeChaosMachine):
        setattr(MergeChaosMachine, _name, None)
