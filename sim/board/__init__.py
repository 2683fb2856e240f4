"""The model of the board top (section 13.5)."""
