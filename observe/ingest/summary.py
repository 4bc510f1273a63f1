"""What an ingest run reports: its counts, and the error an input that cannot be ingested raises."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from observe import boot_copies


class InputError(ValueError):
    """An input cannot be ingested (unknown format, unreadable); the message is one line."""


@dataclass
class Summary:
    """What an ingest run did."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    stored: int = 0
    duplicates: int = 0
    expired: int = 0  # older than the store's retention: not stored again
    unparsed: int = 0
    quarantined: int = 0  # of them, records a parser failed on (attrs.parse_error)
    no_node: int = 0  # stored records of a node's own log (kernel, GPU) that no line, hint or path gave a node
    yearless: int = 0  # records whose stamps carry no year: dated by their file's modification time (no --year)
    years: set[int] = field(default_factory=set)  # the years those were given
    parse_error: str = ""  # the first one's reason
    blank: int = 0
    marks_pending: str = ""  # why the rows that copy another input's record are not marked yet
    index_pending: str = ""  # why the notable index (observe/store/notable.py) was not brought up to date
    seconds: float = 0.0
    kinds: Counter = field(default_factory=Counter)
    sources: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    boot_copies: boot_copies.Copies = field(default_factory=boot_copies.Copies)  # kernel records' copies (both clocks)
    file_ids: set[str] = field(default_factory=set)

    @property
    def parsed_pct(self) -> float:
        return 100.0 * (self.records - self.unparsed) / self.records if self.records else 100.0

    def add(self, other: Summary) -> None:
        """Count ``other`` (another worker's part of the same run) in this one."""
        for name in ("files", "bytes", "records", "stored", "duplicates", "expired", "unparsed", "quarantined", "blank",
                     "no_node", "yearless"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.parse_error = self.parse_error or other.parse_error
        self.kinds.update(other.kinds)
        self.sources.update(other.sources)
        self.failed.extend(other.failed)
        self.boot_copies.add(other.boot_copies)
        self.file_ids |= other.file_ids
        self.years |= other.years
