"""Golden models of the fabric (pure Python + numpy; never imports Amaranth)."""
