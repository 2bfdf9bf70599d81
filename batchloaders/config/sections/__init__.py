"""The semantic check of a loader config, one module per config section (run in order by config.py)."""
