"""Counters of a chaos run, and the report it prints."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ChaosReport:
    """Everything a chaos run counts, across trials."""

    trials: int = 0
    steps: int = 0
    attempts: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    # SIGKILLs of a try in a child process: landed, by the point aimed at, and armed at a
    # point the try then did not reach (it ended on its own).
    kills: Counter[str] = field(default_factory=Counter)
    kills_missed: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    losses: int = 0
    wrong_rows: int = 0
    wedged: int = 0
    audit_errors: int = 0
    unclear_errors: int = 0
    failing_seeds: list[str] = field(default_factory=list)
    # The first message seen of each refusal kind: what a user would read.
    samples: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, counter: str, key: str, n: int = 1) -> None:
        with self._lock:
            getattr(self, counter)[key] += n

    @property
    def kill_share(self) -> float:
        """SIGKILLed tries in % of all load attempts."""
        return 100.0 * sum(self.kills.values()) / self.attempts if self.attempts else 0.0

    def kill_line(self) -> str:
        landed = sum(self.kills.values())
        missed = ", ".join(f"{k} {v}" for k, v in sorted(self.kills_missed.items())) or "none"
        return (
            f"chaos: load attempts {self.attempts}, SIGKILLs landed {landed} "
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.kills.items())) or 'none'}), "
            f"kill share {self.kill_share:.1f}%; armed but not reached: {missed}"
        )

    @property
    def failures(self) -> int:
        return (
            self.duplicates
            + self.losses
            + self.wrong_rows
            + self.wedged
            + self.audit_errors
            + (self.unclear_errors)
        )

    def lines(self) -> list[str]:
        def fmt(c: Counter[str]) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"

        return [
            f"chaos: trials {self.trials}, steps {self.steps}, load attempts {self.attempts}",
            f"chaos: faults injected {sum(self.faults.values())}: {fmt(self.faults)}",
            self.kill_line(),
            f"chaos: history events: {fmt(self.events)}",
            f"chaos: outcomes: {fmt(self.outcomes)}",
            f"chaos: refusals with a clear error (documented): {fmt(self.refusals)}",
            f"chaos: duplicates {self.duplicates}, losses {self.losses}, wrong rows {self.wrong_rows}, "
            f"wedged pipelines {self.wedged}, audit errors {self.audit_errors}, "
            f"unclear errors {self.unclear_errors}, kill share {self.kill_share:.1f}%",
            f"chaos: failing seeds: {', '.join(self.failing_seeds) or 'none'}",
        ] + [f"chaos: sample {kind}: {text[:400]}" for kind, text in sorted(self.samples.items())]


REPORT = ChaosReport()
