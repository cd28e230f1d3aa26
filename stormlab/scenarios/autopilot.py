"""The autopilot that plays by rules, not by steps (pure).

It sees what a responder sees (the lab's reading, as `stormlab ops status` gives it) and makes
the moves AWS made, each when its rule says so, so the order and the spans of the game day's
timeline come from the lab, not from the scenario file:

1. a storm (more than ``storm`` of the fleet disqualified): look first (``status``);
2. add capacity through the shared admin path, and again every ``retry_s`` while it fails;
3. after ``capacity_tries`` failures (the admin path shares the storm's fate): pause the
   metadata service;
4. once the work in flight has drained (under ``drained`` requests): add capacity (it goes
   through now);
5. once the capacity is in: readmit the fleet in ``staged`` steps ``every_s`` apart;
6. at any time, a table whose customers fail (above ``tail``) while the aggregate looks fine
   (under 1%), with no storm: look at each table, then restore the partition that does not
   take its share (the Monday tail).

``decide`` takes one reading and the time, and returns the next move or None; ``told`` takes
what became of it. Times are in profile seconds (the runner's pace converts them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from stormcore.settings import SettingsError, parse_duration
from stormlab.engine.reading import Reading

WATCHING, TRYING, DRAINING, ADDING, READMITTING, READMITTED = (
    "watching",
    "trying capacity",
    "draining",
    "adding capacity",
    "readmitting",
    "readmitted",
)


def _rule(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Rules:
    """When each move is made: thresholds on what a responder sees."""

    storm: float = _rule(0.1, "a storm: more than this share of the fleet disqualified")
    cores: float = _rule(80.0, "the metadata service's virtual cores to ask for")
    capacity_tries: int = _rule(2, "tries through the shared admin path before pausing")
    retry_s: float = _rule(10.0, "seconds between two tries")
    drained: float = _rule(5.0, "add the capacity once fewer membership requests than this are in flight")
    staged: int = _rule(5, "readmission steps")
    every_s: float = _rule(10.0, "seconds between readmission steps")
    tail: float = _rule(0.05, "a table failing above this share while the aggregate is under 1%: the Monday tail")

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> Rules:
        """Rules from a scenario's ``rules:`` mapping (numbers as text or numbers)."""
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(args) - set(known))
        if unknown:
            raise ValueError(f"unknown rules {', '.join(unknown)}; rules: {', '.join(known)}")
        out: dict[str, Any] = {}
        for key, value in args.items():
            try:
                number = parse_duration(str(value)) if key.endswith("_s") else float(value)
            except (ValueError, SettingsError):
                raise ValueError(f"{key}: not a number: {value!r}") from None
            if number < 0:
                raise ValueError(f"{key} must not be negative")
            out[key] = int(number) if key in ("capacity_tries", "staged") else number
        return cls(**out)


@dataclass(frozen=True)
class Move:
    name: str  # as the journal and the report show it
    action: str  # the `stormlab ops` action
    args: dict[str, Any] = field(default_factory=dict)
    expect_failure: bool = False  # the shared admin path in a storm


LOOK = Move("look first", "status")
TRY = Move("add capacity through the shared admin path", "set-capacity", {}, expect_failure=True)
PAUSE = Move("pause requests to the metadata service", "pause-metadata")
ADD = Move("add capacity", "set-capacity")
READMIT = Move("staged resume", "resume")
LOOK_TABLES = Move("look at each table", "status")
RESTORE = Move("restore the partition that does not take its share", "restore-partition")
MOVES = (LOOK, TRY, PAUSE, ADD, READMIT, LOOK_TABLES, RESTORE)


@dataclass
class Autopilot:
    rules: Rules = field(default_factory=Rules)
    state: str = WATCHING
    tries: int = 0
    last_try_s: float = float("-inf")
    looked: bool = False
    tail_looked: bool = False
    restored: bool = False
    moves: list[tuple[float, Move]] = field(default_factory=list)

    def decide(self, sample: Reading, now_s: float) -> Move | None:
        """The next move this reading calls for, or None."""
        r = self.rules
        storm = (sample.disqualified_fraction or 0.0) > r.storm
        if self.state == WATCHING:
            if storm:
                return self._storm_move()
            return self._tail_move(sample)
        if self.state == TRYING:
            if self.tries >= r.capacity_tries:
                return PAUSE
            return self._try() if now_s - self.last_try_s >= r.retry_s else None
        if self.state == DRAINING:
            inflight = sample.metadata_inflight
            return _with(ADD, cores=r.cores) if inflight is not None and inflight < r.drained else None
        if self.state == ADDING:
            return _with(ADD, cores=r.cores)
        if self.state == READMITTING:
            return _with(READMIT, staged=r.staged, every=f"{r.every_s:g}s")
        return None if storm else self._tail_move(sample)

    def _storm_move(self) -> Move:
        if not self.looked:
            return LOOK
        return self._try()

    def _try(self) -> Move:
        return _with(TRY, cores=self.rules.cores)

    def _tail_move(self, sample: Reading) -> Move | None:
        """The Monday tail: one table failing while the aggregate looks fine."""
        if self.restored:
            return None
        aggregate = sample.customer_error_ratio
        worst = sample.worst_table_error_ratio
        if aggregate is None or worst is None or aggregate >= 0.01 or worst <= self.rules.tail:
            return None
        return RESTORE if self.tail_looked else LOOK_TABLES

    def told(self, move: Move, ok: bool, now_s: float) -> None:
        """What became of a move: the autopilot's next state."""
        self.moves.append((now_s, move))
        if move is LOOK:
            self.looked, self.state = True, TRYING
        elif move is LOOK_TABLES:
            self.tail_looked = True
        elif move.name == TRY.name:
            self.tries, self.last_try_s = self.tries + 1, now_s
            if ok:  # the capacity went through the shared path after all: readmit nothing, watch
                self.state = READMITTED
        elif move is PAUSE:
            self.state = DRAINING if ok else TRYING
        elif move.name == ADD.name:
            self.state = READMITTING if ok else ADDING
        elif move.name == READMIT.name:
            self.state = READMITTED if ok else READMITTING
        elif move is RESTORE:
            self.restored = ok


def _with(move: Move, **args: Any) -> Move:
    return Move(move.name, move.action, {**move.args, **args}, move.expect_failure)
