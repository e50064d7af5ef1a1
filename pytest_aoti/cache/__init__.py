"""The package cache as a feature of pytest-aoti: its options and the header's part (``options``), the session's one
cache (``session``), its statistics across xdist workers and the lines that tell them (``stats``), and its pytest
plugin (``plugin``). The cache itself is ``core.cache``."""
