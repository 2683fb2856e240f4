"""``superfabric report``: reports of runs, sweeps and syntheses (Markdown, HTML, PNG).
"""
