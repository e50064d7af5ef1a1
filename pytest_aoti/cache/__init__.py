"""The package cache's session side: its options (``options``). The cache itself is ``core.cache``."""
