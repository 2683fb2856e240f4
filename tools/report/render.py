"""A report's blocks (:mod:`superfabric.tools.report.document`) as Markdown and as HTML.

``report.md`` links the PNGs next to it; ``report.html`` embeds them as
``data:`` URIs and loads nothing else, so it can be archived or mailed on
its own.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

__all__ = ["render_markdown", "render_html"]


def render_markdown(blocks: list[tuple]) -> str:
    """The blocks as Markdown; figures link the PNGs next to ``report.md``."""
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append(f"{'#' * block[1]} {block[2]}")
        elif kind == "p":
            out.append(block[1])
        elif kind in ("alert", "ok"):
            out.append(f"**{block[1]}**")
        elif kind == "list":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "pre":
            out.append(f"```\n{block[1]}\n```")
        elif kind == "table":
            _, header, rows, numeric = block
            lines = ["| " + " | ".join(cell(h) for h in header) + " |",
                     "|" + "|".join("---:" if i in numeric else "---"
                                    for i in range(len(header))) + "|"]
            lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "figure":
            plot = block[1]
            out.append(f"![{plot.title}]({plot.name})\n\n*{plot.caption}*")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 1400px; margin: 1.5em auto;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 12.5px; }
th, td { border: 1px solid #ccc; padding: 2px 7px; }
th { background: #f0f0f0; } tr:nth-child(even) td { background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.alert { color: #a00; font-weight: bold; } .ok { color: #070; font-weight: bold; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.92em; color: #444; max-width: 60em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
"""

# For headless checks (tests/test_report.py): how many images decoded, and
# any script error; it sits first in <body> so the body exists when it runs.
_SCRIPT = """
window.onerror = function (message) {
  var body = document.body;
  body.dataset.errors = (body.dataset.errors ? body.dataset.errors + " | " : "") + message;
};
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  document.body.dataset.imagesLoaded = images.filter(function (img) {
    return img.complete && img.naturalWidth > 0;
  }).length;
  document.body.dataset.imagesTotal = images.length;
});
"""


def render_html(blocks: list[tuple], out: Path) -> str:
    """The blocks as one self-contained HTML page; the PNGs in ``out`` are embedded."""
    esc = html.escape
    title = next(b[2] for b in blocks if b[0] == "h")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{esc(title)}</title>", f"<style>{_CSS}</style></head>",
             f"<body><script>{_SCRIPT}</script>"]
    for block in blocks:
        kind = block[0]
        if kind == "h":
            parts.append(f"<h{block[1]}>{esc(block[2])}</h{block[1]}>")
        elif kind == "p":
            parts.append(f"<p>{esc(block[1])}</p>")
        elif kind in ("alert", "ok"):
            parts.append(f'<p class="{kind}">{esc(block[1])}</p>')
        elif kind == "list":
            parts.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in block[1]) + "</ul>")
        elif kind == "pre":
            parts.append(f"<pre>{esc(block[1])}</pre>")
        elif kind == "table":
            _, header, rows, numeric = block
            head = "".join(f"<th>{esc(h)}</th>" for h in header)
            body = "".join(
                "<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{esc(str(c))}</td>'
                                 for i, c in enumerate(row)) + "</tr>" for row in rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "figure":
            plot = block[1]
            png = base64.b64encode((out / plot.name).read_bytes()).decode("ascii")
            parts.append(f'<figure><img src="data:image/png;base64,{png}" '
                         f'alt="{esc(plot.title)}"><figcaption>{esc(plot.caption)}'
                         f"</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
