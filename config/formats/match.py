"""The ``match`` section of a switch run's ``results.json``: RTL held against the model.

The scoreboard (``superfabric.tb.scoreboard.compare``) returns a
:class:`Comparison`; the run writes :meth:`Comparison.to_dict` into
``results.json`` and :meth:`Comparison.report` into ``mismatch.txt``, and a
report reads the section back with :meth:`Comparison.from_dict` to say the
same one line.
"""

from dataclasses import dataclass, field

__all__ = ["Comparison"]

#: Problems kept in ``results.json`` (the mismatch report has them all).
_KEPT_PROBLEMS = 20
#: Problems in the one-line summary.
_SUMMARY_PROBLEMS = 5


@dataclass
class Comparison:
    """The outcome of comparing one run's RTL records with the model's.

    Attributes
    ----------
    exact : bool
        Every packet, frame and counter equal.
    mismatches : int
        Packets whose records differ.
    first_mismatch : dict or None
        The first of them in time: ``tag``, ``field``, ``rtl``, ``model``,
        ``cycle_rtl``, ``cycle_model``.
    problems : list of str
        One line per problem beyond per-packet fields (stalls, order, frames,
        counters...).
    table : list of str
        The first differing packets, RTL and model side by side.
    """

    exact: bool
    mismatches: int
    first_mismatch: dict | None
    problems: list[str] = field(default_factory=list)
    table: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: exact, or how many mismatches, the first one and the first problems."""
        if self.exact:
            return "RTL matches the model exactly"
        lines = [f"RTL differs from the model: {self.mismatches} packet(s) differ"]
        if self.first_mismatch:
            fm = self.first_mismatch
            lines.append(f"first: tag {fm['tag']} ({fm['field']}): RTL {fm['rtl']} vs model {fm['model']}")
        lines += self.problems[:_SUMMARY_PROBLEMS]
        return "; ".join(lines)

    def report(self) -> str:
        """The summary and the first differing records side by side."""
        return self.summary() + "\n\n" + "\n".join(self.table) + "\n"

    def to_dict(self) -> dict:
        """The ``match`` section of ``results.json``."""
        return {"exact": self.exact, "mismatches": self.mismatches,
                "first_mismatch": self.first_mismatch, "problems": self.problems[:_KEPT_PROBLEMS]}

    @classmethod
    def from_dict(cls, match: dict) -> "Comparison":
        """The comparison a ``match`` section describes (without the side-by-side table)."""
        return cls(exact=bool(match["exact"]), mismatches=int(match.get("mismatches", 0)),
                   first_mismatch=match.get("first_mismatch"),
                   problems=list(match.get("problems") or []))
