"""The package cache as a feature of pytest-aoti: its options (``options``), the session's one cache and its
statistics (``session``), and its pytest plugin (``plugin``). The cache itself is ``core.cache``."""
