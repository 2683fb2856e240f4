"""``superfabric report``: Markdown, HTML and PNG reports of one run or a whole sweep.

Switch runs, RDMA runs (``rdma-*`` patterns) and collectives
(``collective:``) measure different things, so a report is of one
:class:`~superfabric.tools.report.data.ReportKind`,
:data:`~superfabric.tools.report.switch.SWITCH`,
:data:`~superfabric.tools.report.rdma.RDMA` or
:data:`~superfabric.tools.report.collective.COLLECTIVE`; a source that mixes
kinds is refused. A report with a run of many routers is
:data:`~superfabric.tools.report.fabric.FABRIC`'s (its references are the
topology's). The parts, one module each:

- :mod:`~superfabric.tools.report.source`: reading run and sweep directories;
- :mod:`~superfabric.tools.report.data`: figures per run and simulator,
  curves averaged over seeds, the kinds' interface;
- :mod:`~superfabric.tools.report.plots`: what every plot is drawn with;
- :mod:`~superfabric.tools.report.switch`, :mod:`~superfabric.tools.report.fabric`,
  :mod:`~superfabric.tools.report.rdma` and :mod:`~superfabric.tools.report.collective`:
  each kind's plots, checks and tables;
- :mod:`~superfabric.tools.report.document`: the document, from the
  attention list to the provenance;
- :mod:`~superfabric.tools.report.render`: the document as Markdown and HTML.

An RTL run also carries the golden model's figures for the same trace; they
form the model's curve (dashed), the RTL's is solid with markers. A new
figure is one more function in a kind's ``PLOTS``.
"""

from __future__ import annotations

from pathlib import Path

from .data import ReportData, choose_load, measures
from .fabric import FABRIC, is_fabric
from .document import document, format_latency, format_throughput
from .render import render_html, render_markdown
from .source import ReportError, load_source
from .switch import SWITCH, TABLE_HEADER, hol_saturation, oq_queueing_delay

__all__ = ["ReportError", "TABLE_HEADER", "format_latency", "format_throughput", "hol_saturation",
           "oq_queueing_delay", "write_report"]


def write_report(src: Path, out: Path, *, cdf_load: float | None = None) -> Path:
    """Write ``report.md``, ``report.html`` and the PNG plots of a run or a sweep.

    Parameters
    ----------
    src : pathlib.Path
        A run directory (``results.json``) or a sweep directory (``sweep.json``),
        of switch traffic or of RDMA traffic (``rdma-*`` patterns), not both.
    out : pathlib.Path
        Report directory, created when missing; the PNGs go next to the reports.
    cdf_load : float, optional
        Offered load of the latency CDF (and, for switch runs, per-port
        throughput and PFC) plots; it must be a load of the runs. Default:
        the highest load <= 0.9 present.

    Returns
    -------
    pathlib.Path
        The path of ``report.html``.

    Raises
    ------
    ReportError
        When ``src`` is neither kind of directory, a file in it is unreadable,
        it mixes switch and RDMA runs, or ``cdf_load`` is not a load of its runs.
    """
    source = load_source(src)
    if source.kind == "rdma":
        from .rdma import RDMA as kind
    elif source.kind == "collective":
        from .collective import COLLECTIVE as kind
    elif any(is_fabric(p.results) for p in source.ok):
        kind = FABRIC
    else:
        kind = SWITCH
    ok = source.ok
    data = ReportData(source=source, measures=measures(ok, kind),
                      chosen_load=choose_load(ok, cdf_load), kind=kind)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plots = []
    for make in kind.plots:
        plot = make(data)
        if plot is not None:
            plot.figure.savefig(out / plot.name, dpi=110)
            plots.append(plot)
    blocks = document(data, plots)
    (out / "report.md").write_text(render_markdown(blocks), encoding="utf-8")
    path = out / "report.html"
    path.write_text(render_html(blocks, out), encoding="utf-8")
    return path
