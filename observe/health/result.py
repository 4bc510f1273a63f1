"""What a health check returns."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum


class Status(str, Enum):
    """PASS and FAIL are verdicts; UNKNOWN means the check could not run (never a pass or a fail)."""

    PASS = "PASS"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"


@dataclass
class Result:
    """One check's outcome: a one-line summary, the evidence behind it, how long it took."""

    check: str
    status: Status
    summary: str
    evidence: dict = field(default_factory=dict)
    seconds: float = 0.0
    action: str = ""  # what the policy says to do about a FAIL: drain, reset, reboot, or nothing
    category: str = ""  # the drain reason's type: hardware, node or user (default: the check's policy)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        return cls(**{**d, "status": Status(d["status"])})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)


def unknown(check: str, why: str, **evidence) -> Result:
    """A check that could not run, and why."""
    return Result(check, Status.UNKNOWN, why, evidence)
